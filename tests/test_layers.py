"""Layering (SPEC §1): which package may import which, for every package of the product.

The composition root (`bootstrap`) wires everything; `api` holds HTTP only and sees the
root only in its app factory (routes get each collaborator through api/deps.py), `cli` the
commands, `bench` the benchmarks, `hook_client` what an agent runtime spawns per hook.
`domain` is pure: the stdlib, eventsourcing and pydantic only.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Every first-party package, and what each may import of the others.
ALLOWED: dict[str, set[str]] = {
    "domain": set(),
    "infra": {"domain"},
    "projections": {"domain"},
    # The application service of hook ingestion: the domain, and its own ports.
    "ingest": {"domain"},
    "services": {"domain", "infra", "projections"},
    "scheduler": {"domain", "infra", "projections", "services"},
    "api": {"domain", "infra", "projections", "ingest", "services", "scheduler"},
    # The composition root builds the services; the HTTP app is built on top of it.
    "bootstrap": {"domain", "infra", "projections", "ingest", "services", "scheduler"},
    "bench": {
        "domain",
        "infra",
        "projections",
        "ingest",
        "services",
        "scheduler",
        "api",
        "bootstrap",
    },
    "cli": {
        "domain",
        "ingest",
        "infra",
        "projections",
        "services",
        "scheduler",
        "api",
        "bootstrap",
        "bench",
        "hook_client",
    },
    # Spawned on every tool call: the stdlib, and the runtimes' answer formats it falls back to.
    "hook_client": {"ingest", "domain"},
}
FIRST_PARTY = set(ALLOWED)
# The api modules that may import the composition root besides their layer: the app factory,
# which builds the HTTP app on it and hands the routes their collaborators one by one.
APP_FACTORY = "api/app.py"
DOMAIN_THIRD_PARTY = {"eventsourcing", "pydantic"}
# What the command hook may load besides the stdlib; each of them stdlib-only in turn.
HOOK_CLIENT_MODULES = {
    "ingest.runtimes.claude_code",
    "ingest.runtimes.codex",
    "ingest.runtimes.copilot_cli",
    "ingest.runtimes.gemini_cli",
    "ingest.runtimes.qwen_code",
    "ingest.runtimes.factory_droid",
    "ingest.runtimes.opencode",
    "ingest.runtimes.claude_shaped",
    "ingest.runtimes.patches",
    "ingest.runtimes.runtimes",
    "domain.casing",
    "domain.hook_dispatch",
    "domain.policy.verdict",
    "domain.hook_config",
    "domain.lifecycle",
    "domain.lifecycle_events",
    "domain.ids",
}


def imports(path: Path) -> set[str]:
    """Every absolute module name `path` imports (`from a.b import c` gives `a.b`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def imported_roots(path: Path) -> set[str]:
    return {name.split(".")[0] for name in imports(path)}


def sources(package: str) -> list[Path]:
    single = ROOT / f"{package}.py"
    return [single] if single.is_file() else sorted((ROOT / package).rglob("*.py"))


def test_every_package_is_covered() -> None:
    on_disk = {
        p.parent.name for p in ROOT.glob("*/__init__.py") if p.parent.name not in ("tests",)
    } | {p.stem for p in ROOT.glob("*.py")}
    assert on_disk == FIRST_PARTY, "a package without layering rules, or rules for none"


def allowed_imports(package: str, path: Path) -> set[str]:
    """What one module may import: its package's layer, and the composition root for the
    app factory alone."""
    name = path.relative_to(ROOT).as_posix()
    root = {"bootstrap"} if name == APP_FACTORY else set()
    return ALLOWED[package] | root | {package}


def layer_offenders() -> dict[str, list[str]]:
    offenders: dict[str, list[str]] = {}
    for package in ALLOWED:
        for path in sources(package):
            bad = (imported_roots(path) & FIRST_PARTY) - allowed_imports(package, path)
            if bad:
                offenders[str(path.relative_to(ROOT))] = sorted(bad)
    return offenders


def test_each_package_imports_only_what_its_layer_allows() -> None:
    assert layer_offenders() == {}


def test_a_route_importing_the_composition_root_is_an_offender(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Only the app factory sees bootstrap: a route taking the Services bag is refused."""
    (tmp_path / "api/routes").mkdir(parents=True)
    (tmp_path / "api/app.py").write_text("from bootstrap import build_services\n")
    (tmp_path / "api/routes/things.py").write_text("from bootstrap import Services\n")
    (tmp_path / "bootstrap.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert layer_offenders() == {"api/routes/things.py": ["bootstrap"]}


def test_domain_imports_only_stdlib_eventsourcing_and_pydantic() -> None:
    offenders = {}
    for path in sources("domain"):
        bad = {
            r
            for r in imported_roots(path)
            if r not in sys.stdlib_module_names
            and r not in DOMAIN_THIRD_PARTY
            and r not in ("domain", "__future__")
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_the_hook_client_imports_the_stdlib_and_one_stdlib_only_module() -> None:
    offenders = {}
    lean = [ROOT / f"{name.replace('.', '/')}.py" for name in sorted(HOOK_CLIENT_MODULES)]
    for path in [*sources("hook_client"), *lean]:
        bad = {
            name
            for name in imports(path)
            if name.split(".")[0] not in sys.stdlib_module_names
            and name.split(".")[0] not in ("hook_client", "__future__")
            and name != "domain"
            and name not in HOOK_CLIENT_MODULES
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


# Wire casing stays at the edge (issue: one inbound shape). The only camelCase strings the
# domain may hold are values that are not keys of ours: runtime tool names, and the keys
# version 1 events stored, which the upcaster renames.
CAMEL_CASE = re.compile(r"[a-z][a-z0-9]*(?:[A-Z][a-z0-9]+)+")
DOMAIN_CAMEL_CASE_ALLOWED = {
    "hook_dispatch.py": {"storeSecret", "recallSecret", "updateSecret"},
    "hook_dispatch_record.py": {"handlerId", "durationMs", "continueCapped"},
}


def camel_case_strings(path: Path) -> set[str]:
    """String literals of `path` that are camelCase identifiers (docstrings aside)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and CAMEL_CASE.fullmatch(node.value)
    }


def test_domain_holds_no_wire_casing() -> None:
    offenders = {}
    for path in sources("domain"):
        found = camel_case_strings(path) - DOMAIN_CAMEL_CASE_ALLOWED.get(path.name, set())
        if found:
            offenders[path.name] = sorted(found)
    assert offenders == {}


def test_casing_checker_finds_a_camel_case_key(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Takes timeoutMs."""\nKEYS = {"timeoutMs": 1, "timeout_ms": 2, "Stop": 3}\n'
    )
    assert camel_case_strings(sample) == {"timeoutMs"}


def test_checker_detects_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("from api.app import create_app\nimport httpx\nimport json\n")
    assert imported_roots(sample) == {"api", "httpx", "json"}
    assert imports(sample) == {"api.app", "httpx", "json"}


def test_every_package_is_installed_type_checked_and_shipped() -> None:
    """A package the installed `tachograph` cannot import fails only outside the repo."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = FIRST_PARTY - {"bootstrap"}
    found = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {p.rstrip("*") for p in found} == packages
    assert config["tool"]["setuptools"]["py-modules"] == ["bootstrap"]
    assert set(config["tool"]["mypy"]["packages"]) == packages
    copied = re.findall(r"^COPY (\S+) ", (ROOT / "infra/deploy/Dockerfile").read_text(), re.M)
    assert packages | {"bootstrap.py"} <= set(copied)


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_circles(package: str) -> list[list[str]]:
    """Circles of imports among one package's modules (type-checking imports count too:
    a friend class hidden behind TYPE_CHECKING is still a friend)."""
    modules = {module_name(path): path for path in sources(package)}
    graph = {
        name: {
            target
            for imported in imports(path)
            for target in (imported, imported.rsplit(".", 1)[0])
            if target in modules and target != name
        }
        for name, path in modules.items()
    }
    circles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == trail[0]:
                circles.append([*trail, nxt])
            elif nxt not in trail and nxt > trail[0]:  # each circle once, from its least
                visit(nxt, [*trail, nxt])

    for start in sorted(graph):
        visit(start, [start])
    return circles


def test_no_package_imports_itself_in_a_circle() -> None:
    found = {package: import_circles(package) for package in sorted(FIRST_PARTY)}
    assert {package: circles for package, circles in found.items() if circles} == {}


def test_the_circle_check_finds_a_circle(tmp_path: Path, monkeypatch: Any) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import x\n")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import y\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert import_circles("pkg") == [["pkg.a", "pkg.b", "pkg.a"]]


def test_the_runtime_adapters_are_standard_library_mappings() -> None:
    """Each runtime's mapping (ingest/runtimes/) reads and writes plain data: the hook
    client, the installers and the routes all load it, so it needs no framework."""
    offenders = {}
    for path in sources("ingest/runtimes"):
        bad = {
            name
            for name in imports(path)
            if name.split(".")[0] not in sys.stdlib_module_names
            and name not in ("__future__", "domain")
            and not name.startswith(("domain.", "ingest.runtimes"))
        }
        if bad:
            offenders[path.name] = sorted(bad)
    assert offenders == {}


def test_every_runtime_names_its_events_from_the_one_vocabulary() -> None:
    from domain import lifecycle_events
    from ingest.runtimes.runtimes import RUNTIMES

    order = lifecycle_events.NORMALISED_EVENTS
    for runtime in RUNTIMES.values():
        events = tuple(runtime.normalised_events)
        assert set(events) <= set(order), runtime.name
        assert list(events) == sorted(events, key=order.index), runtime.name
        gates = set(runtime.gate_events) - {lifecycle_events.PERMISSION_REQUEST}
        assert gates <= lifecycle_events.GATE_EVENTS, runtime.name
