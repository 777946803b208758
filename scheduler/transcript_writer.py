"""An attempt's agent output as task activity: stdout lines parsed into records, written
in throttled batches (the executor and the self-update attempt both write through it)."""

from __future__ import annotations

import logging
from collections import deque

from domain.task_policy import iso_utc
from domain.task_service import Claim, TaskService
from domain.transcript import Transcript
from infra.agent_stream import AgentStream, Record

log = logging.getLogger(__name__)

MAX_BATCH = 256  # activity records written per flush at most; the rest are counted as dropped


class TranscriptWriter:
    """Parses stdout lines into records and writes them in throttled batches."""

    def __init__(self, service: TaskService, claim: Claim, *, max_batch: int = MAX_BATCH) -> None:
        self.service = service
        self.claim = claim
        self.stream = AgentStream()
        self.transcript: Transcript | None = claim.transcript
        self.pending: deque[Record] = deque(maxlen=max_batch)
        self.dropped = 0
        self.written = 0

    def new_run(self) -> None:
        """A further agent run of the same attempt: its outcome is its own text alone."""
        self.stream = AgentStream()

    def line(self, text: str) -> None:
        """Parse one stdout line; only the newest records survive a burst."""
        at = iso_utc(self.service.clock())
        for record in self.stream.parse(text):
            self.note_record({**record, "at": at})

    def note(self, kind: str, text: str) -> None:
        """A record from Tachograph itself (status changes, errors)."""
        field = "error" if kind == "error" else "text"
        at = iso_utc(self.service.clock())
        self.note_record({"kind": kind, "agent": "tachograph", field: text, "at": at})

    def note_record(self, record: Record) -> None:
        if len(self.pending) == self.pending.maxlen:
            self.dropped += 1
        self.pending.append(record)

    def flush(self) -> None:
        """Write what accumulated since the last flush (one transaction)."""
        if not self.pending and not self.dropped:
            return
        batch = list(self.pending)
        if self.dropped:
            note = f"{self.dropped} activity records dropped (agent output throttled)"
            batch.insert(0, {"kind": "status", "agent": "tachograph", "text": note})
        try:
            transcript = self.transcript or self._reload()
            self.service.append_activity(transcript, batch)
        except Exception as exc:  # noqa: BLE001 - activity is best effort; the run goes on
            log.warning("activity write failed: %s", exc, extra={"task_id": self.claim.task_id})
            self.transcript = None  # its version moved on in memory only: reload next time
            return
        self.pending.clear()
        self.dropped = 0
        self.written += len(batch)

    def _reload(self) -> Transcript:
        transcript = self.service.transcript(self.claim.task_id, self.claim.attempt)
        if transcript is None:
            raise RuntimeError("transcript missing")
        self.transcript = transcript
        return transcript
