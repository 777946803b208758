"""`tachograph witness` over HTTP: the C2SP tlog-witness add-checkpoint protocol.

A running witness follows one log whose checkpoints the test signs with the log's key;
every answer the protocol names (200 with a cosignature, 400, 403, 404, 409 with the
cosigned size, 422) is reached through POST /add-checkpoint, and the state survives a
restart and concurrent submissions.
"""

from __future__ import annotations

import base64
import hashlib
import random
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from domain.cosignature import CosignerKey, verified_cosignature
from domain.merkle import CompactRange, Node, consistency_proof, leaf_hash
from domain.signed_note import NoteError
from infra.note_key import NoteKey, ed25519_check
from tests.support import Proc, free_port

ORIGIN = "example.com/witnessed-log"


class Log:
    """An in-memory RFC 6962 log signed with a real note key."""

    def __init__(self, key: NoteKey, leaves: Iterable[bytes] = ()) -> None:
        self.key = key
        self.leaves: list[bytes] = []
        self.extend(leaves)

    def extend(self, leaves: Iterable[bytes]) -> None:
        self.leaves.extend(leaves)

    def _tree(self, size: int) -> tuple[bytes, dict[Node, bytes]]:
        edge, nodes = CompactRange(), dict[Node, bytes]()
        for data in self.leaves[:size]:
            nodes.update(edge.append(leaf_hash(data)))
        return edge.root(), nodes

    def checkpoint(self, size: int | None = None) -> str:
        size = len(self.leaves) if size is None else size
        return self.key.sign_checkpoint(size, self._tree(size)[0])

    def proof(self, old: int, new: int | None = None) -> list[bytes]:
        new = len(self.leaves) if new is None else new
        _, nodes = self._tree(new)

        def read(wanted: Iterable[Node]) -> Mapping[Node, bytes]:
            return {node: nodes[node] for node in wanted}

        return consistency_proof(old, new, read)


def request_body(old: int, proof: list[bytes], note: str) -> bytes:
    lines = [f"old {old}"] + [base64.b64encode(h).decode() for h in proof]
    return ("\n".join(lines) + "\n\n" + note).encode()


class WitnessProc(Proc):
    def __init__(self, tmp: Path, key_file: Path, logs: list[str], port: int | None = None) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/add-checkpoint"
        self.http: httpx.Client | None = None
        args = ["witness", "--listen", f"127.0.0.1:{self.port}", "--key", str(key_file)]
        for log in logs:
            args += ["--log", log]
        super().__init__(args, {}, tmp / f"witness-{self.port}.log")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise RuntimeError(f"witness exited early:\n{self.output()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"witness not ready:\n{self.output()}")

    def submit(self, old: int, proof: list[bytes], note: str) -> httpx.Response:
        # One client per witness: a new one per request builds a TLS context (~30 ms).
        if self.http is None:
            self.http = httpx.Client(timeout=30)
        return self.http.post(self.url, content=request_body(old, proof, note))

    def kill(self) -> None:
        if self.http is not None:
            self.http.close()
        super().kill()

    def add(self, log: Log, old: int) -> httpx.Response:
        return self.submit(old, log.proof(old), log.checkpoint())


@contextmanager
def two_witnesses(tmp: Path, log: str) -> Iterator[list[WitnessProc]]:
    """Two running witnesses following one log (`ORIGIN=VERIFIERKEY`), each with its state."""
    procs: list[WitnessProc] = []
    try:
        for name in ("a", "b"):
            key = NoteKey(f"example.org/witness-{name}", hashlib.sha256(name.encode()).digest())
            # Side by side: each key has its own state file.
            key_file = tmp / f"witness-{name}.key"
            key_file.write_text(key.encode() + "\n")
            procs.append(WitnessProc(tmp, key_file, [log]))
        yield procs
    finally:
        for proc in procs:
            proc.kill()


def leaves(n: int, tag: str = "event") -> list[bytes]:
    return [f"{tag} {i}".encode() for i in range(n)]


@pytest.fixture
def log_key() -> NoteKey:
    return NoteKey(ORIGIN, hashlib.sha256(b"the log's test seed").digest())


@pytest.fixture
def witness_key(tmp_path: Path) -> NoteKey:
    key = NoteKey("example.org/witness", hashlib.sha256(b"the witness's test seed").digest())
    (tmp_path / "witness.key").write_text(key.encode() + "\n")
    return key


@pytest.fixture
def witness(tmp_path: Path, log_key: NoteKey, witness_key: NoteKey) -> Iterator[WitnessProc]:
    proc = WitnessProc(tmp_path, tmp_path / "witness.key", [f"{ORIGIN}={log_key.verifier_key}"])
    try:
        yield proc
    finally:
        proc.kill()


def cosigned_at(answer: httpx.Response, note: str, witness_key: NoteKey) -> int:
    assert answer.status_code == 200, answer.text
    assert answer.text.startswith("\u2014 example.org/witness ")
    cosigner = CosignerKey.parse(witness_key.cosigner_verifier_key)
    return verified_cosignature(note + answer.text, cosigner, ed25519_check)[0]


def test_cosigns_a_growing_log_and_refuses_stale_sizes(
    witness: WitnessProc, log_key: NoteKey, witness_key: NoteKey
) -> None:
    log = Log(log_key, leaves(5))
    first = log.checkpoint()
    stamp = cosigned_at(witness.add(log, 0), first, witness_key)
    assert abs(stamp - time.time()) < 60
    log.extend(leaves(6, "more"))
    cosigned_at(witness.add(log, 5), log.checkpoint(), witness_key)
    # Replaying the first submission cannot roll the witness back to size 5.
    replay = witness.submit(0, [], first)
    assert (replay.status_code, replay.text) == (409, "11\n")
    assert replay.headers["content-type"] == "text/x.tlog.size"
    # The same checkpoint again from the cosigned size is cosigned again.
    cosigned_at(witness.add(log, 11), log.checkpoint(), witness_key)


def test_a_cosignature_does_not_verify_on_another_checkpoint(
    witness: WitnessProc, log_key: NoteKey, witness_key: NoteKey
) -> None:
    log = Log(log_key, leaves(3))
    answer = witness.add(log, 0)
    other = Log(log_key, leaves(3, "other")).checkpoint()
    with pytest.raises(NoteError, match="invalid cosignature"):
        cosigned_at(answer, other, witness_key)


def test_bad_requests_are_refused_and_change_nothing(
    tmp_path: Path, witness: WitnessProc, log_key: NoteKey, witness_key: NoteKey
) -> None:
    log = Log(log_key, leaves(4))
    cosigned_at(witness.add(log, 0), log.checkpoint(), witness_key)
    log.extend(leaves(4, "next"))
    good = log.proof(4)
    assert witness.submit(4, [good[0][::-1], *good[1:]], log.checkpoint()).status_code == 422
    assert witness.submit(4, good[:-1], log.checkpoint()).status_code == 422
    assert witness.submit(9, [], log.checkpoint()).status_code == 400  # old above size
    assert witness.submit(4, good, "not a note\n").status_code == 400
    bad_body = httpx.post(witness.url, content=b"old 04\n\n" + log.checkpoint().encode())
    assert bad_body.status_code == 400
    stranger = NoteKey("example.com/other-log", hashlib.sha256(b"other").digest())
    assert witness.add(Log(stranger, leaves(8)), 0).status_code == 404
    impostor = NoteKey(ORIGIN, hashlib.sha256(b"not the log's key").digest())
    assert witness.submit(4, good, Log(impostor, log.leaves).checkpoint()).status_code == 403
    # None of that moved the witness: the honest proof from 4 still succeeds.
    cosigned_at(witness.submit(4, good, log.checkpoint()), log.checkpoint(), witness_key)


def test_the_same_size_with_another_root_is_a_conflict(
    witness: WitnessProc, log_key: NoteKey
) -> None:
    assert witness.add(Log(log_key, leaves(6)), 0).status_code == 200
    forked = Log(log_key, leaves(6, "forked")).checkpoint()
    answer = witness.submit(6, [], forked)
    assert (answer.status_code, answer.text) == (409, "6\n")


def test_state_survives_a_restart(
    tmp_path: Path, witness: WitnessProc, log_key: NoteKey, witness_key: NoteKey
) -> None:
    log = Log(log_key, leaves(7))
    assert witness.add(log, 0).status_code == 200
    witness.kill()
    again = WitnessProc(tmp_path, tmp_path / "witness.key", [f"{ORIGIN}={log_key.verifier_key}"])
    try:
        assert (again.add(log, 0).status_code, again.add(log, 0).text) == (409, "7\n")
        log.extend(leaves(2, "after"))
        cosigned_at(again.add(log, 7), log.checkpoint(), witness_key)
    finally:
        again.kill()


def test_concurrent_submissions_cosign_one_and_never_roll_back(
    witness: WitnessProc, log_key: NoteKey
) -> None:
    log = Log(log_key, leaves(40))
    assert witness.submit(0, [], log.checkpoint(10)).status_code == 200
    sizes = list(range(11, 41))
    random.shuffle(sizes)

    def submit(size: int) -> int:
        note = log.checkpoint(size)
        return witness.submit(10, log.proof(10, size), note).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = dict(zip(sizes, pool.map(submit, sizes), strict=True))
    winners = [size for size, status in statuses.items() if status == 200]
    assert len(winners) == 1 and set(statuses.values()) == {200, 409}
    # The witness sits at the winner's size: only a proof from there is accepted.
    answer = witness.submit(10, log.proof(10), log.checkpoint())
    assert (answer.status_code, answer.text) == (409, f"{winners[0]}\n")
    assert witness.add(log, winners[0]).status_code == 200


def test_unusable_options_are_named(tmp_path: Path, log_key: NoteKey) -> None:
    key_file = tmp_path / "w.key"
    for args, named in [
        (["--listen", "nowhere", "--key", str(key_file), "--log", "x"], "--listen"),
        (["--listen", "127.0.0.1:1", "--key", str(key_file), "--log", "x"], "--log 'x'"),
        (
            [
                "--listen",
                "127.0.0.1:1",
                "--key",
                str(key_file),
                "--log",
                f"a={log_key.verifier_key}",
            ],
            "not the origin",
        ),
    ]:
        proc = Proc(["witness", *args], {}, tmp_path / "bad.log")
        assert proc.wait(60) == 2
        assert named in proc.output()
    key_file.write_text("garbage\n")
    proc = Proc(
        [
            "witness",
            "--listen",
            "127.0.0.1:1",
            "--key",
            str(key_file),
            "--log",
            f"{ORIGIN}={log_key.verifier_key}",
        ],
        {},
        tmp_path / "bad-key.log",
    )
    assert proc.wait(60) == 2
    assert "--key: cannot use" in proc.output()
