"""`serve` keeps its threads on one CPU unless told otherwise (infra/cpu_affinity.py)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from bootstrap import Services
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


def _thread_cpus(pid: int) -> list[str]:
    """Each thread's CPU list as the kernel spells it."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                found.append(line.split(":", 1)[1].strip())
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


@pytest.mark.parametrize(
    ("setting", "projections"), [("auto", "thread"), ("all", "thread"), ("auto", "process")]
)
def test_serve_runs_its_threads_where_the_setting_says(
    settings: Settings, tmp_path: Path, setting: str, projections: str
) -> None:
    allowed = allowed_cpus()
    assert allowed is not None
    env = {"TACHOGRAPH_SERVE_CPU": setting, "TACHOGRAPH_PROJECTIONS": projections}
    server = Server(settings, tmp_path / "serve.log", env)
    try:
        server.wait_ready()
        pid = server.popen.pid
        # With the projections in their own process, `auto` pins nothing (cli/main.py).
        cpu = choose_cpu(setting, allowed, pid) if projections == "thread" else None
        placed = sorted(_thread_cpus(pid))
        everywhere = _cpu_list(allowed)
        assert len(placed) > 3
        if cpu is None:
            assert placed == [everywhere] * len(placed)
        else:
            # Threads started after the pin (uvicorn's, the group commit, pools) are on
            # the CPU; the projection runner alone was let go again.
            assert placed.count(everywhere) == 1
            assert placed.count(str(cpu)) == len(placed) - 1
            # The start-up line names the setting as it is, not the one that turns it off.
            assert f"serving on CPU {cpu}, projections on any CPU" in server.output()
            assert f"(TACHOGRAPH_SERVE_CPU={setting}; `all` pins nothing)" in server.output()
    finally:
        server.kill()


def test_the_runner_names_its_thread_while_it_runs(services: Services) -> None:
    assert services.runner.native_thread_id is None
    services.start()
    assert services.runner.native_thread_id in {t.native_id for t in threading.enumerate()}
    services.stop()
    assert services.runner.native_thread_id is None
