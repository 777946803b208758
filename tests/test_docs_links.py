"""The repository cites only documents it contains (links in the docs, paths in the code)."""

from __future__ import annotations

import re
import subprocess
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
