"""C2SP tlog-cosignature and tlog-witness against vectors other implementations published.

- A cosigned checkpoint made by transparency-dev/formats (`NewSignerForCosignatureV1`, Go)
  from fixed seeds at a fixed time: our cosigner reproduces its line byte for byte and our
  verifier accepts it (and nothing altered).
- Key IDs and timestamps from transparency-dev/formats' note tests (`TestCoSigV1NewVerifier`,
  `TestCoSigV1Timestamp`): a real witness's cosigner key, a cosignature's embedded time.
- add-checkpoint requests of transparency-dev/witness (`TestUpdate`: the "monkeys" log, 5 to 8)
  and FiloSottile/torchwood (`TestRace`: a Sigsum log, 0 to 1 to 5), sent to a running
  `tachograph witness` holding the witness key those tests use: it cosigns what they
  cosign and refuses what they refuse.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from domain.cosignature import CosignerKey, cosignature_timestamp, verified_cosignature
from domain.merkle import verify_consistency
from domain.signed_note import (
    CheckpointBody,
    NoteError,
    NoteSignature,
    VerifierKey,
    open_note,
    split_note,
    verifier_key,
)
from infra.note_key import NoteKey, ed25519_check
from tests.test_witness import WitnessProc

# Made with transparency-dev/formats v0.1.1 (cosigner) and golang.org/x/mod/sumdb/note (log).
FORMATS_LOG_VKEY = "example.com/vector-log+4516a1da+ARGkVJ4QEa2MOOLGBO6i7NVSJ1FQ97tIX+w+Ku0RZ6Em"
FORMATS_WITNESS_SKEY = (
    "PRIVATE+KEY+witness.example.com/vector+416f103d+BJEX3xv88eoQIKT4E+GkxZcXaJCYlQfi/GJ3NDFmZIW8"
)
FORMATS_WITNESS_VKEY = (
    "witness.example.com/vector+416f103d+BK/QmJFVP3SKJOqAMhFxBQPtylo3sjwWibyFDAlZKK8B"
)
FORMATS_TEXT = "example.com/vector-log\n1234\nSBNJTRN+FjG7owHVrKtue7eqdM4RhdRWVl71HXN2d7I=\n"
FORMATS_LOG_LINE = (
    "\u2014 example.com/vector-log RRah2qlLrSlk6J8DA1HmNewppUM15Quhs5cAIb1KjBsV3otVirJTW8AFVsQtJ"
    "kTW1Zny7GuoAxZpI6bUPcpM68QOIgE=\n"
)
FORMATS_WITNESS_LINE = (
    "\u2014 witness.example.com/vector QW8QPQAAAABqwLUbDdj7sDNRIVjmjYgqFI6y4UJhPg/UAA8J8wAdqSd3q4P"
    "edRhkgXA4xFN/Jg5uWn7ZkBA+H/UHQs5d9hITdXmQAA==\n"
)
FORMATS_TIME = 1791014171
FORMATS_NOTE = FORMATS_TEXT + "\n" + FORMATS_LOG_LINE + FORMATS_WITNESS_LINE


def test_our_cosigner_reproduces_the_formats_cosignature_byte_for_byte() -> None:
    key = NoteKey.parse(FORMATS_WITNESS_SKEY, cosigner=True)
    assert key.cosigner_verifier_key == FORMATS_WITNESS_VKEY
    assert key.cosign(FORMATS_TEXT, FORMATS_TIME) == FORMATS_WITNESS_LINE


def test_the_formats_cosigned_checkpoint_verifies_under_both_keys() -> None:
    witness = CosignerKey.parse(FORMATS_WITNESS_VKEY)
    assert (witness.name, witness.key_hash) == ("witness.example.com/vector", 0x416F103D)
    assert verified_cosignature(FORMATS_NOTE, witness, ed25519_check) == (
        FORMATS_TIME,
        FORMATS_WITNESS_LINE,
    )
    assert open_note(FORMATS_NOTE, VerifierKey.parse(FORMATS_LOG_VKEY), ed25519_check) == (
        FORMATS_TEXT
    )


def test_an_altered_cosigned_checkpoint_does_not_verify() -> None:
    witness = CosignerKey.parse(FORMATS_WITNESS_VKEY)
    with pytest.raises(NoteError, match="invalid cosignature"):
        verified_cosignature(FORMATS_NOTE.replace("1234", "1235", 1), witness, ed25519_check)
    # The timestamp is signed: bytes 4..11 of the line are the time; change its last byte.
    encoded = FORMATS_WITNESS_LINE.split(" ")[2]
    raw = bytearray(base64.b64decode(encoded))
    raw[11] ^= 0x01
    moved = FORMATS_WITNESS_LINE.replace(encoded, base64.b64encode(raw).decode() + "\n")
    with pytest.raises(NoteError, match="invalid cosignature"):
        verified_cosignature(FORMATS_TEXT + "\n" + moved, witness, ed25519_check)
    # A log key is not a cosigner key, and a cosigner key is not a log key.
    with pytest.raises(NoteError):
        CosignerKey.parse(FORMATS_LOG_VKEY)
    with pytest.raises(NoteError):
        VerifierKey.parse(FORMATS_WITNESS_VKEY)
    with pytest.raises(NoteError):
        NoteKey.parse(FORMATS_WITNESS_SKEY)  # a log's signer key must be type 0x01


def test_key_ids_and_timestamps_from_the_formats_tests() -> None:
    # A real witness's native cosignature/v1 key: its ID is over type 0x04.
    remora = CosignerKey.parse(
        "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
    )
    assert remora.key_hash == 0xDA77ADE7
    with pytest.raises(NoteError, match="hash does not match"):
        CosignerKey.parse("remora.n621.de+da77ade8+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2")
    cosigned = base64.b64decode(
        "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFi"
        "EBYJXORmnFBOBA=="
    )
    signature = NoteSignature("w", int.from_bytes(cosigned[:4], "big"), cosigned[4:])
    assert cosignature_timestamp(signature) == 1727964367
    plain = base64.b64decode(
        "eQjRQm6eSKzFoiYalgwCPXu2y3ijtg68is9M46JKxuZB+dRfTmeQeDBoXnvxZx2ugnkyV+MUMLXpWs1hPb/W/4xk"
        "NQY="
    )
    with pytest.raises(NoteError, match="not 72 bytes"):
        cosignature_timestamp(NoteSignature("w", int.from_bytes(plain[:4], "big"), plain[4:]))


# transparency-dev/witness, internal/witness/witness_test.go.
MONKEYS_VKEY = "monkeys+db4d9f7e+AULaJMvTtDLHPUcUrjdDad9vDlh/PTfC2VV60JUtCfWT"
WITNESS_SKEY = "PRIVATE+KEY+witness+f13a86db+AaLa/dfyBhyo/m0Z7WCi98ENVZWtrP8pxgRNrx7tIWiA"
MONKEYS_5 = (
    "monkeys\n5\n41smjBUiAU70EtKlT6lIOIYtRTYxYXsDB+XHfcvu/BE=\n\n\u2014 monkeys 202fftzGl3LVoqjXfwC"
    "FZZXs8I+5G22+Ek2K0AOyBuSJ/8/CZawNF+6fNlTKOCd622pbzJNkkJFWuw9DbicZCkEx9AY=\n"
)
MONKEYS_8 = (
    "monkeys\n8\nV8K9aklZ4EPB+RMOk1/8VsJUdFZR77GDtZUQq84vSbo=\n\n\u2014 monkeys 202ffoUEboiQYpHzICe"
    "aFmoy3RNviHTpAxYrq/eO4QQVQMvu9UebKBMX2MJC76NLthZaKsnKbCA8GxrjePZhvDCH7Ag=\n"
)
MONKEYS_5_TO_8 = [
    "b9e1d62618f7fee8034e4c5010f727ab24d8e4705cb296c374bf2025a87a10d2",
    "aac66cd7a79ce4012d80762fe8eec3a77f22d1ca4145c3f4cee022e7efcd599d",
    "89d0f753f66a290c483b39cd5e9eafb12021293395fad3d4a2ad053cfbcfdc9e",
    "29e40bb79c966f4c6fe96aff6f30acfce5f3e8d84c02215175d6e018a5dee833",
]

# FiloSottile/torchwood, internal/witness/witness_test.go (a Sigsum log's checkpoints).
SIGSUM_ORIGIN = (
    "sigsum.org/v1/tree/4d6d8825a6bb689d459628312889dfbb0bcd41b5211d9e1ce768b0ff0309e562"
)
SIGSUM_KEY = bytes.fromhex("ffdc2d4d98e4124d3feaf788c0c2f9abfd796083d1f0495437f302ec79cf100f")


def sigsum_request(old: int, proof: list[str], size: int, root: str, signature: str) -> str:
    checkpoint = f"{SIGSUM_ORIGIN}\n{size}\n{root}\n\n\u2014 {SIGSUM_ORIGIN} {signature}\n"
    return "\n".join([f"old {old}", *proof]) + "\n\n" + checkpoint


SIGSUM_1 = sigsum_request(
    0,
    [],
    1,
    "KgAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    "UgIom7fPZTqpxWWhyjWduBvTvGVqsokMbqTArsQilegKoFBJQjUFAmQ0+YeSPM3wfUQMFSzVnnNuWRTYrajXpNUbIQY=",
)
SIGSUM_3 = sigsum_request(
    1,
    [
        "KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "KgIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    ],
    3,
    "RcCI1Nk56ZcSmIEfIn0SleqtV7uvrlXNccFx595Iwl0=",
    "UgIom2VbtIcdFbwFAy1n7s6IkAxIY6J/GQOTuZF2ORV39d75cbAj2aQYwyJre36kezNobZs4SUUdrcawfAB8WVrx6go=",
)
SIGSUM_5 = sigsum_request(
    1,
    [
        "KgEAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        "+fUDV+k970B4I3uKrqJM4aP1lloPZP8mvr2Z4wRw2LI=",
        "KgQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    ],
    5,
    "QrtXrQZCCvpIgsSmOsah7HdICzMLLyDfxToMql9WTjY=",
    "UgIomw/EOJmWi0i1FQsOj+etB7F8IccFam/jgd6wzRns4QPVmyEZtdvl1U2KEmLOZ/ASRcWJi0tW90dJWAShei7sDww=",
)


@pytest.fixture
def witness(tmp_path: Path) -> Iterator[WitnessProc]:
    (tmp_path / "witness.key").write_text(WITNESS_SKEY + "\n")
    sigsum = verifier_key(SIGSUM_ORIGIN, SIGSUM_KEY)
    logs = [f"monkeys={MONKEYS_VKEY}", f"{SIGSUM_ORIGIN}={sigsum}"]
    proc = WitnessProc(tmp_path, tmp_path / "witness.key", logs)
    try:
        yield proc
    finally:
        proc.kill()


def post(witness: WitnessProc, body: str) -> httpx.Response:
    return httpx.post(witness.url, content=body.encode(), timeout=30)


def monkeys_request(old: int, proof: list[str], note: str) -> str:
    lines = [f"old {old}"] + [base64.b64encode(bytes.fromhex(h)).decode() for h in proof]
    return "\n".join(lines) + "\n\n" + note


def assert_cosigned(answer: httpx.Response, note: str) -> None:
    """The answer is a cosignature/v1 line by the tests' witness key on that note."""
    assert answer.status_code == 200, answer.text
    key = CosignerKey.parse(NoteKey.parse(WITNESS_SKEY).cosigner_verifier_key)
    timestamp, line = verified_cosignature(note + answer.text, key, ed25519_check)
    assert line == answer.text and timestamp > 0


def test_the_published_monkeys_requests_are_judged_as_the_go_witness_judges_them(
    witness: WitnessProc,
) -> None:
    assert_cosigned(post(witness, monkeys_request(0, [], MONKEYS_5)), MONKEYS_5)
    # "vanilla consistency happy path": 5 to 8 with the published proof.
    assert_cosigned(post(witness, monkeys_request(5, MONKEYS_5_TO_8, MONKEYS_8)), MONKEYS_8)
    # "oldSize doesn't match current state": a conflict naming the size held.
    stale = post(witness, monkeys_request(2, MONKEYS_5_TO_8, MONKEYS_8))
    assert (stale.status_code, stale.text) == (409, "8\n")
    # "submit smaller checkpoint": old above the checkpoint's size.
    assert post(witness, monkeys_request(8, MONKEYS_5_TO_8, MONKEYS_5)).status_code == 400
    # A proof that is not the published one does not verify.
    wrong = [MONKEYS_5_TO_8[0], MONKEYS_5_TO_8[2], MONKEYS_5_TO_8[1], MONKEYS_5_TO_8[3]]
    assert post(witness, monkeys_request(8, wrong, MONKEYS_8)).status_code == 422
    # Another log's key did not sign it.
    forged = MONKEYS_8.replace("\u2014 monkeys 202ff", "\u2014 monkeys 202fe")
    assert post(witness, monkeys_request(8, [], forged)).status_code == 403


def test_the_published_sigsum_requests_are_judged_as_torchwood_judges_them(
    witness: WitnessProc,
) -> None:
    checkpoint_1 = SIGSUM_1.split("\n\n", 1)[1]
    checkpoint_5 = SIGSUM_5.split("\n\n", 1)[1]
    assert_cosigned(post(witness, SIGSUM_1), checkpoint_1)
    assert_cosigned(post(witness, SIGSUM_5), checkpoint_5)
    # The size-3 request raced and lost in torchwood's test: from 1, once 5 is held.
    late = post(witness, SIGSUM_3)
    assert (late.status_code, late.text) == (409, "5\n")
    # Its tree hash at 5 is the one torchwood asserts after the race.
    body = CheckpointBody.parse(split_note(checkpoint_5)[0])
    assert body.root.hex() == "42bb57ad06420afa4882c4a63ac6a1ec77480b330b2f20dfc53a0caa5f564e36"


def test_the_published_consistency_proofs_verify_with_our_merkle_code() -> None:
    old = CheckpointBody.parse(split_note(MONKEYS_5)[0])
    new = CheckpointBody.parse(split_note(MONKEYS_8)[0])
    proof = [bytes.fromhex(h) for h in MONKEYS_5_TO_8]
    verify_consistency(5, 8, old.root, new.root, proof)
