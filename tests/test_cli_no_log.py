"""Commands that read a log refuse to invent one (run in the wrong place, they say so)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bootstrap import build_services
from infra.settings import Settings
from tests.support import env_for

REPO = Path(__file__).resolve().parents[1]
READERS = [
    ["verify"],
    ["replay"],
    ["export"],
    ["activity"],
    ["checkpoints"],
    ["keys", "list"],
]


def tachograph(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("command", READERS + [["doctor"]], ids=lambda c: " ".join(c))
def test_a_reader_run_where_there_is_no_log_fails_naming_it_and_creates_nothing(
    command: list[str], tmp_path: Path
) -> None:
    empty = tmp_path / "project"
    empty.mkdir()
    env = {"PATH": "/usr/bin:/bin"}  # no TACHOGRAPH_DATA_DIR: ./data of the directory
    done = tachograph(empty, env, *command)
    assert done.returncode != 0
    wanted = str(empty / "data" / "tachograph.sqlite")
    assert wanted in done.stderr + done.stdout
    if command != ["doctor"]:
        assert done.stderr.count("\n") == 1, done.stderr  # one line
    assert not done.stdout.startswith("OK")
    assert tree(empty) == []


def test_data_dir_option_points_a_reader_at_the_servers_log(tmp_path: Path) -> None:
    served = tmp_path / "server"
    settings = Settings(data_dir=served / "data", workspace_root=tmp_path)
    build_services(settings).close()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin"}
    for command in READERS:
        done = tachograph(elsewhere, env, *command, "--data-dir", str(served / "data"))
        assert done.returncode == 0, (command, done.stderr)
    assert tree(elsewhere) == []


def test_a_store_without_a_log_is_named_then_read_once_it_has_one(settings: Settings) -> None:
    env = env_for(settings)
    done = tachograph(REPO, env, "verify")
    assert done.returncode == 2
    if settings.database_url is None:
        assert str(settings.sqlite_path) in done.stderr
        assert not settings.data_dir.exists()
    else:
        assert f"schema {settings.database_schema}" in done.stderr
    build_services(settings).close()
    verified = tachograph(REPO, env, "verify")
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith("OK")
