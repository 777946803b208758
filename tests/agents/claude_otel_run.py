"""The real Claude Code governed by a `tachograph serve` that exports its decisions as
OpenTelemetry spans to a stand-in collector, offline (run inside `unshare -n`).

`python claude_otel_run.py --work DIR --claude BIN`: the scripted run of claude_run.py
(a denied, a rewritten and a passed Bash call) with command hooks, Claude Code started
with a W3C `TRACEPARENT` as a caller would hand it one; DIR/report.json gets the run and
every span the collector received.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests"), str(REPO)]

import anthropic_standin as standin  # noqa: E402
import claude_run  # noqa: E402
from hook_server import HookServer  # noqa: E402
from otel_collector import Collector  # noqa: E402

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    args = parser.parse_args()
    work: Path = args.work
    (work / "workspace").mkdir(parents=True, exist_ok=True)
    handler = HookServer()
    handler.routes["/policy"] = claude_run.policy
    handler.routes["/prompt"] = claude_run.context(claude_run.PROMPT_CONTEXT)
    handler.routes["/start"] = claude_run.context(claude_run.START_CONTEXT)
    collector = Collector()
    tool_env = {
        "PATH": os.environ["PATH"],
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
        "TACHOGRAPH_API_KEY": claude_run.ADMIN_KEY,
    }
    token = claude_run.tachograph(
        "keys", "issue", "--role", "agent", "--workspace", "default", env=tool_env
    ).strip()
    serve_env = {
        **tool_env,
        "TACHOGRAPH_HOOKS": claude_run.managed_hooks(handler.url),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        "TACHOGRAPH_SERVE_CPU": "all",
        "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    port = claude_run.SERVE_PORT
    report: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    log = work / "serve.log"
    with standin.AnthropicStandIn(claude_run.responder) as api:
        with log.open("ab") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
                cwd=REPO,
                env=serve_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            claude_run.wait_for(f"http://127.0.0.1:{port}/api/health", serve, log)
            report["command"] = claude_run.run_claude(
                args.claude, work, "command", api, tool_env=tool_env, token=token, http=False,
                extra_env={"TRACEPARENT": TRACEPARENT},
            )  # fmt: skip
            # SessionEnd is the run's last decision: every span is out once it arrived.
            collector.spans(
                lambda s: s.attributes.get("tachograph.hook.event") == "SessionEnd", timeout=20
            )
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
        report["standin_errors"] = list(api.errors)
    handler.close()
    collector.close()
    report["spans"] = [dataclasses.asdict(span) for span in collector.received]
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
