"""The log submits its signed checkpoints to TACHOGRAPH_WITNESSES and serves the cosignatures.

A real `tachograph witness` follows the log's note key; the server's scheduler job sends
each new checkpoint with its consistency proof from the size the witness last cosigned,
and GET /api/log/checkpoint carries the cosignature. A witness that is down at first is
retried until it answers. On both stores.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain.cosignature import CosignerKey, verified_cosignature
from domain.signed_note import CheckpointBody, VerifierKey, open_note
from infra.note_key import ed25519_check, load_note_key
from infra.settings import Settings, SettingsError
from infra.witness_peers import parse_witnesses
from tests.support import env_for, free_port, run_cli
from tests.test_log_bundle import offline_verify
from tests.test_witness import WitnessProc


def grow(client: TestClient, sessions: int) -> None:
    for _ in range(sessions):
        assert client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201


def assurance(client: TestClient) -> dict[str, object]:
    report = client.get("/api/log/verify").json()
    assert report["ok"], report
    return dict(report["assurance"])


def cosigned_checkpoint(client: TestClient, key: CosignerKey, at_least: int) -> CheckpointBody:
    """The served checkpoint once it is of `at_least` leaves and cosigned by `key`."""
    log_key = VerifierKey.parse(client.get("/api/log/key").text)
    deadline = time.monotonic() + 30
    while True:
        note = client.get("/api/log/checkpoint")
        if note.status_code == 200:
            body = CheckpointBody.parse(open_note(note.text, log_key, ed25519_check))
            if body.size >= at_least and f"\u2014 {key.name} " in note.text:
                verified_cosignature(note.text, key, ed25519_check)
                return body
        assert time.monotonic() < deadline, f"not cosigned at size {at_least}: {note.text}"
        time.sleep(0.1)


def test_checkpoints_are_cosigned_and_a_witness_down_is_retried(
    settings: Settings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="services.witness_submit")
    note_key = load_note_key(settings.note_key_path, create=True)
    assert note_key is not None
    port = free_port()
    witness_file = tmp_path / "witness.key"
    witness_key = load_note_key(witness_file, create=True, kind="tachograph.witness")
    assert witness_key is not None
    # A second witness that never answers: the level counts only the one that cosigned.
    absent = load_note_key(tmp_path / "absent.key", create=True, kind="tachograph.witness")
    assert absent is not None
    setting = (
        f"http://127.0.0.1:{port}={witness_key.cosigner_verifier_key},"
        f"http://127.0.0.1:{free_port()}/w2={absent.cosigner_verifier_key}"
    )
    peers = parse_witnesses(setting)
    cosigner = peers[0].key
    served = settings.with_(witnesses=peers, log_note_every_events=1, log_note_every_s=0.2)
    with TestClient(create_app(served)) as client:
        session = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
        grow(client, 2)
        time.sleep(0.5)  # the job has run at least once against no witness at all
        assert "\u2014 tachograph.witness/" not in client.get("/api/log/checkpoint").text
        assert assurance(client) == {"level": "signed", "cosignedBy": 0, "witnesses": 2}
        witness = WitnessProc(
            tmp_path, witness_file, [f"{note_key.name}={note_key.verifier_key}"], port=port
        )
        try:
            first = cosigned_checkpoint(client, cosigner, 4)
            for _ in range(3):
                assert (
                    client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201
                )
            # The second submission proves consistency from the first cosigned size.
            second = cosigned_checkpoint(client, cosigner, first.size + 3)
            assert second.size > first.size
            assert assurance(client) == {"level": "witnessed", "cosignedBy": 1, "witnesses": 2}
        finally:
            witness.kill()
    verified = subprocess.run(
        [sys.executable, "-m", "cli.main", "verify"],
        env={**env_for(settings), "TACHOGRAPH_WITNESSES": setting},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stderr
    assert "assurance: witnessed by 1 of 2" in verified.stdout
    # A session's bundle carries the cosigned checkpoint; offline, the cosignature counts.
    bundle = tmp_path / "bundle.json"
    assert (
        run_cli(settings, "export", "--session", session, "--bundle", str(bundle)).returncode == 0
    )
    witness_keys = (witness_key.cosigner_verifier_key, absent.cosigner_verifier_key)
    offline = offline_verify(bundle, note_key.verifier_key, witness_keys)
    assert offline.returncode == 0, offline.stdout + offline.stderr
    assert offline.stdout.rstrip().endswith("; witnessed by 1 of 2"), offline.stdout
    # A cosignature altered in the bundle fails it, naming the witness.
    doc = json.loads(bundle.read_text())
    line = next(x for x in doc["checkpoint"].splitlines() if witness_key.name in x)
    doc["checkpoint"] = doc["checkpoint"].replace(line, line[:-6] + "AAAA==")
    bundle.write_text(json.dumps(doc))
    offline = offline_verify(bundle, note_key.verifier_key, witness_keys)
    assert offline.returncode == 1, offline.stdout
    assert f"invalid cosignature by {witness_key.name}" in offline.stdout
    refusals = [r.getMessage() for r in caplog.records if "did not cosign" in r.getMessage()]
    assert refusals and f"127.0.0.1:{port}" in refusals[0]


def test_witnesses_setting_is_validated_naming_it() -> None:
    for value, named in [
        ("ftp://w.example=x", "expected an http"),
        ("https://w.example", "expected URL=COSIGNERKEY"),
        ("https://w.example=w.example+00000000+AAAA", "cosigner key"),
    ]:
        with pytest.raises(SettingsError, match=f"^TACHOGRAPH_WITNESSES: .*{named}"):
            Settings.from_env({"TACHOGRAPH_WITNESSES": value})
