"""Tamper evidence on both stores: the chain, checkpoints, verify (function, route, CLI)."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import Services, build_services
from domain.log_chain import signing_key_id
from domain.log_verify import VerifyReport
from infra.settings import Settings
from projections import log_checkpoints
from projections.log_checkpoints import CHECKPOINTS_TABLE, LINKS_TABLE, LogChainProjection
from projections.log_tree import NODES_TABLE
from projections.rebuild import rebuild
from projections.runner import ProjectionRunner
from services.log_audit import verify_log
from tests.audit_support import KEY, audited_services, bulk_history, read_store
from tests.log_tamper import Tamper
from tests.support import env_for

HEAD = 2501  # the default workspace, then 1,250 sessions created and renamed

TAMPERS: dict[str, tuple[Callable[[Tamper], object], int]] = {
    "edit one payload byte": (lambda t: t.flip_payload_byte(1500, b"auditor"), 1500),
    "delete a row": (lambda t: t.delete(1700), 1700),
    "insert a forged row": (lambda t: t.insert_forged(1200, like=1201), 1200),
    "swap two rows' positions": (lambda t: t.swap(1800, 1900), 1800),
}
KINDS = {
    "edit one payload byte": "edited",
    "delete a row": "missing",
    "insert a forged row": "inserted",
    "swap two rows' positions": "reordered",
}


def verify(services: Services) -> VerifyReport:
    return verify_log(services.app, services.store, KEY)


def test_untouched_log_verifies_with_its_count_and_signed_checkpoints(settings: Settings) -> None:
    with audited_services(settings) as services:
        report = verify(services)
        assert report.ok, report.chain_break
        assert (report.events, report.head_position) == (HEAD, HEAD)
        assert (report.checkpoints_checked, report.signed, report.unsigned) == (2, 2, 0)
        assert report.chained_through == HEAD


@pytest.mark.parametrize("tamper", list(TAMPERS))
def test_tampering_is_reported_at_the_first_altered_position(
    settings: Settings, tamper: str
) -> None:
    edit, position = TAMPERS[tamper]
    with audited_services(settings) as services:
        edit(Tamper(settings))
        report = verify(services)
        assert report.chain_break is not None
        assert (report.chain_break.position, report.chain_break.kind) == (position, KINDS[tamper])
        assert report.events == position - 1  # everything before the break verified


def test_checkpoints_every_thousand_events_and_at_shutdown(settings: Settings) -> None:
    with audited_services(settings) as services:
        services.start()
        bulk_history(services.app, 10)  # 20 more events, chained by the running runner
    with read_store(settings) as store:
        rows = store.query(f"SELECT * FROM {CHECKPOINTS_TABLE} ORDER BY seq")
        links = store.query(f"SELECT seq, link FROM {LINKS_TABLE} WHERE seq IN (1000, 2000, 2521)")
    assert [(r["seq"], r["position"], r["kind"]) for r in rows] == [
        (1000, 1000, "periodic"),
        (2000, 2000, "periodic"),
        (HEAD + 20, HEAD + 20, "shutdown"),
    ]
    assert [r["link"] for r in rows] == [r["link"] for r in sorted(links, key=lambda r: r["seq"])]
    assert {r["key_id"] for r in rows} == {signing_key_id(KEY)}


def test_forged_and_deleted_checkpoints_are_caught(settings: Settings) -> None:
    with audited_services(settings) as services:
        with services.store.transaction() as cur:
            cur.execute(f"UPDATE {CHECKPOINTS_TABLE} SET link = ? WHERE seq = 2000", ("ab" * 32,))
        forged = verify(services).chain_break
        with services.store.transaction() as cur:
            cur.execute(f"DELETE FROM {CHECKPOINTS_TABLE} WHERE seq = 2000")
        deleted = verify(services).chain_break
    assert forged is not None and (forged.position, forged.kind) == (2000, "forged_checkpoint")
    assert deleted is not None and (deleted.position, deleted.kind) == (2000, "missing_checkpoint")


def test_unset_key_records_unsigned_checkpoints_with_a_warning(
    settings: Settings, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The warning is printed once per process; this test stands for a fresh process.
    monkeypatch.setattr(log_checkpoints, "_warned_unsigned", [])
    caplog.set_level(logging.WARNING)
    services = build_services(settings)
    try:
        # Building services records nothing: a command that only reads is not warned.
        assert "TACHOGRAPH_LOG_SIGNING_KEY is unset" not in caplog.text
        bulk_history(services.app, 500)
        services.runner.catch_up()
        # Recording the first unsigned checkpoint is what warns, once.
        assert caplog.text.count("TACHOGRAPH_LOG_SIGNING_KEY is unset") == 1
        report = verify_log(services.app, services.store, None)
        assert report.ok and (report.signed, report.unsigned) == (0, 1)
        assert any("SIGNING_KEY is unset" in w for w in report.warnings)
    finally:
        services.stop()


def test_routes_list_checkpoints_and_verify(settings: Settings) -> None:
    keyed = settings.with_(log_signing_key=KEY)
    with TestClient(create_app(keyed), raise_server_exceptions=False) as client:
        services: Services = client.app.state.services  # type: ignore[attr-defined]
        head = bulk_history(services.app, 1250)
        assert services.runner.wait_for(head, 10)
        listed = client.get("/api/log/checkpoints").json()
        assert [c["seq"] for c in listed["items"]] == [2000, 1000]
        assert {c["signatureState"] for c in listed["items"]} == {"valid"}
        assert listed["signingKeyId"] == signing_key_id(KEY) and listed["interval"] == 1000
        assert (
            client.get("/api/log/checkpoints", params={"limit": 1}).json()["items"][0]["seq"]
            == 2000
        )
        older = client.get("/api/log/checkpoints", params={"beforeSeq": 2000}).json()["items"]
        assert [c["seq"] for c in older] == [1000]
        ok = client.get("/api/log/verify").json()
        assert ok["ok"] is True and ok["events"] == head and ok["break"] is None
        assert ok["checkpoints"] == {"total": 2, "checked": 2, "signed": 2, "unsigned": 0}
        Tamper(settings).delete(1700)
        broken = client.get("/api/log/verify").json()
        assert broken["ok"] is False
        assert (broken["break"]["position"], broken["break"]["kind"]) == (1700, "missing")


def run_cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**env_for(settings), "TACHOGRAPH_LOG_SIGNING_KEY": KEY}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
    )


def recompute_chain_without_the_key(services: Services, *, with_tree: bool = False) -> None:
    """What someone with database access but no signing key can do: rebuild chain and ledger.

    The leaves sit beside the links and the chain's projection keeps the tree: rerunning
    it (`with_tree`) rewrites the tree too. Otherwise only the link column and the ledger
    are rewritten, and the tree stays as it was recorded on arrival."""
    chain = LogChainProjection("scratch_")
    chain.records_checkpoints = True  # into the one ledger, as the live chain would
    with services.store.transaction() as cur:
        cur.execute(f"DELETE FROM {CHECKPOINTS_TABLE}")
        if with_tree:
            cur.execute(f"DELETE FROM {LINKS_TABLE}")
            cur.execute(f"DELETE FROM {NODES_TABLE}")
            cur.execute(
                "UPDATE projection_tracking SET position = 0 WHERE name = 'log_checkpoints'"
            )
    if with_tree:
        ProjectionRunner(services.app, services.store, [LogChainProjection()]).catch_up()
        return
    rebuild(services.app, services.store, [chain])
    with services.store.transaction() as cur:
        cur.execute(
            f"UPDATE {LINKS_TABLE} SET link = (SELECT link FROM scratch_log_links s "
            f"WHERE s.position = {LINKS_TABLE}.position)"
        )
        for table in chain.t.values():
            cur.drop(table)


def test_cli_verify_and_an_auditors_copy_catch_a_recomputed_history(
    settings: Settings, tmp_path: Path
) -> None:
    kept = tmp_path / "checkpoints.json"
    with audited_services(settings) as services:
        exported = run_cli(settings, "checkpoints", "--out", str(kept))
        assert exported.returncode == 0, exported.stderr
        assert [c["seq"] for c in json.loads(kept.read_text())["checkpoints"]] == [1000, 2000]
        clean = run_cli(settings, "verify")
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert clean.stdout.startswith(f"OK: {HEAD} events verified")
        assert "verifying" in clean.stderr  # the progress bar

        Tamper(settings).flip_payload_byte(1500, b"auditor")
        caught = run_cli(settings, "verify")
        assert caught.returncode == 1
        assert caught.stdout.startswith("BROKEN at position 1500: edited.")

        recompute_chain_without_the_key(services)
        rechained = run_cli(settings, "verify")
        # The chain now agrees with itself; the Merkle tree recorded on arrival does not ...
        assert rechained.returncode == 1, rechained.stdout
        assert rechained.stdout.startswith("BROKEN at position 1500: merkle_mismatch.")
        assert "No checkpoint is signed" in rechained.stderr
        # ... and the auditor's copy pins the break to its 1,000-event segment.
        audited = run_cli(settings, "verify", "--against", str(kept))
        assert audited.returncode == 1, audited.stdout
        assert audited.stdout.startswith("BROKEN at position 1001: edited.")
        as_json = json.loads(run_cli(settings, "verify", "--json", "--against", str(kept)).stdout)
        assert as_json["ok"] is False and as_json["source"] == "file"

        # Rerunning the chain's projection rewrites the tree beside it as well: the signed
        # checkpoints of the tree still catch it, at the first one after the edit.
        recompute_chain_without_the_key(services, with_tree=True)
        retreed = run_cli(settings, "verify")
        assert retreed.returncode == 1, retreed.stdout
        assert retreed.stdout.startswith("BROKEN at position 2000: checkpoint_mismatch.")


def test_cli_verify_rejects_a_file_that_is_not_a_checkpoint_export(
    settings: Settings, tmp_path: Path
) -> None:
    bogus = tmp_path / "bogus.json"
    bogus.write_text('{"checkpoints": []}')
    build_services(settings).close()  # a log to verify: verify refuses to invent one
    result = run_cli(settings, "verify", "--against", str(bogus))
    assert result.returncode == 2
    assert "is not a tachograph-checkpoints/1 file" in result.stderr
