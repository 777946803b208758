"""`tachograph verify`, `checkpoints` and `replay`: the audit commands."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from domain.application import Tachograph
from infra.log_scan import count_events, log_head
from infra.log_wire import verify_report_wire
from infra.settings import Settings
from projections.base import Projection
from projections.log_checkpoints import attach_signing_key
from projections.replay import ProjectionReplay, ReplayError, replay, select_projections
from projections.store import ReadStore
from services.log_audit import checkpoints_document, load_checkpoints, verify_log

# CLI


@dataclass
class _Context:
    settings: Settings
    app: Tachograph
    store: ReadStore
    projections: list[Projection]

    def close(self) -> None:
        self.store.close()
        self.app.close()


@contextmanager
def open_stores(settings: Settings) -> Iterator[_Context]:
    # Not build_services: an audit command must not append to the log it is auditing.
    from bootstrap import open_read_store
    from infra.event_store import open_application, schema_lock
    from projections.registry import all_projections
    from projections.runner import ensure_schema

    projections = all_projections()
    with schema_lock(settings):
        app = open_application(settings)
        store = open_read_store(settings)
        ensure_schema(store, projections)
    context = _Context(settings, app, store, projections)
    try:
        yield context
    finally:
        context.close()


def _progress(description: str) -> Any:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        """Events per second."""

        def render(self, task: Any) -> Text:
            speed = task.finished_speed or task.speed
            return Text(f"{speed:,.0f} events/s" if speed else "- events/s")

    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )


def cli_verify(settings: Settings, against: str | None, as_json: bool, out: TextIO) -> int:
    """`tachograph verify [--against FILE]`: 0 when the chain holds, 1 at a break, 2 on error."""
    from infra.note_key import load_note_key

    anchors = None
    if against is not None:
        try:
            anchors = load_checkpoints(Path(against))
        except ValueError as exc:
            print(f"tachograph: {exc}", file=sys.stderr)
            return 2
    note_key = load_note_key(settings.note_key_path, create=False)
    started = time.monotonic()
    try:
        with open_stores(settings) as ctx, _progress("verifying") as bar:
            task = bar.add_task("verify", total=None)
            report = verify_log(
                ctx.app,
                ctx.store,
                settings.log_signing_key,
                note_key=note_key.verifier() if note_key else None,
                witnesses=[peer.key for peer in settings.witnesses],
                against=anchors,
                progress=lambda n: bar.advance(task, n),
                on_total=lambda total: bar.update(task, total=total),
            )
    except Exception as exc:  # noqa: BLE001 - could not verify: say why in one line
        print(f"tachograph: verify failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    elapsed = time.monotonic() - started
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if as_json:
        out.write(json.dumps(verify_report_wire(report), indent=2) + "\n")
    elif report.chain_break is None:
        out.write(
            f"OK: {report.events} events verified through position {report.head_position} "
            f"in {elapsed:.1f} s ({report.events / max(elapsed, 1e-9):,.0f} events/s); "
            f"{report.checkpoints_checked} {report.source} checkpoints matched "
            f"({report.signed} signed, {report.unsigned} unsigned); Merkle tree of "
            f"{report.merkle_leaves} leaves matched, {report.signed_roots_checked} of "
            f"{report.signed_roots} signed checkpoints (Ed25519) matched; "
            f"assurance: {report.assurance_text}\n"
        )
    else:
        b = report.chain_break
        out.write(f"BROKEN at position {b.position}: {b.kind}. {b.message}\n")
    return 0 if report.ok else 1


def cli_checkpoints(settings: Settings, out_path: str | None, out: TextIO) -> int:
    """`tachograph checkpoints [--out FILE]`: export the checkpoints for an auditor to keep."""
    with open_stores(settings) as ctx:
        doc = checkpoints_document(ctx.store, settings.log_signing_key)
    text = json.dumps(doc, indent=1) + "\n"
    if out_path:
        Path(out_path).write_text(text, encoding="utf-8")
    else:
        out.write(text)
    print(f"exported {len(doc['checkpoints'])} checkpoints", file=sys.stderr)
    return 0


def cli_replay(
    settings: Settings, names: Sequence[str], swap: bool, as_json: bool, out: TextIO
) -> int:
    """`tachograph replay`: 0 when every rebuilt projection equals (or replaced) the live one."""
    with open_stores(settings) as ctx:
        attach_signing_key(ctx.projections, settings.log_signing_key)
        try:
            selected = select_projections(ctx.projections, names)
        except ReplayError as exc:
            print(f"tachograph: {exc}", file=sys.stderr)
            return 2
        total = count_events(ctx.app, log_head(ctx.app))
        started = time.monotonic()
        try:
            with _progress("replaying") as bar:
                task = bar.add_task("replay", total=total)
                reports = replay(
                    ctx.app,
                    ctx.store,
                    selected,
                    swap=swap,
                    progress=lambda n: bar.advance(task, n),
                    phase=lambda what: bar.console.print(f"{what} ..."),
                )
        except Exception as exc:  # noqa: BLE001 - one clear line; a swap rolls back whole
            print(f"tachograph: replay failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        elapsed = time.monotonic() - started
    print(
        f"replayed {total} events into {len(reports)} projections in {elapsed:.1f} s "
        f"({total / max(elapsed, 1e-9):,.0f} events/s)",
        file=sys.stderr,
    )
    if as_json:
        out.write(json.dumps([r.as_dict() for r in reports], indent=2) + "\n")
    else:
        for report in reports:
            out.write(_describe(report))
    failed = [r for r in reports if r.drift and not r.swapped]
    return 1 if failed else 0


def _describe(report: ProjectionReplay) -> str:
    lines = []
    if not report.drift:
        sizes = ", ".join(f"{t.table} {t.live_rows} rows" for t in report.tables)
        lines.append(f"{report.name}: no drift at position {report.position} ({sizes})")
    else:
        lines.append(f"{report.name}: DRIFT at position {report.position}")
        if report.problem:
            lines.append(f"  {report.problem}")
        for t in report.tables:
            if t.equal:
                continue
            lines.append(f"  {t.table}: live {t.live_rows} rows, rebuilt {t.rebuilt_rows} rows")
            for label, keys in (
                ("changed", t.changed),
                ("only live", t.only_live),
                ("only rebuilt", t.only_rebuilt),
            ):
                for key in keys:
                    lines.append(f"    {label}: {key}")
    if report.swapped:
        lines.append(f"  swapped: live tables replaced at position {report.position}")
    if report.swap_refused:
        lines.append(f"  swap refused: {report.swap_refused}")
    return "\n".join(lines) + "\n"
