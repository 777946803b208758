"""`serve` keeps its threads on one CPU unless told otherwise (infra/cpu_affinity.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.cpu_affinity import allowed_cpus, choose_cpu
from infra.settings import Settings, SettingsError
from tests.support import Server


def test_auto_spreads_processes_over_the_allowed_cpus() -> None:
    assert [choose_cpu("auto", {2, 5, 7}, pid) for pid in (30, 31, 32, 33)] == [2, 5, 7, 2]
    assert choose_cpu("5", {2, 5, 7}, 30) == 5
    assert choose_cpu("all", {2, 5, 7}, 30) is None
    assert choose_cpu("auto", {3}, 30) is None  # one CPU allowed: nothing to choose


def test_the_setting_is_auto_all_or_an_allowed_cpu() -> None:
    allowed = allowed_cpus()
    assert allowed is not None  # the suite runs on Linux
    assert Settings.from_env({}).serve_cpu == "auto"
    assert Settings.from_env({"TACHOGRAPH_SERVE_CPU": "ALL"}).serve_cpu == "all"
    some = min(allowed)
    assert Settings.from_env({"TACHOGRAPH_SERVE_CPU": str(some)}).serve_cpu == str(some)
    for bad in ("fastest", "-1", str(max(allowed) + 1000)):
        with pytest.raises(SettingsError, match="TACHOGRAPH_SERVE_CPU"):
            Settings.from_env({"TACHOGRAPH_SERVE_CPU": bad})


def _thread_cpus(pid: int) -> set[str]:
    tasks = Path(f"/proc/{pid}/task")
    found = set()
    for task in tasks.iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found.add(line.split(":", 1)[1].strip())
    return found


def _cpu_list(cpus: set[int]) -> str:
    """The kernel's spelling of a CPU set, e.g. "0-1" or "3"."""
    ordered = sorted(cpus)
    runs: list[list[int]] = []
    for cpu in ordered:
        if runs and cpu == runs[-1][-1] + 1:
            runs[-1].append(cpu)
        else:
            runs.append([cpu])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


@pytest.mark.parametrize("setting", ["auto", "all"])
def test_serve_runs_every_thread_where_the_setting_says(
    settings: Settings, tmp_path: Path, setting: str
) -> None:
    allowed = allowed_cpus()
    assert allowed is not None
    server = Server(settings, tmp_path / "serve.log", {"TACHOGRAPH_SERVE_CPU": setting})
    try:
        server.wait_ready()
        pid = server.popen.pid
        threads = len(os.listdir(f"/proc/{pid}/task"))
        cpu = choose_cpu(setting, allowed, pid)
        expected = _cpu_list(allowed) if cpu is None else str(cpu)
        # Threads started after the pin (uvicorn, group commit, projections, pools) too.
        assert threads > 3 and _thread_cpus(pid) == {expected}
    finally:
        server.kill()
