"""ModelRequest: one model request an agent runtime reported, with its tokens and cost.

The runtimes report their model requests over OpenTelemetry (docs/usage.md); each one
the receiver maps (infra/otlp_usage.py) is recorded once, as the Created event of its
own aggregate. Its id is derived from the report itself, so an exporter's retry of the
same batch finds the request already recorded and counts nothing twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.domain import event

from domain.base import TachographAggregate, declare_event_versions
from domain.ids import stable_id


@dataclass(frozen=True, slots=True)
class ReportedRequest:
    """One model request as a runtime reported it; absent figures are None (cost: a
    runtime that reports none, such as Gemini CLI)."""

    agent: str  # the runtime's agent id, as its hook adapter names it (`claude-code`, ...)
    agent_session_id: str
    key: str  # what identifies the report within its runtime (infra/otlp_usage.py)
    model: str | None
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_creation_tokens: int
    cost_usd: float | None
    duration_ms: int | None
    prompt_id: str | None
    requested_at: datetime


def model_request_id(agent: str, key: str) -> UUID:
    """The aggregate id of a reported request: the same report, the same id."""
    return stable_id("model-request", agent, key)


class ModelRequest(TachographAggregate):
    """A model request of a session; recorded once, never changed."""

    TOPIC = "ModelRequest"

    @staticmethod
    def create_id(request_id: UUID, **_: Any) -> UUID:
        return request_id

    @event("Created", topic="ModelRequest.Created")
    def __init__(
        self,
        request_id: UUID,
        session_id: UUID,
        workspace: str,
        agent: str,
        agent_session_id: str,
        model: str | None,
        input_tokens: int,
        output_tokens: int,
        cache_read_tokens: int,
        cache_creation_tokens: int,
        cost_usd: float | None,
        duration_ms: int | None,
        prompt_id: str | None,
        requested_at: datetime,
        actor: str,
    ) -> None:
        self.session_id = session_id
        self.workspace = workspace
        self.agent = agent
        self.agent_session_id = agent_session_id
        self.model = model
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read_tokens = cache_read_tokens
        self.cache_creation_tokens = cache_creation_tokens
        self.cost_usd = cost_usd
        self.duration_ms = duration_ms
        self.prompt_id = prompt_id
        self.requested_at = requested_at


declare_event_versions(ModelRequest, Created=1)


def record_request(
    reported: ReportedRequest, session_id: UUID, workspace: str, actor: str
) -> ModelRequest:
    """The aggregate recording `reported` in `session_id` (of `workspace`)."""
    return ModelRequest(
        request_id=model_request_id(reported.agent, reported.key),
        session_id=session_id,
        workspace=workspace,
        agent=reported.agent,
        agent_session_id=reported.agent_session_id,
        model=reported.model,
        input_tokens=reported.input_tokens,
        output_tokens=reported.output_tokens,
        cache_read_tokens=reported.cache_read_tokens,
        cache_creation_tokens=reported.cache_creation_tokens,
        cost_usd=reported.cost_usd,
        duration_ms=reported.duration_ms,
        prompt_id=reported.prompt_id,
        requested_at=reported.requested_at,
        actor=actor,
    )
