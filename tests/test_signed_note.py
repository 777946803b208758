"""Signed notes and checkpoints against the golang.org/x/mod/sumdb/note test vectors."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from domain.signed_note import CheckpointBody, NoteError, VerifierKey, checkpoint_body, open_note
from infra.note_key import NoteKey, ed25519_check, load_note_key
from infra.settings import SettingsError

# From golang.org/x/mod, sumdb/note/note_test.go (TestNewVerifier, TestSign, TestOpen).
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = (
    "If you think cryptography is the answer to your problem,\n"
    "then you don't know what your problem is.\n"
)
PETER_SIG = (
    "\u2014 PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngot"
    "pRZb6KE6RyyBwJnAM=\n"
)
ENOCH_SIG = (
    "\u2014 EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWL"
    "ox33WWd1RvMc+QQ=\n"
)


def test_our_signer_key_reads_the_go_key_and_signs_byte_for_byte_as_go_does() -> None:
    key = NoteKey.parse(PETER_SKEY)
    assert key.encode() == PETER_SKEY
    assert key.verifier_key == PETER_VKEY
    assert key.sign(TEXT) == TEXT + "\n" + PETER_SIG


def test_go_signed_notes_open_with_the_right_key_only() -> None:
    peter, enoch = VerifierKey.parse(PETER_VKEY), VerifierKey.parse(ENOCH_VKEY)
    both = TEXT + "\n" + PETER_SIG + ENOCH_SIG
    assert open_note(both, peter, ed25519_check) == TEXT
    assert open_note(both, enoch, ed25519_check) == TEXT
    with pytest.raises(NoteError, match="not signed by key PeterNeumann"):
        open_note(TEXT + "\n" + ENOCH_SIG, peter, ed25519_check)
    corrupt = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(NoteError, match="invalid signature for key PeterNeumann"):
        open_note(corrupt, peter, ed25519_check)
    with pytest.raises(NoteError, match="invalid signature"):
        open_note(TEXT.replace("answer", "Answer") + "\n" + PETER_SIG, peter, ed25519_check)


@pytest.mark.parametrize(
    "note",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        TEXT + "\n" + PETER_SIG.replace("PeterNeumann", "Bad Name"),
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
    ],
)
def test_malformed_notes_from_the_go_tests_are_refused(note: str) -> None:
    with pytest.raises(NoteError):
        open_note(note, VerifierKey.parse(PETER_VKEY), ed25519_check)


@pytest.mark.parametrize(
    "vkey",
    [
        PETER_VKEY[:-1],
        PETER_VKEY.replace("c74f20a3", "c74f20a4"),
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "Peter+Neumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ],
)
def test_mangled_verifier_keys_are_refused(vkey: str) -> None:
    with pytest.raises(NoteError):
        VerifierKey.parse(vkey)


def test_checkpoint_bodies_round_trip_and_refuse_malformed_ones() -> None:
    root = bytes(range(32))
    body = checkpoint_body("example.com/log", 20852163, root)
    assert body == "example.com/log\n20852163\nAAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n"
    assert CheckpointBody.parse(body) == CheckpointBody("example.com/log", 20852163, root)
    for bad in ("example.com/log\n12\n", "o\n-1\nAAAA\n", "o\n01\n" + body.split("\n")[2] + "\n"):
        with pytest.raises(NoteError):
            CheckpointBody.parse(bad)


def test_the_key_file_is_created_once_private_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "keys" / "log-note.key"
    assert load_note_key(path, create=False) is None
    created = load_note_key(path, create=True)
    assert created is not None
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_note_key(path, create=True) == created
    assert [p.name for p in path.parent.iterdir()] == ["log-note.key"]
    note = created.sign_checkpoint(3, bytes(32))
    assert open_note(note, VerifierKey.parse(created.verifier_key), ed25519_check).startswith(
        created.name + "\n3\n"
    )


def test_an_unusable_key_file_is_refused_naming_the_setting(tmp_path: Path) -> None:
    path = tmp_path / "log-note.key"
    path.write_text("PRIVATE+KEY+not-a-key\n")
    with pytest.raises(SettingsError, match=f"TACHOGRAPH_LOG_NOTE_KEY_FILE: cannot use {path}"):
        load_note_key(path, create=True)
    assert path.read_text() == "PRIVATE+KEY+not-a-key\n"  # never replaced
