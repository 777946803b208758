"""CI check: after an end-to-end workload, replaying every projection from position 0 must
equal the live read models, and the log's hash chain must verify.

`.ci/run` runs `scripts/test`, which runs this module with the others (it builds its own
workload in a store of its own, so its place in the run does not matter); a
projection whose handlers depend on anything but the log (clock, lookups, order of
arrival) shows up here as drift, named by projection, table and key. Extend
`tests.audit_support.mixed_workload` when a feature adds routes that write events.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from infra.settings import Settings
from projections.registry import all_projections
from tests.audit_support import KEY, mixed_workload
from tests.support import env_for


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env={**env_for(settings), "TACHOGRAPH_LOG_SIGNING_KEY": KEY},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[1],
    )


def test_every_projection_replays_without_drift_after_end_to_end_traffic(
    settings: Settings,
) -> None:
    keyed = settings.with_(log_signing_key=KEY)
    with TestClient(create_app(keyed), raise_server_exceptions=False) as client:
        mixed_workload(client, settings, sessions=30)
        # Replay while the API is still serving: the comparison must hold under a live runner.
        live = cli(settings, "replay")
        assert live.returncode == 0, live.stdout + live.stderr
    after = cli(settings, "replay")
    assert after.returncode == 0, after.stdout + after.stderr
    for projection in all_projections():
        assert f"{projection.name}: no drift" in after.stdout, after.stdout
    verified = cli(settings, "verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert verified.stdout.startswith("OK: ") and "(1 signed, 0 unsigned)" in verified.stdout
