"""`log key`, `log prove`, `export --bundle` and offline `verify --bundle`, on both stores."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from domain.merkle import verify_inclusion
from domain.signed_note import CheckpointBody, VerifierKey, open_note
from infra.note_key import NoteKey, ed25519_check
from infra.settings import Settings
from tests.support import run_cli

ROOT = Path(__file__).resolve().parents[1]


def recorded_session(settings: Settings) -> str:
    """A session with a few hook events, recorded by a server that has since stopped."""
    with TestClient(create_app(settings)) as client:
        sid = client.post("/api/sessions", json={"workspaceId": "default"}).json()["id"]
        events: list[dict[str, Any]] = [
            {"event": "SessionStart", "agent": "claude-code", "agentSessionId": "a"},
            {"event": "UserPromptSubmit", "turnId": "t1", "prompt": "fix the bug"},
            {"event": "PreToolUse", "turnId": "t1", "toolName": "Bash", "toolInput": {"c": 1}},
            {"event": "Stop", "turnId": "t1"},
        ]
        for n, body in enumerate(events):
            sent = client.post(f"/api/sessions/{sid}/events", json={**body, "eventId": str(n)})
            assert sent.status_code == 200, sent.text
        other = client.post("/api/sessions", json={"workspaceId": "default"})
        assert other.status_code == 201
    return str(sid)


def offline_verify(
    bundle: Path, key: str, witnesses: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`verify --bundle` with no data directory and no database configured."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TACHOGRAPH_DATA_DIR": "/nonexistent"}
    args = ["verify", "--bundle", str(bundle), "--key", key]
    for witness in witnesses:
        args += ["--witness", witness]
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def altered(bundle: dict[str, Any], edit: str) -> str:
    doc = json.loads(json.dumps(bundle))
    event = doc["events"][1]
    if edit == "changed event":
        stored = base64.b64decode(event["stored"]).replace(b"fix the bug", b"fix the bag")
        if stored == base64.b64decode(event["stored"]):
            stored = stored.replace(b"{", b"{ ", 1)
        event["stored"] = base64.b64encode(stored).decode()
    elif edit == "wrong proof":
        event["hashes"][0] = base64.b64encode(bytes(32)).decode()
    elif edit == "dropped proof hash":
        event["hashes"].pop()
    return json.dumps(doc)


def test_a_bundle_verifies_offline_and_names_what_tampering_broke(
    settings: Settings, tmp_path: Path
) -> None:
    sid = recorded_session(settings)
    key = run_cli(settings, "log", "key")
    assert key.returncode == 0, key.stderr
    verifier = key.stdout.strip()
    bundle_path = tmp_path / "bundle.json"
    done = run_cli(settings, "export", "--session", sid, "--bundle", str(bundle_path))
    assert done.returncode == 0, done.stderr
    bundle = json.loads(bundle_path.read_text())
    count = len(bundle["events"])  # the session's events and its hook dispatches
    assert bundle["format"] == "tachograph-bundle/1" and count >= 5

    ok = offline_verify(bundle_path, verifier)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.startswith(f"OK: {count} events included in the tree of size")
    key_file = tmp_path / "log.pub"
    key_file.write_text(verifier + "\n")
    assert offline_verify(bundle_path, str(key_file)).returncode == 0

    failures = {
        "changed event": "not included in the signed tree",
        "wrong proof": "not included in the signed tree",
        "dropped proof hash": "not included in the signed tree",
    }
    for edit, expected in failures.items():
        bad = tmp_path / "bad.json"
        bad.write_text(altered(bundle, edit))
        failed = offline_verify(bad, verifier)
        assert failed.returncode == 1, edit
        position = bundle["events"][1]["position"]
        assert f"FAILED: event 1 (position {position}): {expected}" in failed.stdout, failed.stdout
    other = NoteKey("tachograph.log/other", bytes(range(32))).verifier_key
    failed = offline_verify(bundle_path, other)
    assert failed.returncode == 1
    assert "FAILED: checkpoint: note is not signed by key tachograph.log/other" in failed.stdout
    truncated = tmp_path / "truncated.json"
    truncated.write_text(bundle_path.read_text()[:-200])
    failed = offline_verify(truncated, verifier)
    assert failed.returncode == 1 and "truncated" in failed.stdout
    doc = json.loads(bundle_path.read_text())
    doc["checkpoint"] = doc["checkpoint"].replace("\n", "\n1", 1)  # a larger tree size
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps(doc))
    failed = offline_verify(forged, verifier)
    assert failed.returncode == 1 and "invalid signature" in failed.stdout


def test_log_prove_prints_an_event_with_a_proof_of_the_latest_checkpoint(
    settings: Settings,
) -> None:
    recorded_session(settings)  # the server signs its head at shutdown
    verifier = VerifierKey.parse(run_cli(settings, "log", "key").stdout)
    done = run_cli(settings, "log", "prove", "3")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    body = CheckpointBody.parse(open_note(doc["checkpoint"], verifier, ed25519_check))
    proof = doc["proof"]
    assert doc["event"]["position"] == proof["position"] == 3
    assert proof["treeSize"] == body.size
    hashes = [base64.b64decode(h) for h in proof["hashes"]]
    leaf = base64.b64decode(proof["leafHash"])
    verify_inclusion(proof["leafIndex"], body.size, leaf, hashes, body.root)
    missing = run_cli(settings, "log", "prove", "999")
    assert missing.returncode == 1 and "no event at position 999" in missing.stderr


def test_verify_bundle_without_a_key_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "verify", "--bundle", str(tmp_path / "b.json")],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--bundle needs --key" in done.stderr
