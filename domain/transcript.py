"""Transcript: the activity records of one task attempt, kept out of the Task stream."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.ids import stable_id
from domain.redaction import MARGIN_BYTES, cut_bytes, redact_json
from domain.task_policy import RECORD_LIMIT_BYTES, bound_record, iso_utc

TAIL = 20  # records kept in memory for remediation prompts
RECORDS_PER_EVENT = 64  # keeps single stored events small even for a large batch
_STAMPED = frozenset({"seq", "attempt", "at"})


def _precut(text: str) -> str:
    return cut_bytes(text, RECORD_LIMIT_BYTES + MARGIN_BYTES)


def transcript_id(task_id: UUID, attempt: int) -> UUID:
    """Aggregate ID of the transcript of one attempt."""
    return stable_id("transcript", str(task_id), str(attempt))


class Transcript(TachographAggregate):
    """Activity of one attempt; records are numbered, stamped and bounded on append."""

    TOPIC = "Transcript"

    @staticmethod
    def create_id(task_id: UUID, attempt: int, **_: Any) -> UUID:
        return transcript_id(task_id, attempt)

    @event("Created", topic="Transcript.Created")
    def __init__(self, task_id: UUID, attempt: int, turn_id: str) -> None:
        self.task_id = task_id
        self.attempt = attempt
        self.turn_id = turn_id
        self.count = 0
        self.tail: list[dict[str, Any]] = []

    def append(self, records: list[dict[str, Any]], at: datetime) -> None:
        """Number, stamp, redact and bound records, then append them in small events."""
        stamped = []
        for offset, record in enumerate(records, start=1):
            fields = {k: v for k, v in record.items() if v is not None and k not in _STAMPED}
            # An agent's output is stored text like any other: redacted before it is cut.
            fields = redact_json(fields, _precut)
            stamped.append(
                bound_record(
                    {
                        "seq": self.count + offset,
                        "attempt": self.attempt,
                        "at": record.get("at") or iso_utc(at),
                        **fields,
                    }
                )
            )
        for start in range(0, len(stamped), RECORDS_PER_EVENT):
            self._appended(
                str(self.task_id), self.attempt, stamped[start : start + RECORDS_PER_EVENT]
            )

    @event("Appended", topic="Transcript.Appended")
    def _appended(self, task_id: str, attempt: int, records: list[dict[str, Any]]) -> None:
        self.count += len(records)
        self.tail = (self.tail + records)[-TAIL:]


declare_event_versions(Transcript, Created=1, Appended=1)
