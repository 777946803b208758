"""The repository cites only documents it contains (links in the docs, paths in the code)."""

from __future__ import annotations

import ast
import functools
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", *patterns],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_every_relative_link_in_the_docs_names_a_file_in_the_repository() -> None:
    broken = []
    for doc in tracked("*.md"):
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            if not (doc.parent / target.split("#", 1)[0]).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_nothing_cites_files_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared/|(?<![\w/])SPEC\.md")
    citing = [
        str(path.relative_to(ROOT))
        for path in tracked("*.md", "*.py", "*.toml", "scripts/*", ".ci/*")
        if path.name != "test_docs_links.py"
        and outside.search(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert citing == []


# A document cited in prose: a path ending in .md (Markdown anywhere in a document or a
# data file; in Python, in comments and docstrings, since string literals there are data).
MD_END = re.compile(r"\.md\b")
PATH_TAIL = re.compile(r"[\w./-]*$")
# The files agents read in the repositories they work in: named, never cited.
AGENT_FILES = ("claude.md", "claude.local.md", "agents.md", "agents.override.md", "gemini.md")
AGENT_FILES_ALSO = ("copilot-instructions.md", "qwen.md", "output-language.md")
# Documents of other repositories, cited with the repository on the same line.
ELSEWHERE = {
    "kitty-specs/001-bumper-lanes/RESEARCH_FINDINGS.md": "kylesnowschwartz/claude-bumper-lanes"
}
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)?)")
TEXT_SUFFIXES = {".md", ".py", ".toml", ".json", ".yaml", ".yml", ".conf", ".cfg", ".txt", ""}


def prose(path: Path) -> str:
    """What a file says to its reader: comments and docstrings of Python, all of the rest."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".py" or (".md" not in text and "§" not in text):
        return text
    parts = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(text).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                parts.append(docstring)
    return "\n".join(parts)


@functools.cache
def proses() -> tuple[tuple[Path, str], ...]:
    """Each text file of the repository (but this one) with its prose."""
    return tuple(
        (path, prose(path))
        for path in tracked()
        if path.suffix in TEXT_SUFFIXES
        and path.name != "test_docs_links.py"
        and b"\0" not in path.read_bytes()[:1024]
    )


def test_every_document_cited_anywhere_is_in_the_repository() -> None:
    missing = []
    for path, text in proses():
        for cited in cited_documents(text):
            name = cited.lower()
            if name.endswith(AGENT_FILES) or name.endswith(AGENT_FILES_ALSO):
                continue
            if (ROOT / cited).exists() or (path.parent / cited).exists():
                continue
            line = next(line for line in text.splitlines() if cited in line)
            if cited in ELSEWHERE and ELSEWHERE[cited] in line:
                continue
            missing.append(f"{path.relative_to(ROOT)} -> {cited}")
    assert missing == []


def cited_documents(text: str) -> list[str]:
    """The paths ending in .md the text names (read back from each `.md`: fast)."""
    found = []
    for end in MD_END.finditer(text):
        tail = PATH_TAIL.search(text, max(0, end.start() - 300), end.start())
        stem = tail.group(0) if tail else ""
        if stem.strip("./"):
            found.append(stem + ".md")
    return found


def spec_sections() -> set[str]:
    headings = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8").splitlines()
    found = set()
    for heading in headings:
        match = re.match(r"^#{2,4} (\d+(?:\.\d+)?)[. ]", heading)
        if match:
            found.add(match.group(1))
    return found


def test_every_section_of_the_spec_cited_is_in_docs_spec() -> None:
    sections = spec_sections()
    assert {"1", "6", "6.2", "12"} <= sections
    unknown = sorted(
        f"{path.relative_to(ROOT)} -> §{number}"
        for path, text in proses()
        for number in set(SECTION.findall(text))
        if number not in sections
    )
    assert unknown == []
