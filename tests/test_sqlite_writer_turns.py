"""Two processes appending to one SQLite log at once (serve and its OTLP receiver do):
they take turns through the lock file beside the database (infra/sqlite_recorder.py),
and every position each was told holds the event it appended, with none lost or shared.
A process that appends alone takes no turns; another appending beside it all the same
(a CLI command beside serve) is ordered by SQLite's own lock, with the same guarantees.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from infra.event_store import open_application
from infra.log_reader import iter_events
from infra.settings import Settings

APPENDER = """
import json, sys
from domain.session import Session
from infra.event_store import open_application
from infra.settings import Settings

env = {"TACHOGRAPH_DATA_DIR": sys.argv[1]}
if sys.argv[4] == "turns":
    env["TACHOGRAPH_OTLP_PORT"] = "4318"  # serve with a receiver process: both take turns
settings = Settings.from_env(env)
assert settings.sqlite_writer_turns == (sys.argv[4] == "turns")
app = open_application(settings)
told = {}
for batch in range(int(sys.argv[3])):
    sessions = [
        Session(workspace="default", title=f"{sys.argv[2]}-{batch}-{i}", agent=None,
                agent_session_id=None, actor=sys.argv[2])
        for i in range(5)
    ]
    recordings = app.save(*sessions)
    for recording in recordings:
        told[recording.notification.id] = str(recording.domain_event.originator_id)
print(json.dumps(told))
"""

BATCHES = 150


@pytest.mark.parametrize("mode", ["turns", "alone"])
def test_two_appending_processes_each_get_the_positions_of_their_own_events(
    tmp_path: Path, mode: str
) -> None:
    data = tmp_path / "data"
    app = open_application(Settings.from_env({"TACHOGRAPH_DATA_DIR": str(data)}))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(data), name, str(BATCHES), mode],
            stdout=subprocess.PIPE,
            env=env,
            cwd=root,
        )
        for name in ("serve", "receiver")
    ]
    told: dict[int, str] = {}
    for writer in writers:
        out, _ = writer.communicate(timeout=120)
        assert writer.returncode == 0
        theirs = {int(k): v for k, v in json.loads(out).items()}
        assert not told.keys() & theirs.keys()  # no position told to both
        told |= theirs
    assert len(told) == 2 * BATCHES * 5
    logged = {n.id: n.originator_id for n in iter_events(app)}
    assert {p: str(logged[p]) for p in told} == told
    assert sorted(logged) == list(range(1, len(logged) + 1))  # none lost, no gap
    turns = list(data.glob("*-writers.lock"))
    if mode == "turns":
        assert [stat.S_IMODE(t.stat().st_mode) for t in turns] == [0o600]
    else:
        assert turns == []  # appending alone, no lock file is ever made
    app.close()


def test_serve_takes_turns_only_beside_its_receiver_process_which_takes_them_too(
    tmp_path: Path,
) -> None:
    from cli.otlp_receiver import receiver_settings

    alone = Settings.from_env({"TACHOGRAPH_DATA_DIR": str(tmp_path)})
    beside = Settings.from_env(
        {"TACHOGRAPH_DATA_DIR": str(tmp_path), "TACHOGRAPH_OTLP_PORT": "4318"}
    )
    assert (alone.sqlite_writer_turns, beside.sqlite_writer_turns) == (False, True)
    receiver = receiver_settings(beside)
    assert receiver.otlp_port is None and receiver.sqlite_writer_turns
    app = open_application(beside)
    assert app.recorder.takes_turns  # type: ignore[attr-defined]
    app.close()
