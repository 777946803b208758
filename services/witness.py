"""A C2SP tlog-witness for other logs: judges add-checkpoint requests and cosigns.

The order of the checks is the protocol's: a malformed body is 400, an unknown origin
404, a checkpoint no trusted key signed 403, then (inside the state's transaction) an
old size above the checkpoint's 400, an old size that is not the cosigned one 409 with
that size, a bad consistency proof 422. Only then is the new state recorded and the
cosignature (timestamped now) returned.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

from domain.cosignature import Refusal, judge_submission, parse_add_checkpoint
from domain.signed_note import CheckpointBody, NoteError, VerifierKey, open_note, split_note
from infra.note_key import NoteKey, ed25519_check
from infra.witness_state import WitnessState

SIZE_TYPE = "text/x.tlog.size"


@dataclass(frozen=True)
class Answer:
    status: int
    content_type: str
    body: str


def parse_log_option(text: str) -> tuple[str, VerifierKey]:
    """`ORIGIN=VERIFIERKEY` of `--log`; NoteError naming what is wrong."""
    origin, sep, key_text = text.partition("=")
    if not sep or not origin:
        raise NoteError(f"--log {text!r}: expected ORIGIN=VERIFIERKEY")
    key = VerifierKey.parse(key_text)
    if key.name != origin:
        raise NoteError(f"--log {origin}: the verifier key is named {key.name}, not the origin")
    return origin, key


class Witness:
    def __init__(
        self, key: NoteKey, logs: Mapping[str, list[VerifierKey]], state: WitnessState
    ) -> None:
        self.key = key
        self.logs = dict(logs)
        self.state = state

    def add_checkpoint(self, body: bytes) -> Answer:
        try:
            text = body.decode("utf-8")
            request = parse_add_checkpoint(text)
            note_text, _ = split_note(request.note)
            checkpoint = CheckpointBody.parse(note_text)
        except (UnicodeDecodeError, NoteError) as exc:
            return Answer(400, "text/plain", f"malformed add-checkpoint request: {exc}\n")
        keys = self.logs.get(checkpoint.origin)
        if keys is None:
            return Answer(404, "text/plain", f"unknown log origin {checkpoint.origin!r}\n")
        if not any(self._signed_by(request.note, key) for key in keys):
            return Answer(403, "text/plain", "no signature by a trusted key of this log\n")
        try:
            self.state.advance(
                checkpoint.origin, lambda known: judge_submission(request, checkpoint, known)
            )
        except Refusal as refusal:
            if refusal.status == 409 and refusal.known_size is not None:
                return Answer(409, SIZE_TYPE, f"{refusal.known_size}\n")
            return Answer(refusal.status, "text/plain", refusal.reason + "\n")
        return Answer(200, "text/plain", self.key.cosign(note_text, int(time.time())))

    @staticmethod
    def _signed_by(note: str, key: VerifierKey) -> bool:
        try:
            open_note(note, key, ed25519_check)
        except NoteError:
            return False
        return True
