"""Tachograph: the control plane for AI coding agents (serve, audit, keys, hooks)."""

# Imports are lazy so `tachograph hook ...`, spawned for every tool call, stays lean.

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from cli.hook_install import (
    COMMAND_HOOK_RUNTIMES,
    PLUGIN_HOOK_RUNTIMES,
    cmd_hook_install,
    cmd_hook_uninstall,
)


def _settings() -> Any:
    from infra.settings import Settings, SettingsError

    try:
        return Settings.from_env()
    except SettingsError as exc:
        print(f"tachograph: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def _log_settings(args: argparse.Namespace) -> Any:
    """Settings of a command that reads the log: it must exist; nothing is created."""
    from cli.log_presence import NoLog, require_log, with_data_dir

    settings = with_data_dir(_settings(), args)
    try:
        require_log(settings)
    except NoLog as exc:
        print(f"tachograph: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return settings


def _long_lived_settings() -> Any:
    """Settings for serve and worker, whose secrets then leave the environment
    (infra/secret_env.py): an agent that could read /proc/<pid>/environ finds none."""
    from infra.secret_env import scrub, secret_names

    settings = _settings()
    scrub(secret_names(settings))
    return settings


def _startup_errors_named(
    command: Callable[[argparse.Namespace], int],
) -> Callable[[argparse.Namespace], int]:
    """A data directory, workspace root or database a setting names but the command cannot
    use ends it with one line naming the setting (cli/startup_errors.py)."""

    def run(args: argparse.Namespace) -> int:
        from cli.startup_errors import naming_the_setting

        with naming_the_setting():
            return command(args)

    run.__doc__ = command.__doc__
    return run


@_startup_errors_named
def cmd_serve(args: argparse.Namespace) -> int:
    """API, projections and scheduler in one process."""
    import signal

    from api.app import create_app
    from cli.http_serve import run_http
    from cli.stop_signals import ignore_further
    from infra.logs import configure_logging
    from projections.log_checkpoints import warn_if_unsigned

    settings = _long_lived_settings()
    configure_logging(settings.log_level, settings.secret_values())
    warn_if_unsigned(settings.log_signing_key)
    _warn_short_hooks(settings)
    # With the projections in a process of their own, `auto` pins nothing: the kernel
    # spreading both processes and their threads measured best (ingest ÷ bare endpoint
    # 0.46-0.52 against 0.33-0.39 with serve on one CPU and the projections on another).
    pin = "all" if settings.projections == "process" and settings.serve_cpu == "auto" else None
    placed = _pin_cpu(pin or settings.serve_cpu)
    receiver = _otlp_receiver(settings, args.host)

    def started(services: Any) -> None:
        if placed is not None:
            placed(services)
        if receiver is not None:
            receiver.start()  # its CPU is chosen away from the one serve was placed on

    app = create_app(settings, _serve_services(settings), long_lived=True, on_started=started)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then re-raises the signal to the
    # previous handler; a no-op one lets a clean shutdown end with exit status 0.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    try:
        run_http(app, args.host, args.port, settings)
    finally:
        ignore_further()  # stopped already (cli/stop_signals.py)
        if receiver is not None:
            receiver.stop()
    return 0


def _serve_services(settings: Any) -> Any:
    """serve's services; unless TACHOGRAPH_PROJECTIONS=thread, their runner delegates the
    read models to a process of its own (cli/projections_process.py)."""
    from bootstrap import build_services

    services = build_services(settings)
    if settings.projections == "process":
        from cli.projections_process import ProjectionsProcess

        services.runner.delegate(ProjectionsProcess(settings, services.runner))
    return services


def _otlp_receiver(settings: Any, host: str) -> Any:
    """The OTLP receiver's own process when TACHOGRAPH_OTLP_PORT is set (cli/otlp_receiver.py)."""
    if settings.otlp_port is None:
        return None
    from cli.otlp_receiver import ReceiverProcess

    return ReceiverProcess(settings, host, settings.otlp_port)


def _warn_short_hooks(settings: Any) -> None:
    """Say at start-up when an installed hook stops waiting before a hold can end: the
    runtime would run the held call undecided (cli/hook_waits.py; `doctor` fails on it)."""
    import logging
    import os

    from cli.hook_waits import search_directories, short_hook_findings
    from domain.approval_rules import longest_hold_s

    hold = longest_hold_s(settings.approvals, settings.hooks.handlers)
    if hold == 0:
        return
    directories = search_directories(settings.workspace_root, os.environ)
    for finding in short_hook_findings(hold, directories):
        logging.getLogger("tachograph.serve").warning("hook waits too little: %s", finding)


def _pin_cpu(setting: str) -> Callable[[Any], None] | None:
    """Pin serve's threads to one CPU before it starts any (infra/cpu_affinity.py).

    Returns what to run once the services are up: it lets the projection runner use
    every CPU again (its SQLite or PostgreSQL work then overlaps the requests).
    """
    import logging
    import os

    from infra.cpu_affinity import allowed_cpus, choose_cpu, free_thread, pin_to

    allowed = allowed_cpus()
    cpu = choose_cpu(setting, allowed, os.getpid()) if allowed is not None else None
    if cpu is None or allowed is None:
        return None
    pin_to(cpu)
    logging.getLogger("tachograph").info(
        "serving on CPU %d, projections on any CPU (TACHOGRAPH_SERVE_CPU=%s; `all` pins nothing)",
        cpu,
        setting,
    )

    def free_runner(services: Any) -> None:
        thread_id = services.runner.native_thread_id
        if thread_id is not None:
            free_thread(thread_id, allowed)

    return free_runner


@_startup_errors_named
def cmd_worker(args: argparse.Namespace) -> int:
    """Projections and scheduler without HTTP, until SIGTERM or SIGINT."""
    from bootstrap import build_services, freeze_startup_heap
    from cli.stop_signals import StopSignals
    from infra.logs import configure_logging
    from projections.log_checkpoints import warn_if_unsigned

    settings = _long_lived_settings()
    configure_logging(settings.log_level, settings.secret_values())
    warn_if_unsigned(settings.log_signing_key)
    services = build_services(settings)
    if args.metrics_port is not None:
        from services.process_metrics import ProcessMetrics, serve_metrics

        serve_metrics(ProcessMetrics(services), args.metrics_host, args.metrics_port)
    signals = StopSignals()
    services.start()
    freeze_startup_heap()
    print("tachograph worker started", file=sys.stderr, flush=True)
    signals.wait()
    services.stop()
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Write the ordered log as NDJSON."""
    from contextlib import ExitStack

    from fastapi.encoders import jsonable_encoder

    from domain.strict_json import dumps_readable
    from infra.event_store import open_application
    from infra.log_reader import event_record, iter_events

    settings = _log_settings(args)
    if args.bundle is not None:
        from cli.session_exports import cli_export_bundle

        return cli_export_bundle(settings, args.session, args.bundle)
    if args.session is not None:
        from cli.session_exports import cli_export_session

        return cli_export_session(settings, args.session, args.out)
    app = open_application(settings)
    count = 0
    with ExitStack() as stack:
        stack.callback(app.close)
        out = stack.enter_context(open(args.out, "w", encoding="utf-8")) if args.out else sys.stdout
        for n in iter_events(app, after=args.after):
            out.write(dumps_readable(jsonable_encoder(event_record(app, n)), separators=(",", ":")))
            out.write("\n")
            count += 1
    print(f"exported {count} events", file=sys.stderr)
    return 0


def cmd_activity(args: argparse.Namespace) -> int:
    """The auditor search of GET /api/activity, as a table or NDJSON."""
    from cli.activity import cli_activity

    return cli_activity(_log_settings(args), args, sys.stdout)


def cmd_verify(args: argparse.Namespace) -> int:
    """Recompute the log's hash chain; exit 1 at the first break. Or check a bundle."""
    from cli.audit import cli_verify
    from cli.log_proofs import cli_verify_bundle, cli_verify_kept

    if args.bundle is not None:
        return cli_verify_bundle(args.bundle, args.key, sys.stdout, args.witness)
    if args.checkpoint is not None:
        return cli_verify_kept(_log_settings(args), args.checkpoint, args.key, sys.stdout)
    return cli_verify(_log_settings(args), args.against, args.json, sys.stdout)


def cmd_checkpoints(args: argparse.Namespace) -> int:
    """Export the chain's checkpoints for an auditor to keep."""
    from cli.audit import cli_checkpoints

    return cli_checkpoints(_log_settings(args), args.out, sys.stdout)


def cmd_replay(args: argparse.Namespace) -> int:
    """Rebuild projections from position 0, compare with the live ones, optionally swap."""
    from cli.audit import cli_replay

    return cli_replay(_log_settings(args), args.projection or [], args.swap, args.json, sys.stdout)


def cmd_keys(args: argparse.Namespace) -> int:
    """Issue, list and revoke credentials directly in the store."""
    from cli.keys import run

    listing = args.keys_command == "list"
    settings = _log_settings(args) if listing else _settings()
    return run(args, settings, sys.stdout, sys.stderr)


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check configuration, database, hooks, their failure log and the executor; one line each."""
    from cli.doctor import run_doctor

    return run_doctor(sys.stdout, data_dir=args.data_dir, projects=args.projects)


def cmd_bench(args: argparse.Namespace) -> int:
    """Measure ingest, hook latency and read-your-writes beside same-run baselines."""
    import os

    from bench.run import run_bench

    stores = [args.store] if args.store else ["sqlite", "postgres"]
    pg_url = os.environ.get(
        "TACHOGRAPH_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
    )
    run_bench(stores, args.quick, Path(args.out), pg_url, only=args.only)
    return 0


def build_parser() -> argparse.ArgumentParser:
    from cli.cli_values import TIME_FORMS
    from cli.log_presence import add_data_dir_option
    from cli.usage import add_usage_parser
    from projections.activity import OUTCOME_WORDS

    parser = argparse.ArgumentParser(prog="tachograph", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the API, projections and scheduler")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser("worker", help="run projections and the scheduler without HTTP")
    worker.add_argument("--metrics-port", type=int, help="serve Prometheus /metrics on this port")
    worker.add_argument("--metrics-host", default="127.0.0.1")
    worker.set_defaults(func=cmd_worker)

    export = sub.add_parser("export", help="write the log, or one session's events, as NDJSON")
    export.add_argument("--after", type=int, default=0)
    export.add_argument(
        "--session", help="only this session's events, with links: its id or first characters"
    )
    export.add_argument("--out")
    export.add_argument("--bundle", metavar="FILE", help="the session's events with proofs")
    add_data_dir_option(export)
    export.set_defaults(func=cmd_export)

    activity = sub.add_parser("activity", help="search recorded tool calls across sessions")
    activity.add_argument("--tool")
    activity.add_argument("--contains", help="text in the input summary (any case)")
    activity.add_argument("--workspace", dest="workspace_id")
    activity.add_argument(
        "--session", dest="session_id", help="a session id, or its first characters"
    )
    activity.add_argument(
        "--outcome",
        choices=OUTCOME_WORDS,
        help="the decision, in either column's words (deny or denied, pass or allowed, ...)",
    )
    activity.add_argument(
        "--rule", dest="rule_id", help="the calls this policy rule decided, or would have"
    )
    activity.add_argument("--policy-mode", choices=["enforce", "shadow"])
    activity.add_argument("--since", help=f"calls at or after: {TIME_FORMS}")
    activity.add_argument("--until", help=f"calls before: {TIME_FORMS}")
    activity.add_argument("--limit", type=int, default=50)
    activity.add_argument("--format", choices=["table", "ndjson"], default="table")
    add_data_dir_option(activity)
    activity.set_defaults(func=cmd_activity)
    add_usage_parser(sub, _log_settings)

    verify = sub.add_parser("verify", help="verify the log's hash chain against its checkpoints")
    verify.add_argument("--against", metavar="FILE", help="checkpoints exported earlier")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--bundle", metavar="FILE", help="check a bundle offline, with --key")
    verify.add_argument("--checkpoint", metavar="FILE", help="signed checkpoints kept earlier")
    verify.add_argument("--key", help="the log's note verifier key, or a file holding it")
    verify.add_argument("--witness", action="append", default=[], help="a cosigner key (--bundle)")
    add_data_dir_option(verify)
    verify.set_defaults(func=cmd_verify)

    checkpoints = sub.add_parser("checkpoints", help="export the log's signed checkpoints")
    checkpoints.add_argument("--out", metavar="FILE")
    add_data_dir_option(checkpoints)
    checkpoints.set_defaults(func=cmd_checkpoints)

    replay = sub.add_parser("replay", help="rebuild projections and compare with the live ones")
    replay.add_argument("--projection", action="append", metavar="NAME")
    replay.add_argument("--swap", action="store_true", help="replace the live tables atomically")
    replay.add_argument("--json", action="store_true", help="print the report as JSON")
    add_data_dir_option(replay)
    replay.set_defaults(func=cmd_replay)

    hook = sub.add_parser("hook", help="agent hook adapters")
    hook_sub = hook.add_subparsers(dest="hook_command", required=True)
    for runtime in COMMAND_HOOK_RUNTIMES:  # `main` hands these over before parsing
        relay = hook_sub.add_parser(runtime, help=f"{runtime} command hook: stdin JSON → answer")
        relay.add_argument("event", nargs="?")
        relay.add_argument("--fail-closed", action="store_true")
    for name, func in (("install", cmd_hook_install), ("uninstall", cmd_hook_uninstall)):
        action = hook_sub.add_parser(name, help=f"{name} Tachograph's hooks of an agent runtime")
        action.add_argument("agent", choices=(*COMMAND_HOOK_RUNTIMES, *PLUGIN_HOOK_RUNTIMES))
        action.add_argument("dir")
        if name == "install":
            action.add_argument("--http", action="store_true", help="native HTTP hooks")
            action.add_argument("--url", help="the server URL the hooks reach (pinned)")
            action.add_argument(
                "--fail-closed",
                action="store_true",
                help="gate events deny when Tachograph cannot be reached",
            )
        action.set_defaults(func=func)

    from cli.keys import add_parser as add_keys_parser
    from cli.log_proofs import add_parser as add_log_parser
    from cli.log_proofs import cli_log
    from cli.otlp_receiver import add_parser as add_receiver_parser
    from cli.policy import add_parser as add_policy_parser
    from cli.policy_test import add_test_parser, cli_policy_test
    from cli.projections_process import add_parser as add_projections_parser
    from cli.witness import add_parser as add_witness_parser

    add_keys_parser(sub)
    sub.choices["keys"].set_defaults(func=cmd_keys)
    add_receiver_parser(sub)
    add_projections_parser(sub)
    add_log_parser(sub)
    sub.choices["log"].set_defaults(
        func=lambda args: cli_log(_log_settings(args), args, sys.stdout)
    )
    add_witness_parser(sub)
    # `policy test` (a backtest, in-process over the log) beside the commands that talk
    # to a server: its own func wins over the group's.
    add_test_parser(add_policy_parser(sub)).set_defaults(
        func=lambda args: cli_policy_test(_log_settings(args), args, sys.stdout)
    )

    bench = sub.add_parser("bench", help="benchmarks beside same-run baselines")
    bench.add_argument("--store", choices=["sqlite", "postgres"])
    bench.add_argument("--quick", action="store_true", help="short runs (smoke test)")
    bench.add_argument("--out", default="bench-results.json")
    bench.add_argument(
        "--only", action="append", metavar="NAME", help="run only this benchmark (repeatable)"
    )
    bench.set_defaults(func=cmd_bench)

    doctor = sub.add_parser("doctor", help="check configuration, database, hooks and executor")
    doctor.add_argument(
        "projects",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="project directories to check for installed hooks, besides the home directory, "
        "the workspace root and the workspaces below it",
    )
    add_data_dir_option(doctor)
    doctor.set_defaults(func=cmd_doctor)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["hook"] and argv[1:2] and argv[1] in COMMAND_HOOK_RUNTIMES:
        # The hot path of every tool call: hand over before anything heavy is imported.
        from hook_client.command import main as relay_main

        return relay_main(argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
