"""Layering: domain imports only the stdlib, eventsourcing and pydantic (SPEC §1)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_THIRD_PARTY = {"eventsourcing", "pydantic", "domain"}
OUTER = {"api", "projections", "scheduler", "infra"}


def imported_roots(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_domain_imports_only_stdlib_eventsourcing_and_pydantic() -> None:
    offenders = {}
    for path in sorted((ROOT / "domain").rglob("*.py")):
        bad = {
            r
            for r in imported_roots(path)
            if r not in sys.stdlib_module_names
            and r not in ALLOWED_THIRD_PARTY
            and r != "__future__"
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_projections_and_infra_do_not_import_api_or_scheduler() -> None:
    rules = {"projections": OUTER - {"projections"}, "infra": {"api", "projections", "scheduler"}}
    offenders = {}
    for package, forbidden in rules.items():
        for path in sorted((ROOT / package).rglob("*.py")):
            bad = imported_roots(path) & forbidden
            if bad:
                offenders[f"{package}/{path.name}"] = sorted(bad)
    assert offenders == {}


def test_checker_detects_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from api.app import create_app\nimport httpx\nimport json\n")
    assert imported_roots(sample) == {"api", "httpx", "json"}
