"""The Merkle tree, signed checkpoints and proofs through the HTTP API, on both stores."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from domain.merkle import ProofError, leaf_hash, verify_consistency, verify_inclusion
from domain.signed_note import CheckpointBody, VerifierKey, open_note
from infra.note_key import ed25519_check
from infra.settings import Settings


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
