"""Issue 42's attack, on each store, through the database and the real server.

The attacker holds the log's real signing key and the database. Each trial the honest log
grows through the API, an auditor keeps every checkpoint it is shown, and two running
witnesses cosign the latest. Then the attacker rewrites one stored event or cuts the
tail IN THE DATABASE, rebuilds the chain and Merkle tree tables from the altered log and signs it
with the real key, so the server serves the forged checkpoint and proofs. Every witness
refuses it, no consistency proof from the auditor's kept checkpoint to it verifies, and
`tachograph verify --checkpoint` names the first position that no longer matches (the
command itself every tenth trial, the service function it runs on the others). The
trial then puts the honest log back (the witnesses never moved) and the next one starts.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import random
import time
from collections.abc import Iterator
from contextlib import ExitStack, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from cli.audit import open_stores
from cli.main import main
from domain.merkle import ProofError, verify_consistency
from domain.signed_note import CheckpointBody, VerifierKey, open_note
from infra.note_key import NoteKey, ed25519_check, load_note_key
from infra.settings import Settings
from projections.log_checkpoints import LogChainProjection
from projections.runner import decode
from services.log_audit import check_kept_checkpoints
from tests.log_tamper import Tamper
from tests.support import env_for
from tests.test_witness import WitnessProc, two_witnesses

TRIALS = int(os.environ.get("ATTACK_TRIALS", "100"))


@pytest.fixture
def log_key(settings: Settings) -> NoteKey:
    key = load_note_key(settings.note_key_path, create=True)
    assert key is not None
    return key


@pytest.fixture
def witnesses(tmp_path: Path, log_key: NoteKey) -> Iterator[list[WitnessProc]]:
    with two_witnesses(tmp_path, f"{log_key.name}={log_key.verifier_key}") as procs:
        yield procs


class Attacker(Tamper):
    """Database access and the real key: alters events, rebuilds the tree and re-signs."""

    def __init__(self, settings: Settings, key: NoteKey, stores: Any) -> None:
        super().__init__(settings)
        self.key = key
        self.stores = stores  # the event store and read store, opened as the CLI opens them

    def positions(self) -> list[int]:
        with self._cursor() as cur:
            cur.execute(self._sql("SELECT {pos} FROM {t} ORDER BY {pos}"))
            return [int(row[0]) for row in cur.fetchall()]

    def cut(self, position: int) -> list[tuple[Any, ...]]:
        """Delete every event from `position` on; the rows, to put back."""
        with self._cursor() as cur:
            columns = "{pos}, originator_id, originator_version, topic, state"
            cur.execute(self._sql(f"SELECT {columns} FROM {{t}} WHERE {{pos}} >= ?"), (position,))
            rows = [tuple(row) for row in cur.fetchall()]
            cur.execute(self._sql("DELETE FROM {t} WHERE {pos} >= ?"), (position,))
        return rows

    def put_back(self, rows: list[tuple[Any, ...]]) -> None:
        columns = "{pos}, originator_id, originator_version, topic, state"
        with self._cursor() as cur:
            cur.executemany(self._sql(f"INSERT INTO {{t}} ({columns}) VALUES (?,?,?,?,?)"), rows)

    def resign(self) -> None:
        """Rebuild the chain's and the tree's tables from the log as it now is (the leaves
        sit beside the links) and sign its head; the HMAC ledger is left as it was."""
        chain = LogChainProjection()
        chain.records_checkpoints = False
        chain.tree.signer, chain.tree.every_events = self.key.sign_checkpoint, 1
        app, store = self.stores.app, self.stores.store
        envelopes = [decode(app, n) for n in app.recorder.select_notifications(1, 1_000_000)]
        with store.transaction() as cur:
            for table in ("rm_log_links", "rm_log_nodes", "log_notes", "log_cosignatures"):
                cur.execute(f"DELETE FROM {table}")
            chain.begin_batch(cur)
            chain.apply_all(cur, envelopes)
            chain.end_batch(cur)


def served(client: TestClient, key: VerifierKey) -> tuple[str, CheckpointBody]:
    note = client.get("/api/log/checkpoint")
    assert note.status_code == 200, note.text
    return note.text, CheckpointBody.parse(open_note(note.text, key, ed25519_check))


def signed_through(client: TestClient, key: VerifierKey, size: int) -> str:
    """The served checkpoint once it covers `size` events."""
    deadline = time.monotonic() + 30
    while True:
        note, body = served(client, key)
        if body.size == size:
            return note
        assert time.monotonic() < deadline, f"no checkpoint of size {size}: {note}"
        time.sleep(0.01)


def consistency(client: TestClient, old: int, new: int) -> list[bytes] | None:
    if old == 0:
        return []
    answer = client.get("/api/log/proof/consistency", params={"from": old, "to": new})
    if answer.status_code != 200:
        return None  # the forged log has no signed checkpoint at the auditor's size
    return [base64.b64decode(h) for h in answer.json()["hashes"]]


def verify_kept(settings: Settings, kept: Path, key: str, monkeypatch: Any) -> tuple[int, str]:
    for name, value in env_for(settings).items():
        monkeypatch.setenv(name, value)
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["verify", "--checkpoint", str(kept), "--key", key])
    return code, out.getvalue()


def letter_in_a_value(payload: bytes) -> int:
    """Where the last microsecond digit of the event's time is: a flipped low bit keeps it
    a digit, so the payload still decodes (every event starts with its timestamp)."""
    return payload.index(b'+00:00"') - 1


def expected_report(kept: list[int], positions: list[int], leaf: int, *, cut: bool) -> str:
    """What verify must name: the leaf when kept checkpoints bracket it, else the window.

    A kept root vouches for all of its first `size` events at once, so the change is
    known to lie after the largest kept size that still matches and within the next.
    """
    matched = max((k for k in kept if k <= leaf), default=0)
    if cut and matched == leaf:
        return f"from leaf {leaf}, after position {positions[leaf - 1]}, on"
    if cut:
        window = f"positions {positions[matched]}..{positions[leaf - 1]}"
        return f"an event among {window} (leaves {matched}..{leaf - 1}) was changed"
    following = min(k for k in kept if k > leaf)
    if following - matched == 1:
        return f"the event at position {positions[leaf]} (leaf {leaf})"
    window = f"positions {positions[matched]}..{positions[following - 1]}"
    return f"an event among {window} (leaves {matched}..{following - 1})"


def test_the_attack_through_the_database_is_refused_exposed_and_named(
    settings: Settings,
    log_key: NoteKey,
    witnesses: list[WitnessProc],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    key = log_key.verifier()
    stores = ExitStack()
    stores_open = stores.enter_context(open_stores(settings))
    attacker = Attacker(settings, log_key, stores_open)
    kept = tmp_path / "kept-checkpoints.txt"
    cosigned = {w.port: 0 for w in witnesses}
    kept_sizes: list[int] = []
    named = exact = 0
    with stores, TestClient(create_app(settings.with_(log_note_every_events=1))) as client:
        for trial in range(TRIALS):
            # The honest log grows; the auditor keeps every checkpoint it is shown.
            for _ in range(rng.randint(1, 3)):
                assert (
                    client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201
                )
                kept_sizes.append(len(attacker.positions()))
                note = signed_through(client, key, kept_sizes[-1])
                with kept.open("a", encoding="utf-8") as out:
                    out.write(note)
            honest = CheckpointBody.parse(open_note(note, key, ed25519_check))
            for w in witnesses:
                proof = consistency(client, cosigned[w.port], honest.size)
                assert proof is not None
                answer = w.submit(cosigned[w.port], proof, note)
                assert answer.status_code == 200, (seed, trial, answer.text)
                cosigned[w.port] = honest.size

            # The attack: one stored event rewritten, or the tail cut, then re-signed.
            positions = attacker.positions()
            context: tuple[Any, ...]
            if len(positions) > 1 and rng.random() < 0.5:
                leaf = rng.randrange(1, len(positions))
                removed = attacker.cut(positions[leaf])
                expected = expected_report(kept_sizes, positions, leaf, cut=True)
                context = (seed, trial, "cut at leaf", leaf)
            else:
                leaf, removed = rng.randrange(len(positions)), []
                at = letter_in_a_value(attacker.payload(positions[leaf]))
                attacker.flip_payload_byte(positions[leaf], attacker.payload(positions[leaf])[at:])
                expected = expected_report(kept_sizes, positions, leaf, cut=False)
                context = (seed, trial, "rewrote leaf", leaf)
            attacker.resign()
            forged_note, forged = served(client, key)  # signed with the real key
            assert (forged.size, forged.root) != (honest.size, honest.root), context

            # Every witness refuses; the submitter's retry from the size it names too.
            for w in witnesses:
                conflict = w.submit(0, [], forged_note)
                assert (conflict.status_code, conflict.text) == (409, f"{honest.size}\n"), context
                proof = consistency(client, honest.size, forged.size) or []
                again = w.submit(honest.size, proof, forged_note)
                assert again.status_code in (400, 409, 422), (*context, again.text)
            # The auditor's kept checkpoint: no consistency proof reaches the forgery.
            if forged.size >= honest.size:
                proof = consistency(client, honest.size, forged.size) or []
                with pytest.raises(ProofError):
                    verify_consistency(honest.size, forged.size, honest.root, forged.root, proof)
            # verify names the first position that no longer matches.
            if trial % 10 == 0:
                code, report = verify_kept(settings, kept, log_key.verifier_key, monkeypatch)
            else:
                # What the command runs, on the stores already open: opening them per
                # trial (schema checks) would cost the command's start-up 100 times.
                _, divergence = check_kept_checkpoints(stores_open.app, kept.read_text(), key)
                code, report = (1, divergence.describe()) if divergence else (0, "")
            assert code == 1 and expected in report, (*context, report)
            named += 1
            exact += "among positions" not in report

            # The honest log back, as the witnesses still hold it.
            if removed:
                attacker.put_back(removed)
            else:
                attacker.flip_payload_byte(positions[leaf], attacker.payload(positions[leaf])[at:])
            attacker.resign()
            assert served(client, key)[1] == honest, context
    assert named == TRIALS and exact > 0, (named, exact)
    code, report = verify_kept(settings, kept, log_key.verifier_key, monkeypatch)
    assert code == 0 and report.startswith("OK: the log extends all"), report


def test_kept_checkpoints_that_do_not_verify_are_refused_naming_which(
    settings: Settings,
    log_key: NoteKey,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with TestClient(create_app(settings.with_(log_note_every_events=1))) as client:
        assert client.post("/api/sessions", json={"workspaceId": "default"}).status_code == 201
        note = signed_through(client, log_key.verifier(), 3)  # workspace, session, dispatch
    kept = tmp_path / "kept.txt"
    other = NoteKey(log_key.name, hashlib.sha256(b"another key").digest())
    kept.write_text(note + other.sign_checkpoint(1, b"\x00" * 32))
    code, _ = verify_kept(settings, kept, log_key.verifier_key, monkeypatch)
    assert code == 2
    assert "kept checkpoint 2: note is not signed by key" in capsys.readouterr().err
    # As served with witnesses: cosignature lines follow the log's own signature.
    witness = NoteKey("example.org/witness", hashlib.sha256(b"w").digest())
    cosigned = note + witness.cosign(note.split("\n\n")[0] + "\n", 1_700_000_000)
    kept.write_text(cosigned + "\n" + note)
    code, report = verify_kept(settings, kept, log_key.verifier_key, monkeypatch)
    assert (code, report) == (
        0,
        f"OK: the log extends all 2 kept checkpoints (the largest "
        f"of size 3) signed by {log_key.name}\n",
    )
