"""Two processes appending to one SQLite log at once (serve and its OTLP receiver do):
they take turns through the lock file beside the database (infra/sqlite_recorder.py),
and every position each was told holds the event it appended, with none lost or shared.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from infra.event_store import open_application
from infra.log_reader import iter_events
from infra.settings import Settings

APPENDER = """
import json, sys
from domain.session import Session
from infra.event_store import open_application
from infra.settings import Settings

settings = Settings.from_env({"TACHOGRAPH_DATA_DIR": sys.argv[1]})
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


def test_two_appending_processes_each_get_the_positions_of_their_own_events(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    app = open_application(Settings.from_env({"TACHOGRAPH_DATA_DIR": str(data)}))
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(data), name, str(BATCHES)],
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
    turns = next(data.glob("*-writers.lock"))
    assert stat.S_IMODE(turns.stat().st_mode) == 0o600
    app.close()
