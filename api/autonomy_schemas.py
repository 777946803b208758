"""Wire DTOs of the autonomy routes (strict: unknown fields are a 422)."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from pydantic import Field, StrictBool

from api.schemas import Slug, Strict

AgentId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
TargetKey = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9.-]{0,62}$")]
TargetKind = Literal["overlay", "skill", "fact"]
SignalStatus = Literal["pending", "claimed", "completed", "ignored", "dead-letter"]


class AutonomySettingsUpdate(Strict):
    """Switches present are changed; absent ones keep their value."""

    evolution: StrictBool | None = None
    skillCreation: StrictBool | None = None
    factRetention: StrictBool | None = None
    selfUpdate: StrictBool | None = None


class SignalCreate(Strict):
    """Evidence of one agent turn; fields are redacted and cut to 2 KiB before storing."""

    agentId: AgentId
    traceId: Annotated[str, Field(min_length=1, max_length=256)]
    kind: Literal["outcome", "failure"]
    goal: Annotated[str, Field(min_length=1)]
    outcome: str | None = None
    failure: str | None = None
    failureClass: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    sessionId: UUID | None = None
    # The turn the evidence is from; signals derived from hooks name theirs themselves.
    turnId: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # Where the evidence arose: the session's workspace when a session is named (it must
    # agree), else this one (the default workspace when neither is given).
    workspaceId: Slug | None = None


class Promotion(Strict):
    """Where a revision's content is delivered besides its own workspace: `global`
    (every workspace) or the `workspaceIds` named (none: back to its own only)."""

    scope: Literal["global", "workspaces"]
    workspaceIds: Annotated[list[Slug], Field(max_length=100)] = []


class TargetEdit(Strict):
    """A person's content for the target (≤ 16 KiB); the target becomes user-owned."""

    content: Annotated[str, Field(max_length=16 * 1024)]
