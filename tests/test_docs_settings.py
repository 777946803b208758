"""docs/settings.md lists exactly the TACHOGRAPH_* variables the repository reads."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_docs_links import tracked

ROOT = Path(__file__).resolve().parents[1]
SETTINGS_DOC = ROOT / "docs" / "settings.md"
NAME = re.compile(r"\bTACHOGRAPH_[A-Z0-9_]*[A-Z0-9]\b")
# A test reads a variable of its own only through the environment.
TEST_READ = re.compile(r"""(?:environ(?:\.get)?\(|environ\[|getenv\()\s*["'](TACHOGRAPH_\w+)""")


def product_files() -> list[Path]:
    """Code, scripts and deployment files: everything but tests and documents."""
    return [
        path
        for path in tracked()
        if path.relative_to(ROOT).parts[0] != "tests"
        and path.relative_to(ROOT).parts[0] != "docs"
        and path.suffix != ".md"
    ]


def names_read() -> dict[str, str]:
    """Each variable the repository reads, with one file that names it."""
    found: dict[str, str] = {}
    for path in product_files():
        for name in NAME.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    for path in tracked("tests/*.py", "tests/**/*.py"):
        for name in TEST_READ.findall(path.read_text(encoding="utf-8", errors="replace")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def names_documented() -> set[str]:
    """The variables named in the first column of docs/settings.md's tables."""
    rows = re.findall(r"^\| `(TACHOGRAPH_[A-Z0-9_]+)` \|", SETTINGS_DOC.read_text(), re.M)
    return set(rows)


def test_every_variable_the_code_reads_is_documented() -> None:
    missing = {name: where for name, where in names_read().items()}
    for name in names_documented():
        missing.pop(name, None)
    assert missing == {}, "add a row to docs/settings.md for each"


def test_every_documented_variable_is_read_somewhere() -> None:
    assert sorted(names_documented() - set(names_read())) == []


def test_each_variable_has_one_row_with_a_meaning() -> None:
    text = SETTINGS_DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(TACHOGRAPH_[A-Z0-9_]+)` \|(.*)$", text, re.M)
    by_section: dict[str, int] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line
        match = re.match(r"^\| `(TACHOGRAPH_[A-Z0-9_]+)` \|", line)
        if match:
            key = f"{section} {match.group(1)}"
            by_section[key] = by_section.get(key, 0) + 1
    assert [key for key, count in by_section.items() if count > 1] == []
    assert [name for name, rest in rows if len(rest.strip(" |")) < 10] == []
