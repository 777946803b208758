"""Offline runs of the real Claude Code against a real `tachograph serve`, for the tests.

    python claude_run.py --work DIR --claude BIN     (tests/agents/test_claude_code_hooks.py)

Run it inside a loopback-only network namespace (`unshare -n`, lo up): it starts a policy
handler, `tachograph serve` on SQLite in DIR/data, the scripted Messages API stand-in
(anthropic_standin.py) and `claude -p`, all on 127.0.0.1 there. Three runs share them, each
in its own project and HOME: `command` (hooks installed by `tachograph hook install claude
<project> --url U`), `http` (the same with `--http`) and `down` (command hooks, serve
stopped first). The agent's only Tachograph credential is an agent token issued by
`tachograph keys issue`; the admin key stays with serve. DIR/report.json gets, per run, the
CLI's exit code, time and output, what the stand-in received and which files the commands
made. Standard library only.
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

import anthropic_standin as standin  # noqa: E402
from hook_server import HookServer  # noqa: E402

SERVE_PORT = 18742  # inside the run's own network namespace: every port is free there
PROMPT = "Tidy the project: run the checks and show the environment."
DENIED_COMMAND = "echo denied > DENIED.txt"
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN = {"command": "echo rewritten > REWRITTEN.txt", "description": "rewritten by policy"}
ENV_COMMAND = "env"
DENY_REASON = "claude-e2e: writing DENIED.txt is not allowed here"
PROMPT_CONTEXT = "claude-e2e prompt context 7f3c1a: the release branch is frozen"
START_CONTEXT = "claude-e2e session context 2b9e4d: the staging database is read-only"
FINAL_TEXT = "Checks run; the environment is shown above."
ADMIN_KEY = "claude-e2e-admin-key-0123456789abcdef"
# The driver's own calls to serve go straight to loopback, whatever proxy the caller set.
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# What keeps Claude Code to its model API (see test_claude_code_self_update.py: found in
# the 2.1.328 binary and checked under strace).
OFFLINE = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
}


def responder(body: dict[str, Any]) -> standin.Reply:
    """The scripted model: a denied command, a rewritten one, `env`, then a final text."""
    steps: list[standin.Reply] = [
        standin.ToolUse("Bash", {"command": DENIED_COMMAND, "description": "mark denied"}),
        standin.ToolUse("Bash", {"command": ORIGINAL_COMMAND, "description": "run checks"}),
        standin.ToolUse("Bash", {"command": ENV_COMMAND, "description": "show environment"}),
        standin.Text(FINAL_TEXT),
    ]
    return steps[min(standin.conversation_turn(body), len(steps) - 1)]


def policy(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed PreToolUse handler: deny the DENIED command, rewrite the ORIGINAL one."""
    command = (body.get("detail", {}).get("toolInput") or {}).get("command", "")
    if command == DENIED_COMMAND:
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": DENY_REASON}
    if command == ORIGINAL_COMMAND:
        return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": REWRITTEN}
    return 200, {"schemaVersion": 1, "outcome": "pass"}


def context(text: str) -> Any:
    return lambda _: (200, {"schemaVersion": 1, "outcome": "pass", "additionalContext": text})


def managed_hooks(url: str) -> str:
    """TACHOGRAPH_HOOKS: the shell policy and two handlers that add context."""
    hooks = {
        "SessionStart": [{"id": "start-context", "type": "http", "url": url + "/start"}],
        "UserPromptSubmit": [{"id": "prompt-context", "type": "http", "url": url + "/prompt"}],
        "PreToolUse": [
            {"id": "shell-policy", "type": "http", "url": url + "/policy", "matcher": ["Bash"]}
        ],
    }
    return json.dumps({"version": 1, "hooks": hooks})


def tachograph(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"tachograph {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def wait_for(url: str, serve: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    request = urllib.request.Request(url, headers={"x-tachograph-key": ADMIN_KEY})
    while True:
        if serve.poll() is not None:
            raise SystemExit(f"serve exited early:\n{log.read_text()}")
        try:
            LOCAL.open(request, timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"serve not ready:\n{log.read_text()}") from None
            time.sleep(0.1)


def session_id_of(stdout: str) -> str | None:
    """The native session id `--output-format json` reports, if Claude Code got that far."""
    try:
        result = json.loads(stdout)
    except ValueError:
        return None
    native = result.get("session_id") if isinstance(result, dict) else None
    return native if isinstance(native, str) else None


def wait_ended(native: str | None, seconds: float = 10) -> None:
    """Wait for the session's SessionEnd: the command hook delivers it from a detached
    child after Claude Code has exited, so the run's end does not mean it has arrived."""
    url = f"http://127.0.0.1:{SERVE_PORT}/api/sessions?limit=50"
    request = urllib.request.Request(url, headers={"x-tachograph-key": ADMIN_KEY})
    deadline = time.monotonic() + seconds
    while native is not None and time.monotonic() < deadline:
        with LOCAL.open(request, timeout=5) as response:
            items = json.load(response)["items"]
        if any(s.get("agentSessionId") == native and s.get("status") == "ended" for s in items):
            return
        time.sleep(0.1)


def run_claude(
    claude: str,
    work: Path,
    name: str,
    api: standin.AnthropicStandIn,
    *,
    tool_env: dict[str, str],
    token: str,
    http: bool,
    down: bool = False,
    prompt: str = PROMPT,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    home, project = work / name / "home", work / name / "project"
    home.mkdir(parents=True)
    project.mkdir(parents=True)
    url = f"http://127.0.0.1:{SERVE_PORT}"
    install = ["hook", "install", "claude", str(project), "--url", url]
    tachograph(*install, *(["--http"] if http else []), env=tool_env)
    agent_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": api.url,
        "ANTHROPIC_API_KEY": "sk-ant-standin-not-a-real-key",
        **OFFLINE,
        # No TACHOGRAPH_URL: the installed entries must pin the server they reach. The
        # agent's one Tachograph credential is its narrow token, never the admin key.
        "TACHOGRAPH_AGENT_TOKEN": token,
        "TACHOGRAPH_HOOK_LOG": str(work / name / "hook-client" / "hooks.log"),
        **(extra_env or {}),
    }
    argv = [claude, "-p", prompt, "--output-format", "json", "--allowedTools", "Bash"]
    before = len(api.requests)
    started = time.monotonic()
    done = subprocess.run(
        argv,
        cwd=project,
        env=agent_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    seconds = time.monotonic() - started
    native = session_id_of(done.stdout)
    if not down:
        wait_ended(native)
    return {
        "exit": done.returncode,
        "native_session": native,
        "seconds": seconds,
        "stdout": done.stdout[-8000:],
        "stderr": done.stderr[-4000:],
        "agent_env": sorted(agent_env),
        "model_requests": [r.body for r in api.requests[before:] if isinstance(r.body, dict)],
        "model_paths": [f"{r.method} {r.path}" for r in api.requests[before:]],
        "files": sorted(p.name for p in project.iterdir()),
        "settings": json.loads((project / ".claude" / "settings.local.json").read_text()),
        "transcripts": sorted(p.stem for p in (home / ".claude" / "projects").rglob("*.jsonl")),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    args = parser.parse_args()
    work: Path = args.work
    (work / "workspace").mkdir(parents=True, exist_ok=True)
    handler = HookServer()
    handler.routes["/policy"] = policy
    handler.routes["/prompt"] = context(PROMPT_CONTEXT)
    handler.routes["/start"] = context(START_CONTEXT)
    tool_env = {
        "PATH": os.environ["PATH"],
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
        "TACHOGRAPH_API_KEY": ADMIN_KEY,
    }
    token = tachograph(
        "keys", "issue", "--role", "agent", "--workspace", "default", env=tool_env
    ).strip()
    serve_env = {
        **tool_env,
        "TACHOGRAPH_HOOKS": managed_hooks(handler.url),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        "TACHOGRAPH_SERVE_CPU": "all",
    }
    report: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    log = work / "serve.log"
    with standin.AnthropicStandIn(responder) as api:
        with log.open("ab") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(SERVE_PORT)],
                cwd=REPO,
                env=serve_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_for(f"http://127.0.0.1:{SERVE_PORT}/api/health", serve, log)
            for name, http in (("command", False), ("http", True)):
                report[name] = run_claude(
                    args.claude, work, name, api, tool_env=tool_env, token=token, http=http
                )
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
        report["down"] = run_claude(
            args.claude, work, "down", api, tool_env=tool_env, token=token, http=False, down=True
        )
        report["standin_errors"] = list(api.errors)
    handler.close()
    report["handler_calls"] = [(path, body) for path, body, _ in handler.requests]
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
