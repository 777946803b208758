"""The attack of issue 42 item 6 against two running witnesses, in randomised trials.

The attacker holds the log's real signing key. Each trial grows the honest log and has
both witnesses cosign it; then the attacker truncates the tail or rewrites one event
(optionally appending more), re-signs with the real key and submits the result as the
protocol lets it: from the size the witness holds with the best proof the forged tree
gives, or from the forged tree's own size. Every witness refuses (409 or 422), an
auditor holding the cosigned checkpoint finds no consistency proof to the forgery, and
the honest log's next checkpoint is still cosigned (a refusal moves nothing).
"""

from __future__ import annotations

import hashlib
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from domain.merkle import ProofError, verify_consistency
from domain.signed_note import CheckpointBody, split_note
from infra.note_key import NoteKey
from tests.test_witness import ORIGIN, Log, WitnessProc, leaves, two_witnesses

TRIALS = 100


@pytest.fixture
def witnesses(tmp_path: Path, log_key: NoteKey) -> Iterator[list[WitnessProc]]:
    with two_witnesses(tmp_path, f"{ORIGIN}={log_key.verifier_key}") as procs:
        yield procs


@pytest.fixture
def log_key() -> NoteKey:
    return NoteKey(ORIGIN, hashlib.sha256(b"the log's real key").digest())


def body(note: str) -> CheckpointBody:
    return CheckpointBody.parse(split_note(note)[0])


def forge(rng: random.Random, honest: Log, trial: int) -> tuple[Log, str]:
    """A rewritten copy of the honest log, and how it was rewritten."""
    n = len(honest.leaves)
    if rng.random() < 0.5:
        cut = rng.randrange(0, n)
        forged = Log(honest.key, honest.leaves[:cut])
        kind = f"truncated to {cut}"
    else:
        index = rng.randrange(0, n)
        rewritten = list(honest.leaves)
        rewritten[index] = b"rewritten " + rewritten[index]
        forged = Log(honest.key, rewritten)
        kind = f"event {index} rewritten"
    # Half the time the attacker appends past the cosigned size, to look like growth.
    if rng.random() < 0.5 or not forged.leaves:
        forged.extend(leaves(rng.randint(1, 8), f"forged {trial}"))
    return forged, kind


def test_a_rewritten_or_truncated_log_is_never_cosigned(
    witnesses: list[WitnessProc], log_key: NoteKey
) -> None:
    seed = int.from_bytes(os.urandom(4), "big")
    rng = random.Random(seed)
    honest = Log(log_key)
    for trial in range(TRIALS):
        old = len(honest.leaves)
        honest.extend(leaves(rng.randint(1, 10), f"trial {trial}"))
        for witness in witnesses:
            assert witness.add(honest, old).status_code == 200, (seed, trial)
        kept = body(honest.checkpoint())  # what an auditor keeps, cosigned by both
        forged, kind = forge(rng, honest, trial)
        context = (seed, trial, kind)
        size = len(forged.leaves)
        note = forged.checkpoint()  # signed with the real key
        assert body(note).root != kept.root or size != kept.size, context
        for witness in witnesses:
            if size >= kept.size:
                answer = witness.submit(kept.size, forged.proof(kept.size), note)
            else:
                answer = witness.submit(size, forged.proof(size, size), note)
            assert answer.status_code in (409, 422), (*context, answer.status_code, answer.text)
            if answer.status_code == 409:
                assert answer.text == f"{kept.size}\n", context
            assert witness.submit(0, [], note).status_code == 409, context
        # The auditor's kept checkpoint: no proof from the forged log links to it.
        if size >= kept.size:
            with pytest.raises(ProofError):
                verify_consistency(
                    kept.size, size, kept.root, body(note).root, forged.proof(kept.size)
                )
