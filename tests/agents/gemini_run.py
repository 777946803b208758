"""One offline Gemini CLI run against a real `tachograph serve` (tests/agents/test_gemini_cli.py).

    python gemini_run.py --work DIR --serve-port N --gemini BIN --token-file F [--server-down]

Run it inside a loopback-only network namespace (`unshare -n`, lo up): it starts a policy
handler, `tachograph serve` on SQLite in DIR/data (unless --server-down), the scripted
Gemini API stand-in and the real `gemini -p`, all on 127.0.0.1 there. The hooks were
installed beforehand with `tachograph hook install gemini DIR/home --url
http://127.0.0.1:N`; the agent token in F is the only credential Gemini CLI's environment
holds. It writes DIR/report.json: the CLI's exit code and time, what the stand-in
received, the policy handler's calls and which files the commands made. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests")]

import gemini_standin as standin  # noqa: E402
from hook_server import HookServer  # noqa: E402

PROMPT = "Tidy the project: run the checks, then add hello.txt."
DENIED_COMMAND = "echo gone > DENIED.txt; rm -rf build"
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN = {"command": "echo rewritten > REWRITTEN.txt", "description": "rewritten by policy"}
DENY_REASON = "rm -rf is not allowed in this workspace"
FINAL_TEXT = "Checks run and hello.txt added."
ADMIN_KEY = "gemini-e2e-admin-key-0123456789"


def policy(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed PreToolUse handler: deny `rm -rf`, rewrite the ORIGINAL command (the
    replacement is the complete argument object)."""
    command = (body.get("detail", {}).get("toolInput") or {}).get("command", "")
    if "rm -rf" in command:
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": DENY_REASON}
    if command == ORIGINAL_COMMAND:
        return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": REWRITTEN}
    return 200, {"schemaVersion": 1, "outcome": "pass"}


def responder(project: Path) -> standin.Responder:
    def reply(body: dict[str, Any]) -> standin.Reply:
        turn = standin.conversation_turn(body)
        if turn == 0:
            return standin.ToolUse(
                "run_shell_command", {"command": DENIED_COMMAND, "description": "clean"}
            )
        if turn == 1:
            return standin.ToolUse(
                "run_shell_command", {"command": ORIGINAL_COMMAND, "description": "checks"}
            )
        if turn == 2:
            return standin.ToolUse(
                "write_file", {"file_path": str(project / "hello.txt"), "content": "hello\n"}
            )
        return standin.Text(FINAL_TEXT)

    return reply


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    request = urllib.request.Request(url, headers={"x-tachograph-key": ADMIN_KEY})
    while True:
        try:
            urllib.request.urlopen(request, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--serve-port", type=int, required=True)
    parser.add_argument("--gemini", required=True)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--server-down", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    home, project = work / "home", work / "project"
    project.mkdir(parents=True, exist_ok=True)
    handler = HookServer()
    handler.routes["/policy"] = policy
    serve = None
    report: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    if not args.server_down:
        policy_handler = {
            "id": "shell-policy",
            "type": "http",
            "url": handler.url + "/policy",
            "matcher": ["run_shell_command"],
        }
        env = {
            "PATH": os.environ["PATH"],
            "TACHOGRAPH_DATA_DIR": str(work / "data"),
            "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
            "TACHOGRAPH_API_KEY": ADMIN_KEY,
            "TACHOGRAPH_HOOKS": json.dumps(
                {"version": 1, "hooks": {"PreToolUse": [policy_handler]}}
            ),
            "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
            "TACHOGRAPH_SERVE_CPU": "all",
        }
        log = open(work / "serve.log", "ab")  # noqa: SIM115 - closed with the process
        serve = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "serve", "--port", str(args.serve_port)],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        wait_for(f"http://127.0.0.1:{args.serve_port}/api/health")
    try:
        with standin.GeminiStandIn(responder(project)) as api:
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(home),
                "GOOGLE_GEMINI_BASE_URL": api.url,
                "GEMINI_API_KEY": "standin-key",
                # The hook's only credential; Gemini CLI redacts *TOKEN* names from hooks
                # (redaction is on in this settings.json) unless they are allow-listed.
                "TACHOGRAPH_AGENT_TOKEN": args.token_file.read_text().strip(),
                "TACHOGRAPH_DATA_DIR": str(work / "hook-client"),
                "NO_COLOR": "1",
                "CI": "1",
            }
            argv = [
                args.gemini,
                "--skip-trust",
                "--approval-mode",
                "yolo",
                "-m",
                "gemini-2.5-pro",
                "-p",
                PROMPT,
            ]
            started = time.monotonic()
            done = subprocess.run(
                argv,
                env=env,
                cwd=project,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=90,
                check=False,
            )
            report["seconds"] = time.monotonic() - started
            report["exit"] = done.returncode
            report["stdout"], report["stderr"] = done.stdout[-4000:], done.stderr[-4000:]
            report["model_requests"] = [json.dumps(r.body) for r in api.agent_requests()]
            report["standin_errors"] = list(api.errors)
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(20)
        handler.close()
    report["files"] = sorted(p.name for p in project.iterdir())
    report["policy_calls"] = [b["detail"]["toolInput"] for b in handler.bodies("/policy")]
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
