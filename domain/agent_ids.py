"""Whose lessons are whose: the agent id a turn, a task attempt and a delivery belong to.

The learning loop (SPEC §8) keys signals, learned targets and deliveries by agent id.
A hook-driven turn belongs to its runtime's agent, named as the runtime's adapter
records it on every dispatch (`claude-code`, `codex`, `gemini-cli`, `copilot-cli`,
`coder`); what one Claude Code session learns therefore reaches every later Claude Code
session, and nothing of another runtime. A subagent's work is part of its parent's
turn. Task attempts belong to `tasks`: their prompts are Tachograph's own, whichever
command runs them.
"""

from __future__ import annotations

from domain.learned_target import AGENT_ID_PATTERN

TASKS_AGENT_ID = "tasks"
UNKNOWN_AGENT_ID = "unknown"


def agent_id_for(agent: str | None) -> str:
    """The agent id of a dispatch's `agent` (its runtime), or `unknown`."""
    if agent and AGENT_ID_PATTERN.fullmatch(agent):
        return agent
    return UNKNOWN_AGENT_ID
