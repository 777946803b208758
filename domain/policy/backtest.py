"""A backtest: what a candidate document would have done to the calls on the record.

Each recorded dispatch (HookDispatch.Created) is rebuilt into the call its facts describe
(domain/dispatch_facts.py) and every rule of the candidate on its event is evaluated on
it, so each rule's hits are counted, not only the deciding rule's. The enforced rules
then decide as on the hook path (deny before ask before context, the first rule within
an outcome) and the call counts as changed when that is not what really happened.

A call whose facts were cut in a field the rules read cannot be judged: it is counted as
unjudged, never guessed. Calls repeat (the same `git status` in the same checkout), and
a call's verdict depends only on the fields its rules read, so verdicts are kept by
those fields: a repeat costs a dictionary lookup, not a shell analysis and an
evaluation.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from domain.lifecycle import LifecycleEvent
from domain.policy.document import STRENGTH, Compiler, PolicyDocument, PolicyRule
from domain.policy.value import CallContext, call_value
from domain.secret_patterns import REDACTED

EXAMPLES_KEPT: Final = 20
# Verdicts kept by the fields they depend on; cleared whole when full (bounded memory).
VERDICTS_KEPT: Final = 200_000
# The value's fields built from the tool input (and its cwd).
_INPUT_NAMES: Final = frozenset({"input", "paths", "command"})

# Why a call could not be judged.
NO_FACTS: Final = "no_facts"  # TACHOGRAPH_RECORD=metadata, or recorded before facts were
REDACTED_INPUT: Final = "redacted_input"  # a tool in TACHOGRAPH_REDACTED_TOOLS
CUT: Final = "truncated"  # a field the rules read was cut to its limit


@dataclass(frozen=True)
class RecordedCall:
    """One recorded dispatch, as the backtest reads it."""

    position: int
    session_id: str
    data: Mapping[str, Any]  # the HookDispatch.Created state, snake_case
    # What really happened: "deny", "ask" (held for a person), "context" or "allow".
    happened: str


def rebuilt_event(data: Mapping[str, Any]) -> LifecycleEvent:
    """The call a dispatch's facts describe, as the hook path judged it: the input the
    agent sent (before any handler rewrote it), its cwd and prompt."""
    facts = data.get("facts") or {}
    tool_input = facts.get("original_input", facts.get("input"))
    return LifecycleEvent(
        event=data["event_name"],
        agent=data.get("agent"),
        tool_name=data.get("tool_name"),
        tool_call_id=data.get("tool_call_id"),
        tool_input=tool_input,
        prompt=facts.get("prompt"),
        cwd=facts.get("cwd"),
    )


def unjudged_because(data: Mapping[str, Any], names: frozenset[str]) -> str | None:
    """Why the facts cannot judge this call under rules reading `names` (None: they can)."""
    facts = data.get("facts")
    if facts is None:
        return NO_FACTS
    cut = set(facts.get("truncated") or ())
    if names & _INPUT_NAMES and data.get("tool_name"):
        kept = facts.get("original_input", facts.get("input"))
        if kept == REDACTED:
            return REDACTED_INPUT
        if cut & {"input", "original_input", "cwd"}:
            return CUT
    if "prompt" in names and "prompt" in cut:
        return CUT
    return None


@dataclass
class Tally:
    """What a run of calls came to: plain counts and examples, so a part judged in
    another process can be sent back and merged (in log order)."""

    evaluated: int = 0
    evaluations: int = 0  # calls actually evaluated, the rest answered from kept verdicts
    unjudged: dict[str, int] = field(
        default_factory=lambda: {NO_FACTS: 0, REDACTED_INPUT: 0, CUT: 0}
    )
    changed: dict[str, int] = field(default_factory=lambda: {"deny": 0, "ask": 0, "context": 0})
    hits: dict[int, int] = field(default_factory=dict)  # by the rule's index
    errors: dict[int, int] = field(default_factory=dict)
    examples: dict[int, deque[dict[str, Any]]] = field(default_factory=dict)

    def merge(self, later: Tally) -> None:
        """Add a tally of calls that come after this one's."""
        self.evaluated += later.evaluated
        self.evaluations += later.evaluations
        _add(self.unjudged, later.unjudged)
        _add(self.changed, later.changed)
        _add(self.hits, later.hits)
        _add(self.errors, later.errors)
        for index, examples in later.examples.items():
            self._examples(index).extend(examples)

    def _examples(self, index: int) -> deque[dict[str, Any]]:
        kept = self.examples.get(index)
        if kept is None:
            kept = self.examples[index] = deque(maxlen=EXAMPLES_KEPT)
        return kept

    def report(self, document: PolicyDocument) -> dict[str, Any]:
        return {
            "evaluated": self.evaluated,
            "changed": dict(self.changed),
            "rules": [
                {
                    "id": rule.id,
                    "then": rule.then,
                    "mode": rule.mode,
                    "hits": self.hits.get(index, 0),
                    "errors": self.errors.get(index, 0),
                    "examples": list(self.examples.get(index, ())),
                }
                for index, rule in enumerate(document.rules)
            ],
            "unjudged": sum(self.unjudged.values()),
            "unjudged_by": dict(self.unjudged),
            "evaluations": self.evaluations,
        }


def _add(counts: dict[Any, int], more: Mapping[Any, int]) -> None:
    for key, n in more.items():
        counts[key] = counts.get(key, 0) + n


# One call's verdict: (index of each rule that matched, whether its expression failed).
Matched = tuple[tuple[int, bool], ...]


class Backtest:
    """Judges recorded calls one at a time into `tally`. Memory stays bounded whatever
    the number of calls."""

    def __init__(self, document: PolicyDocument, compiler: Compiler) -> None:
        self.document = document
        self.compiler = compiler
        self.tally = Tally()
        self._on: dict[str, tuple[int, ...]] = {
            event: tuple(i for i, rule in enumerate(document.rules) if event in rule.on)
            for event in document.names_by_event
        }
        self._together = {
            event: compiler.together([document.rules[i].expression for i in on])
            for event, on in self._on.items()
        }
        self._verdicts: dict[tuple[Any, ...], Matched] = {}

    @property
    def events(self) -> frozenset[str]:
        """The events some rule is on: dispatches of any other event are not calls to it."""
        return frozenset(self._on)

    def take(self) -> Tally:
        """The tally so far, and a fresh one for what comes next (verdicts stay kept)."""
        taken, self.tally = self.tally, Tally()
        return taken

    def judge(self, call: RecordedCall, context: CallContext) -> None:
        data = call.data
        event = data["event_name"]
        on = self._on.get(event)
        if on is None:
            return
        names = self.document.names_by_event[event]
        why = unjudged_because(data, names)
        if why is not None:
            self.tally.unjudged[why] += 1
            return
        self.tally.evaluated += 1
        ev = rebuilt_event(data)
        key = _verdict_key(ev, names, context)
        matched = self._verdicts.get(key)
        if matched is None:
            matched = self._evaluate(on, ev, context, names)
            if len(self._verdicts) >= VERDICTS_KEPT:
                self._verdicts.clear()
            self._verdicts[key] = matched
        if matched:
            self._count(call, matched)

    def _evaluate(
        self, on: tuple[int, ...], ev: LifecycleEvent, context: CallContext, names: frozenset[str]
    ) -> Matched:
        self.tally.evaluations += 1
        activation = self.compiler.activation(call_value(ev, context, names))
        results = self._together[ev.event].each(activation)
        if results is not None:
            return tuple((index, False) for index, hit in zip(on, results, strict=True) if hit)
        matched: list[tuple[int, bool]] = []
        for index in on:
            rule = self.document.rules[index]
            try:
                if rule.expression.matches(activation):
                    matched.append((index, False))
            except Exception:  # noqa: BLE001 - decided per rule, as on the hook path
                matched.append((index, True))
        return tuple(matched)

    def _count(self, call: RecordedCall, matched: Matched) -> None:
        tally = self.tally
        deciding: PolicyRule | None = None
        for index, failed in matched:
            rule = self.document.rules[index]
            if failed:
                tally.errors[index] = tally.errors.get(index, 0) + 1
                if rule.on_error != "apply":
                    continue  # skipped on this call, the failure counted
            tally.hits[index] = tally.hits.get(index, 0) + 1
            facts = call.data.get("facts") or {}
            tally._examples(index).append(
                {
                    "position": call.position,
                    "session_id": call.session_id,
                    "summary": facts.get("input_summary") or facts.get("prompt"),
                    "decision": call.data["outcome"],
                }
            )
            if not rule.shadow and (
                deciding is None or STRENGTH[rule.then] < STRENGTH[deciding.then]
            ):
                deciding = rule
        if deciding is not None and _differs(deciding, call):
            tally.changed[deciding.then] += 1


def _differs(rule: PolicyRule, call: RecordedCall) -> bool:
    """Whether the deciding rule's outcome is not what really happened to the call."""
    if rule.then == "context":
        given = call.data.get("additional_context") or ""
        return call.happened in ("deny", "ask") or not rule.context or rule.context not in given
    return call.happened != rule.then


def _verdict_key(
    ev: LifecycleEvent, names: frozenset[str], context: CallContext
) -> tuple[Any, ...]:
    """What a verdict depends on: the fields the rules read, and nothing else."""
    reads_input = bool(names & _INPUT_NAMES)
    return (
        ev.event,
        ev.tool_name,
        _KEY.encode(ev.tool_input) if reads_input else None,
        ev.cwd if reads_input else None,
        ev.agent if "runtime" in names else None,
        context.workspace if "workspace" in names else None,
        (context.session_id, context.agent, context.title) if "session" in names else None,
        ev.prompt if "prompt" in names else None,
    )


# Compact JSON of an input: equal inputs, equal keys (`true` and `1` differ, as in CEL).
_KEY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
