"""The Merkle tree, signed checkpoints and proofs through the HTTP API, on both stores."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from bootstrap import build_services
from domain.merkle import ProofError, leaf_hash, verify_consistency, verify_inclusion
from domain.signed_note import CheckpointBody, VerifierKey, open_note
from infra.note_key import ed25519_check
from infra.settings import Settings
from projections.log_tree import NOTES_TABLE, sign_log_head
from tests.audit_support import bulk_history


@pytest.fixture
def signing(settings: Settings) -> Iterator[TestClient]:
    """A server signing a checkpoint at the end of every projection batch."""
    with TestClient(create_app(settings.with_(log_note_every_events=1))) as client:
        yield client


def grow(client: TestClient, sessions: int) -> None:
    for _ in range(sessions):
        assert client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201


def checkpoint(client: TestClient) -> CheckpointBody:
    key = VerifierKey.parse(client.get("/api/log/key").text)
    note = client.get("/api/log/checkpoint")
    assert note.status_code == 200 and note.headers["content-type"].startswith("text/plain")
    return CheckpointBody.parse(open_note(note.text, key, ed25519_check))


def b64(values: list[str]) -> list[bytes]:
    return [base64.b64decode(v) for v in values]


def test_checkpoints_are_signed_notes_and_proofs_verify_against_them(
    signing: TestClient, settings: Settings
) -> None:
    grow(signing, 3)
    old = checkpoint(signing)
    assert old.origin.startswith("tachograph.log/") and old.size >= 4
    grow(signing, 4)
    new = checkpoint(signing)
    assert new.size > old.size
    for position in range(1, new.size + 1):
        got = signing.get(f"/api/log/proof/inclusion?position={position}&treeSize={new.size}")
        assert got.status_code == 200, got.text
        proof = got.json()
        assert (proof["position"], proof["treeSize"]) == (position, new.size)
        leaf = base64.b64decode(proof["leafHash"])
        verify_inclusion(proof["leafIndex"], new.size, leaf, b64(proof["hashes"]), new.root)
        with pytest.raises(ProofError):
            verify_inclusion(
                proof["leafIndex"], new.size, leaf_hash(b"x"), b64(proof["hashes"]), new.root
            )
    got = signing.get(f"/api/log/proof/consistency?from={old.size}&to={new.size}")
    assert got.status_code == 200, got.text
    assert got.json()["from"] == old.size and got.json()["to"] == new.size
    verify_consistency(old.size, new.size, old.root, new.root, b64(got.json()["hashes"]))


def test_proofs_against_unsigned_sizes_or_with_bad_parameters_are_refused(
    settings: Settings,
) -> None:
    with TestClient(create_app(settings.with_(log_note_every_events=1000))) as client:
        assert client.get("/api/log/checkpoint").status_code == 404
        grow(client, 2)
        refused = client.get("/api/log/proof/inclusion?position=1&treeSize=2")
        assert refused.status_code == 422
        assert "treeSize 2 is not the size of a signed checkpoint" in refused.json()["message"]
        refused = client.get("/api/log/proof/consistency?from=1&to=3")
        assert refused.status_code == 422 and "from 1" in refused.json()["message"]
        for query, field in [
            ("/api/log/proof/inclusion?position=0&treeSize=2", "position"),
            ("/api/log/proof/inclusion?position=1&treeSize=x", "treeSize"),
            ("/api/log/proof/inclusion?position=1", "treeSize"),
            ("/api/log/proof/consistency?from=1", "to"),
        ]:
            refused = client.get(query)
            assert refused.status_code == 422, query
            assert field in refused.text, (query, refused.text)


def test_a_quiet_tail_is_signed_after_the_interval(settings: Settings) -> None:
    quiet = settings.with_(log_note_every_events=1000, log_note_every_s=0.2)
    with TestClient(create_app(quiet)) as client:
        grow(client, 2)
        deadline = time.monotonic() + 10
        # The default workspace and two sessions: three events, far fewer than 1,000.
        while client.get("/api/log/checkpoint").status_code == 404 or checkpoint(client).size < 3:
            assert time.monotonic() < deadline, "no checkpoint signed by the periodic job"
            time.sleep(0.05)


def test_two_replicas_signing_the_same_size_keep_one_checkpoint(settings: Settings) -> None:
    first, second = build_services(settings), build_services(settings)
    try:
        bulk_history(first.app, 3)
        first.runner.catch_up()
        second.runner.catch_up()
        assert first.note_key == second.note_key  # one key file, created once
        signed = [sign_log_head(s.projections, s.store) for s in (first, second)]
        assert signed == [7, None]  # the second finds the size signed already
        rows = first.store.query(f"SELECT size FROM {NOTES_TABLE}")
        assert [r["size"] for r in rows] == [7]
    finally:
        second.stop()
        first.stop()
