"""The agent runtimes Tachograph answers hooks for, each one adapter (§6.5).

An adapter maps its runtime's hook payload to the one inbound shape (`LifecycleEvent`)
and renders a decision in the runtime's own answer format; everything between is the
one ingest path (api/hook_routes.py, ingest/service.py). Stdlib only: the command-hook
client looks its runtime up here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Final

import ingest.runtimes.claude_code as claude_code
import ingest.runtimes.codex as codex
import ingest.runtimes.copilot_cli as copilot_cli
import ingest.runtimes.factory_droid as factory_droid
import ingest.runtimes.gemini_cli as gemini_cli
import ingest.runtimes.opencode as opencode
import ingest.runtimes.qwen_code as qwen_code
from domain.hook_dispatch import Decision
from domain.lifecycle import LifecycleEvent


@dataclass(frozen=True)
class Runtime:
    # The name in `tachograph hook <name>` and `POST /hooks/<name>`.
    name: str
    # `LifecycleEvent.agent`; sessions map to UUIDv5(agent + ":" + native session id).
    agent: str
    # Payload (and the event named by the hook's registration, if any) to an event;
    # None when the event is not recorded at all (it is answered with no decision).
    to_event: Callable[[object, str | None], LifecycleEvent | None]
    # (event, decision) -> (the runtime's answer, an audit note when it is degraded).
    render: Callable[[str, Decision], tuple[Any, str | None]]
    # The events a fail-closed command hook denies when Tachograph cannot be reached.
    gate_events: frozenset[str]
    # The events `tachograph hook install` registers the hook for.
    normalised_events: tuple[str, ...]


CLAUDE: Final = Runtime(
    name="claude",
    agent=claude_code.AGENT,
    to_event=lambda payload, event: claude_code.claude_payload_to_event(
        {**payload, "hook_event_name": event} if event and isinstance(payload, dict) else payload
    ),
    render=claude_code.decision_to_claude,
    gate_events=claude_code.FAIL_CLOSED_EVENTS,
    normalised_events=claude_code.NORMALISED_EVENTS,
)
CODEX: Final = Runtime(
    name="codex",
    agent=codex.AGENT,
    to_event=codex.codex_payload_to_event,
    render=codex.decision_to_codex,
    gate_events=codex.FAIL_CLOSED_EVENTS,
    normalised_events=codex.NORMALISED_EVENTS,
)

GEMINI: Final = Runtime(
    name="gemini",
    agent=gemini_cli.AGENT,
    to_event=gemini_cli.gemini_payload_to_event,
    render=gemini_cli.decision_to_gemini,
    gate_events=gemini_cli.FAIL_CLOSED_EVENTS,
    normalised_events=gemini_cli.NORMALISED_EVENTS,
)
# The same with Gemini CLI's model events stored (TACHOGRAPH_GEMINI_MODEL_EVENTS=store).
# The adapter stays a pure function of its arguments: the server picks this variant from
# its Settings where a hook is answered (`runtime_for`), so no module state decides what
# is recorded, and two apps with different settings in one process do not interfere.
GEMINI_STORING_MODEL_EVENTS: Final = replace(
    GEMINI,
    to_event=lambda payload, event: gemini_cli.gemini_payload_to_event(
        payload, event, model_events=gemini_cli.MODEL_EVENTS_STORE
    ),
)
COPILOT: Final = Runtime(
    name="copilot",
    agent=copilot_cli.AGENT,
    to_event=copilot_cli.copilot_payload_to_event,
    render=copilot_cli.decision_to_copilot,
    gate_events=copilot_cli.FAIL_CLOSED_EVENTS,
    normalised_events=copilot_cli.NORMALISED_EVENTS,
)

QWEN: Final = Runtime(
    name="qwen",
    agent=qwen_code.AGENT,
    to_event=qwen_code.qwen_payload_to_event,
    render=qwen_code.decision_to_qwen,
    gate_events=qwen_code.FAIL_CLOSED_EVENTS,
    normalised_events=qwen_code.NORMALISED_EVENTS,
)
DROID: Final = Runtime(
    name="droid",
    agent=factory_droid.AGENT,
    to_event=factory_droid.droid_payload_to_event,
    render=factory_droid.decision_to_droid,
    gate_events=factory_droid.FAIL_CLOSED_EVENTS,
    normalised_events=factory_droid.NORMALISED_EVENTS,
)

# OpenCode and Kilo (its fork) run Tachograph's plugin, which posts their hooks alike.
OPENCODE: Final = Runtime(
    name="opencode",
    agent=opencode.AGENT,
    to_event=opencode.opencode_payload_to_event,
    render=opencode.decision_to_opencode,
    gate_events=opencode.FAIL_CLOSED_EVENTS,
    normalised_events=opencode.NORMALISED_EVENTS,
)
KILO: Final = replace(
    OPENCODE,
    name="kilo",
    agent=opencode.KILO_AGENT,
    to_event=partial(opencode.opencode_payload_to_event, agent=opencode.KILO_AGENT),
)

RUNTIMES: Final[dict[str, Runtime]] = {
    r.name: r for r in (CLAUDE, CODEX, GEMINI, COPILOT, QWEN, DROID, OPENCODE, KILO)
}


def runtime_for(name: str, *, gemini_model_events: str = gemini_cli.MODEL_EVENTS_DROP) -> Runtime:
    """The runtime's adapter as a server configured so answers it (KeyError: unknown)."""
    if name == GEMINI.name and gemini_model_events == gemini_cli.MODEL_EVENTS_STORE:
        return GEMINI_STORING_MODEL_EVENTS
    return RUNTIMES[name]
