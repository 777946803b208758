"""Event schema versions (SPEC §3): every class declares one; earlier versions still load.

Events of the previous release are written here as that release wrote them: its state
encoded by the same transcoder, without `class_version`, with camelCase run keys and
camelCase self-update evidence. They then load as aggregates, feed every projection,
replay (and swap) without drift, and the hash chain over their bytes verifies.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from bootstrap import Services
from domain.hook_dispatch_record import HookDispatch
from domain.self_update_cycle import SelfUpdateCycle
from projections.replay import replay
from services.log_audit import verify_log
from tests.test_event_round_trip import (
    discovered_event_classes,
    hook_dispatch_created,
    self_update_cycle_lifecycle,
)


def test_every_event_class_declares_its_version() -> None:
    undeclared = [
        c.__qualname__ for c in discovered_event_classes() if "class_version" not in vars(c)
    ]
    assert undeclared == []
    assert HookDispatch.Created.class_version == 5  # type: ignore[attr-defined]
    assert SelfUpdateCycle.PhaseRecorded.class_version == 2  # type: ignore[attr-defined]


def as_v1(services: Services, event: DomainEventProtocol[UUID], change: Any) -> StoredEvent:
    """`event` stored as the previous release stored it: `change` applied to its state."""
    mapper = services.app.mapper
    stored = mapper.to_stored_event(event)
    state = mapper.transcoder.decode(stored.state)
    assert state.pop("class_version", 1) == getattr(type(event), "class_version", 1)
    change(state)
    return StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=mapper.transcoder.encode(state),
    )


def v1_runs(state: dict[str, Any]) -> None:
    del state["facts"], state["received_at"], state["learned"], state["policy"]  # v1-2: none
    state["runs"] = [
        {"handlerId": "guard", "outcome": "deny", "failure": None, "reason": "no", "durationMs": 4}
    ]


def v1_evidence(state: dict[str, Any]) -> None:
    renamed = {"review_by": "reviewBy", "removed_ref": "removedRef"}
    state["evidence"] = {renamed.get(k, k): v for k, v in state["evidence"].items()}


def test_version_1_events_load_project_replay_and_verify(services: Services) -> None:
    dispatch = next(hook_dispatch_created())
    stored = [as_v1(services, e, v1_runs) for e in dispatch.collect_events()]
    cycle_events: list[StoredEvent] = []
    for aggregate in self_update_cycle_lifecycle():
        for event in aggregate.collect_events():
            is_phase = type(event).__name__ == "PhaseRecorded"
            cycle_events.append(
                as_v1(services, event, v1_evidence if is_phase else lambda state: None)
            )
    cycle_id = UUID(str(cycle_events[0].originator_id))
    services.app.recorder.insert_events([*stored, *cycle_events])
    services.runner.catch_up()

    reloaded: HookDispatch = services.app.repository.get(dispatch.id)
    assert reloaded.runs == [
        {
            "handler_id": "guard",
            "outcome": "deny",
            "failure": None,
            "reason": "no",
            "duration_ms": 4,
        }
    ]
    assert reloaded.facts is None
    # Version 3 of the cycle is its inspect phase: only an upcast `review_by` makes it wait.
    inspected: SelfUpdateCycle = services.app.repository.get(cycle_id, version=3)
    assert inspected.awaiting == {"attempt": 1, "digest": "sha256:" + "ab" * 32}

    audit = services.store.query(
        "SELECT handler_id, duration_ms FROM rm_hook_audit WHERE dispatch_id = ?",
        (str(dispatch.id),),
    )
    assert [(r["handler_id"], r["duration_ms"]) for r in audit] == [("guard", 4)]
    phases = services.store.query("SELECT evidence FROM rm_self_update_phases")
    assert phases and all("reviewBy" not in r["evidence"] for r in phases)
    assert any("review_by" in r["evidence"] for r in phases)

    reports = replay(services.app, services.store, services.projections, swap=True)
    assert [r.name for r in reports if r.drift] == []
    assert all(r.swapped for r in reports)
    report = verify_log(services.app, services.store, None)
    assert report.ok and report.events >= len(stored) + len(cycle_events), report


def test_a_version_2_dispatch_loads_without_facts(services: Services) -> None:
    dispatch = next(hook_dispatch_created())
    assert isinstance(dispatch, HookDispatch) and dispatch.facts is not None
    mapper = services.app.mapper
    stored = mapper.to_stored_event(dispatch.collect_events()[0])
    state = mapper.transcoder.decode(stored.state)
    del state["facts"], state["received_at"]
    state["class_version"] = 2
    services.app.recorder.insert_events(
        [
            StoredEvent(
                originator_id=stored.originator_id,
                originator_version=stored.originator_version,
                topic=stored.topic,
                state=mapper.transcoder.encode(state),
            )
        ]
    )
    reloaded: HookDispatch = services.app.repository.get(dispatch.id)
    assert reloaded.facts is None
    assert reloaded.runs == dispatch.runs
