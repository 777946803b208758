"""How a tool call ended, derived from every fact known about it, in any order.

A call's facts arrive as separate events: its PreToolUse dispatch (the decision, which
for a call held for an operator is recorded only once the approval settles, or is
abandoned), and its PostToolUse or PostToolUseFailure (that it ran, and how). A runtime
whose hook stopped waiting runs the call anyway, so its Post can be in the log before
the decision on its Pre. Read models keep each fact in its own columns and derive the
status from all of them, never by letting whichever arrived last overwrite the rest: a
late deny does not relabel a call that ran, and a live table agrees with a rebuild.
"""

from __future__ import annotations

from typing import Any, Final

from domain.approval import APPROVAL_HANDLER

DENIED: Final = "denied"
ABANDONED: Final = "abandoned"
# A call that ran while its approval was pending: no decision reached the runtime.
RAN_UNDECIDED: Final = "ran_undecided"
_APPROVAL_PREFIX: Final = APPROVAL_HANDLER + ":"


def held_for_approval(d: dict[str, Any]) -> bool:
    """Whether a PreToolUse dispatch waited for (or was answered from) an approval."""
    if d["outcome"] == "ask":
        return True
    return any(
        str(run.get("handler_id") or "").startswith(_APPROVAL_PREFIX) for run in d["runs"] or ()
    )


def decision_status(outcome: str) -> str | None:
    """What the Pre's decision alone says of the call: refused, unanswered, or nothing yet."""
    if outcome == "deny":
        return DENIED
    if outcome == "ask":  # recorded only for a request abandoned by its caller
        return ABANDONED
    return None


def ended_status(
    decided: str | None,
    held: bool,
    pre_position: int | None,
    ran: str | None,
    ran_position: int | None,
) -> str | None:
    """The call's status from its facts: `decided` (decision_status of its Pre), `held`
    (its Pre waited for an approval), `ran` (the Post's status: ok, error, interrupted).

    A held call that ran before its decision was recorded, or whose decision was a deny
    or nothing at all, ran without a decision reaching the runtime.
    """
    if ran is None:
        return decided
    if held and (
        decided is not None
        or (pre_position is not None and ran_position is not None and ran_position < pre_position)
    ):
        return RAN_UNDECIDED
    return ran
