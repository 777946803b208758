"""Wire DTOs: strict request bodies (unknown fields are a 422)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator
from pydantic.json_schema import SkipJsonSchema

from api.input_limits import validate_json_text
from domain.lifecycle import EVENT_NAME_PATTERN, SHORT_TEXT_MAX, LifecycleEvent

Slug = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class Strict(BaseModel):
    # Booleans are StrictBool: 0, 0.0 or "true" are not booleans in the schema clients read.
    model_config = ConfigDict(extra="forbid")

    # No NUL, no lone surrogates, nesting ≤ 64 anywhere in the body (api/input_limits.py).
    _text = model_validator(mode="before")(validate_json_text)


class WorkspaceCreate(Strict):
    id: Slug
    path: Annotated[str, Field(min_length=1, max_length=1024)]
    selfUpdate: StrictBool = False


class WorkspaceUpdate(Strict):
    """Options present are changed; absent ones keep their value (at least one is needed)."""

    selfUpdate: StrictBool | None = None
    # Whether this workspace's self-update task prompts carry learned content (SPEC §8).
    learnedInSelfUpdate: StrictBool | None = None

    @model_validator(mode="after")
    def _some_option(self) -> WorkspaceUpdate:
        if not self.model_fields_set:
            raise ValueError("name selfUpdate or learnedInSelfUpdate (or both).")
        for name in self.model_fields_set:
            if getattr(self, name) is None:
                raise ValueError(f"{name} must be true or false.")
        return self


class SessionCreate(Strict):
    workspaceId: Slug
    title: Annotated[str, Field(min_length=1, max_length=200)] | None = None


class SessionUpdate(Strict):
    title: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    archived: StrictBool | None = None


class SessionSave(Strict):
    revision: Annotated[int, Field(ge=0)]
    messages: list[Any]


EventName = Annotated[str, Field(pattern=EVENT_NAME_PATTERN)]
ShortText = Annotated[str, Field(max_length=SHORT_TEXT_MAX)]


class LifecycleEventBody(Strict):
    """SPEC §6.3 body; unknown event names are accepted and stored as observational."""

    model_config = ConfigDict(extra="forbid", title="LifecycleEvent")

    event: EventName
    eventId: Annotated[str, Field(min_length=1, max_length=SHORT_TEXT_MAX)] | None = None
    turnId: ShortText | None = None
    agent: ShortText | None = None
    agentSessionId: ShortText | None = None
    toolName: ShortText | None = None
    toolCallId: ShortText | None = None
    toolInput: Any = None
    toolResponse: Any = None
    prompt: str | None = None
    lastAssistantMessage: str | None = None
    subagentId: ShortText | None = None
    model: ShortText | None = None
    cwd: str | None = None
    permissionMode: str | None = None
    agentType: str | None = None
    durationMs: Annotated[int, Field(ge=0)] | None = None
    error: str | None = None
    isInterrupt: StrictBool | None = None
    detail: dict[str, Any] | None = None

    def to_event(self) -> LifecycleEvent:
        """The one inbound shape; the wire's names end here."""
        return LifecycleEvent(
            self.event,
            event_id=self.eventId,
            turn_id=self.turnId,
            agent=self.agent,
            agent_session_id=self.agentSessionId,
            tool_name=self.toolName,
            tool_call_id=self.toolCallId,
            tool_input=self.toolInput,
            tool_response=self.toolResponse,
            prompt=self.prompt,
            last_assistant_message=self.lastAssistantMessage,
            subagent_id=self.subagentId,
            model=self.model,
            cwd=self.cwd if self.cwd is not None else _text(self.detail, "cwd"),
            permission_mode=self.permissionMode,
            agent_type=self.agentType,
            duration_ms=self.durationMs,
            error=self.error,
            is_interrupt=self.isInterrupt,
            detail=self.detail or {},
        )


def _text(detail: dict[str, Any] | None, key: str) -> str | None:
    """A string member of `detail` (clients sent `cwd` there before it had a field)."""
    value = (detail or {}).get(key)
    return value if isinstance(value, str) else None


TaskPrompt = Annotated[str, Field(min_length=1, max_length=256 * 1024)]
ModelName = Annotated[str, Field(min_length=1, max_length=200)]
MaxAttempts = Annotated[int, Field(ge=1, le=10)]


class TaskCreate(Strict):
    workspaceId: Slug
    prompt: TaskPrompt
    model: ModelName | None = None
    maxAttempts: MaxAttempts = 3


class TaskResolve(Strict):
    summary: Annotated[str, Field(min_length=1, max_length=2048)]


class ScheduleCreate(Strict):
    """No `timezone` field: schedules run in TACHOGRAPH_TIMEZONE (a timezone field is a 422)."""

    workspaceId: Slug
    name: Annotated[str, Field(min_length=1, max_length=200)]
    cron: Annotated[str, Field(min_length=1, max_length=200)]
    prompt: TaskPrompt
    model: ModelName | None = None
    maxAttempts: MaxAttempts = 3


class ScheduleUpdate(Strict):
    """Fields present are changed; `model: null` clears the model."""

    # Absent means unchanged; null is refused (422) and so not offered in the schema.
    name: Annotated[str, Field(min_length=1, max_length=200)] | SkipJsonSchema[None] = None
    cron: Annotated[str, Field(min_length=1, max_length=200)] | SkipJsonSchema[None] = None
    prompt: TaskPrompt | SkipJsonSchema[None] = None
    model: ModelName | None = None
    maxAttempts: MaxAttempts | SkipJsonSchema[None] = None
    paused: StrictBool | SkipJsonSchema[None] = None


class Items(BaseModel):
    items: list[dict[str, Any]]
