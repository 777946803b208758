"""One offline Codex run against a real `tachograph serve`, for tests/agents/test_codex.py.

    python codex_run.py --work DIR --serve-port N [--server-down]

Run it inside a loopback-only network namespace (`unshare -n`, lo up): it starts a policy
handler, `tachograph serve` on SQLite (unless --server-down), the scripted Responses
stand-in and the real `codex exec`, all on 127.0.0.1 there. The hooks were installed
beforehand with `tachograph hook install codex DIR/home --url http://127.0.0.1:N`. It
writes DIR/report.json: the CLI's exit code and time, what the stand-in received and
which files the commands made. Standard library only.
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

import openai_responses_standin as standin  # noqa: E402
from hook_server import HookServer  # noqa: E402

PROMPT = "Tidy the project: run the checks, then add hello.txt."
DENIED_COMMAND = "echo pushed > DENIED.txt; git push --force origin main"
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN_COMMAND = "echo rewritten > REWRITTEN.txt"
DENY_REASON = "force-pushing is not allowed in this workspace"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
FINAL_TEXT = "Checks run and hello.txt added."


def policy(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed PreToolUse handler: deny a force push, rewrite the ORIGINAL command."""
    command = (body.get("detail", {}).get("toolInput") or {}).get("command", "")
    if "push --force" in command:
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": DENY_REASON}
    if command == ORIGINAL_COMMAND:
        replacement = {"command": REWRITTEN_COMMAND}
        return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": replacement}
    return 200, {"schemaVersion": 1, "outcome": "pass"}


def responder(body: dict[str, Any]) -> Any:
    turn = standin.conversation_turn(body)
    if turn == 0:
        return standin.ToolUse("exec_command", {"cmd": DENIED_COMMAND})
    if turn == 1:
        return standin.ToolUse("exec_command", {"cmd": ORIGINAL_COMMAND})
    if turn == 2:
        return standin.ToolUse("apply_patch", PATCH)
    return standin.Text(FINAL_TEXT)


def codex_config(home: Path, base_url: str) -> None:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "standin"\ncheck_for_update_on_startup = false\n'
        "[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
        '[model_providers.standin]\nname = "Stand-in"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )


def wait_for(url: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            urllib.request.urlopen(url, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--serve-port", type=int, required=True)
    parser.add_argument("--codex", required=True)
    parser.add_argument("--server-down", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    home, project = work / "home", work / "project"
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False)
    handler = HookServer()
    handler.routes["/policy"] = policy
    serve = None
    if not args.server_down:
        hooks = {
            "PreToolUse": [{"id": "shell-policy", "type": "http", "url": handler.url + "/policy"}]
        }
        env = {
            **os.environ,
            "TACHOGRAPH_DATA_DIR": str(work / "data"),
            "TACHOGRAPH_WORKSPACE_ROOT": str(work),
            "TACHOGRAPH_HOOKS": json.dumps({"version": 1, "hooks": hooks}),
            "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
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
    report: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    try:
        with standin.ResponsesStandIn(responder) as api:
            codex_config(home, api.base_url)
            env = {
                "PATH": os.environ["PATH"],
                "HOME": str(home),
                "CODEX_HOME": str(home / ".codex"),
                "STANDIN_API_KEY": "sk-standin",
                "TACHOGRAPH_DATA_DIR": str(work / "hook-client"),
                "NO_COLOR": "1",
            }
            argv = [
                args.codex,
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "--dangerously-bypass-hook-trust",
                "-C",
                str(project),
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
                timeout=120,
                check=False,
            )
            report["seconds"] = time.monotonic() - started
            report["exit"] = done.returncode
            report["stdout"], report["stderr"] = done.stdout[-4000:], done.stderr[-4000:]
            time.sleep(0.5)  # hooks of the session's end
            report["model_requests"] = [json.dumps(r.body) for r in api.agent_requests()]
            report["standin_errors"] = list(api.errors)
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGTERM)
            serve.wait(20)
        handler.close()
    report["files"] = sorted(p.name for p in project.iterdir())
    report["policy_calls"] = len(handler.bodies("/policy"))
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
