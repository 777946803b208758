"""Offline runs of the real Claude Code whose Bash call waits for an operator's approval.

    python claude_approval_run.py --work DIR --claude BIN [--hold-s S]

For tests/agents/test_claude_code_approval.py. Run it inside a loopback-only network
namespace (harness.run_driver): it starts `tachograph serve` on SQLite in DIR/data with a
`TACHOGRAPH_APPROVALS` rule for the scripted Bash command, the Messages API stand-in
(anthropic_standin.py) and `claude -p`, all on 127.0.0.1 there. Two runs, each in its own
project and HOME with hooks from `tachograph hook install claude <project>` run against
serve (so it reads `longestHoldS` and writes the waits from it): `allowed` and `denied`
with native HTTP hooks (`--http`), `command_allowed` with command hooks. While Claude Code
waits on its PreToolUse hook, this driver plays the operator: it finds the request in
`GET /api/approvals?status=pending`, lets it wait S seconds, checks the command has not
run, then decides with the admin key (which only serve and the operator hold; Claude Code
has an agent token). A fourth run, `gave_up`, has command hooks whose client wait is cut
to GIVE_UP_S, as a hook installed before the rule grew would be: the client stops
waiting, Claude Code runs the call, and the operator's later deny is refused.
DIR/report.json gets, per run, what the operator saw and answered, the CLI's exit code
and output, what the stand-in received and which files the command made, and
`tachograph replay`'s verdict after all runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from tests.agents import anthropic_standin as standin  # noqa: E402
from tests.agents import harness  # noqa: E402
from tests.agents.claude_run import OFFLINE  # noqa: E402
from tests.support import Server, env_for  # noqa: E402

ADMIN_KEY = "claude-approval-admin-key-0123456789abcdef"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
PROMPT = "Mark the project as approved."
MARKER = "APPROVED.txt"
COMMAND = f"touch {MARKER}"
RULE_ID = "approve-marker"
# Far longer than the operator takes, so that only a decision can settle the call.
RULE = {"id": RULE_ID, "tool": "Bash", "match": r"^touch APPROVED\.txt$", "timeoutS": 120}
ALLOW_REASON = "claude-approval: marker reviewed"
DENY_REASON = "claude-approval: no marker on a frozen branch"
FINAL_TEXT = "Approval handled."
RUNS = {
    "allowed": ("allow", ALLOW_REASON),
    "denied": ("deny", DENY_REASON),
    "command_allowed": ("allow", ALLOW_REASON),
}
# How each run's hooks are installed: native HTTP, or the command hook.
HOOK_FLAGS = {"allowed": ("--http",), "denied": ("--http",), "command_allowed": ()}
GAVE_UP = "gave_up"
GIVE_UP_S = 3
GAVE_UP_REASON = "claude-approval: too late"


def responder(body: dict[str, Any]) -> standin.Reply:
    """The scripted model: the command that needs approval, then a final text."""
    if standin.conversation_turn(body) == 0:
        return standin.ToolUse("Bash", {"command": COMMAND, "description": "mark approved"})
    return standin.Text(FINAL_TEXT)


def wait_pending(
    api: httpx.Client, claude: subprocess.Popen[bytes], seconds: float = 90
) -> tuple[dict[str, Any] | None, float]:
    """The first pending approval, and when it was seen (None if Claude Code ended first)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and claude.poll() is None:
        items = api.get("/api/approvals", params={"status": "pending"}).json()["items"]
        if items:
            return items[0], time.monotonic()
        time.sleep(0.05)
    return None, time.monotonic()


def wait_ended(api: httpx.Client, native: str | None, seconds: float = 10) -> None:
    """Until the session's SessionEnd is stored, which may land after Claude Code exited."""
    deadline = time.monotonic() + seconds
    while native is not None and time.monotonic() < deadline:
        items = api.get("/api/sessions", params={"limit": 50}).json()["items"]
        if any(s.get("agentSessionId") == native and s.get("status") == "ended" for s in items):
            return
        time.sleep(0.1)


def session_id_of(stdout: str) -> str | None:
    try:
        result = json.loads(stdout)
    except ValueError:
        return None
    native = result.get("session_id") if isinstance(result, dict) else None
    return native if isinstance(native, str) else None


def run_claude(
    claude: str,
    work: Path,
    name: str,
    api: httpx.Client,
    model: standin.AnthropicStandIn,
    *,
    serve_url: str,
    token: str,
    hold_s: float,
) -> dict[str, Any]:
    verdict, reason = RUNS.get(name, ("deny", GAVE_UP_REASON))
    home, project = work / name / "home", work / name / "project"
    home.mkdir(parents=True)
    project.mkdir(parents=True)
    # Installed against serve with a reader key: the waits come from its longestHoldS.
    install_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TACHOGRAPH_API_KEY": ADMIN_KEY}
    flags = HOOK_FLAGS.get(name, ())
    harness.tachograph(
        "hook", "install", "claude", str(project), "--url", serve_url, *flags, env=install_env
    )
    settings_file = project / ".claude" / "settings.local.json"
    installed = json.loads(settings_file.read_text())
    if name == GAVE_UP:
        # A client wait shorter than the hold, as an install older than the rule left it.
        text = re.sub(
            r"TACHOGRAPH_HOOK_TIMEOUT_S=\d+",
            f"TACHOGRAPH_HOOK_TIMEOUT_S={GIVE_UP_S}",
            settings_file.read_text(),
        )
        settings_file.write_text(text)
    agent_env = claude_env(work / name, model, token)
    argv = [claude, "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash"]
    before = len(model.requests)
    out, err = work / name / "stdout", work / name / "stderr"
    started = time.monotonic()

    def operate(cli: subprocess.Popen[bytes]) -> dict[str, Any]:
        if name == GAVE_UP:
            return decide_too_late(api, cli, verdict, reason)
        return decide(api, cli, project, verdict, reason, hold_s)

    exit_code, operator = run_operated(argv, project, agent_env, work / name, operate)
    ended = time.monotonic()
    operator["cli_exit_after_decision_s"] = ended - operator.pop("decided_at", ended)
    operator["request_seen_after_start_s"] = operator.pop("seen_at", started) - started
    stdout_text = out.read_text(errors="replace")
    native = session_id_of(stdout_text)
    wait_ended(api, native)
    return {
        "exit": exit_code,
        "native_session": native,
        "seconds": ended - started,
        "stdout": stdout_text[-8000:],
        "stderr": err.read_text(errors="replace")[-4000:],
        "agent_env": sorted(agent_env),
        "operator": operator,
        "model_requests": [r.body for r in model.requests[before:] if isinstance(r.body, dict)],
        "model_paths": [f"{r.method} {r.path}" for r in model.requests[before:]],
        "files": harness.files_in(project),
        "settings": json.loads(settings_file.read_text()),
        "installed": installed,
    }


def claude_env(folder: Path, model: standin.AnthropicStandIn, token: str) -> dict[str, str]:
    """Claude Code's environment: its model stand-in, offline, and the agent token only."""
    return {
        **harness.agent_env(folder),
        "LANG": "C.UTF-8",
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-ant-standin-not-a-real-key",
        **OFFLINE,
        "TACHOGRAPH_AGENT_TOKEN": token,
    }


def run_operated(
    argv: list[str],
    project: Path,
    env: dict[str, str],
    folder: Path,
    operate: Callable[[subprocess.Popen[bytes]], dict[str, Any]],
) -> tuple[int, dict[str, Any]]:
    """Run the CLI (output to FOLDER/stdout and stderr) while `operate` plays the operator;
    the CLI's exit code and what the operator reported."""
    with (folder / "stdout").open("wb") as stdout, (folder / "stderr").open("wb") as stderr:
        cli = subprocess.Popen(
            argv, cwd=project, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr
        )
        try:
            operator = operate(cli)
            return cli.wait(120), operator
        finally:
            if cli.poll() is None:
                cli.kill()
                cli.wait(10)


def decide(
    api: httpx.Client,
    cli: subprocess.Popen[bytes],
    project: Path,
    verdict: str,
    reason: str,
    hold_s: float,
    marker: str = MARKER,
) -> dict[str, Any]:
    """The operator: find the held call, let it wait, look that `marker` was not made, decide."""
    request, seen_at = wait_pending(api, cli)
    if request is None:
        return {"request": None, "seen_at": seen_at}
    time.sleep(hold_s)
    still = api.get("/api/approvals", params={"status": "pending"}).json()["items"]
    waiting = {
        "cli_running": cli.poll() is None,
        "marker_made": (project / marker).exists(),
        "still_pending": [item["id"] for item in still],
        "seconds_left": next((i["secondsLeft"] for i in still if i["id"] == request["id"]), None),
    }
    body = {"decision": verdict, "reason": reason}
    answered = api.post(f"/api/approvals/{request['id']}/decide", json=body)
    decided_at = time.monotonic()
    return {
        "request": request,
        "seen_at": seen_at,
        "held_s": decided_at - seen_at,
        "before_decision": waiting,
        "decide_status": answered.status_code,
        "decided": answered.json(),
        "decided_at": decided_at,
    }


def decide_too_late(
    api: httpx.Client, cli: subprocess.Popen[bytes], verdict: str, reason: str
) -> dict[str, Any]:
    """The operator of a hook that gave up: the request is seen pending, Claude Code goes
    on and ends without a decision, and a deny afterwards is refused."""
    request, seen_at = wait_pending(api, cli)
    if request is None:
        return {"request": None, "seen_at": seen_at}
    cli.wait(120)
    row: dict[str, Any] = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        row = api.get(f"/api/approvals/{request['id']}").json()
        if row.get("status") != "pending":
            break
        time.sleep(0.1)
    answered = api.post(
        f"/api/approvals/{request['id']}/decide", json={"decision": verdict, "reason": reason}
    )
    decided_at = time.monotonic()
    return {
        "request": request,
        "seen_at": seen_at,
        "settled": row,
        "decide_status": answered.status_code,
        "decided": answered.json(),
        "decided_at": decided_at,
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    parser.add_argument("--hold-s", type=float, default=15, help="how long the operator waits")
    args = parser.parse_args()
    work: Path = args.work
    token = harness.agent_token(work, ADMIN_KEY)
    settings = harness.settings_of(work, ADMIN_KEY)
    rules = {"TACHOGRAPH_APPROVALS": json.dumps({"version": 1, "rules": [RULE]})}
    serve = Server(settings, work / "serve.log", rules)
    report: dict[str, Any] = {}
    try:
        serve.wait_ready(headers=ADMIN)
        # Straight to loopback, whatever proxy the caller's environment names.
        with (
            httpx.Client(base_url=serve.url, headers=ADMIN, timeout=30, trust_env=False) as api,
            standin.AnthropicStandIn(responder) as model,
        ):
            for name in [*RUNS, GAVE_UP]:
                report[name] = run_claude(
                    args.claude,
                    work,
                    name,
                    api,
                    model,
                    serve_url=serve.url,
                    token=token,
                    hold_s=args.hold_s,
                )
            report["approvals"] = api.get("/api/approvals").json()["items"]
            report["standin_errors"] = list(model.errors)
    finally:
        harness.stop_serve(serve)
    replayed = subprocess.run(
        [sys.executable, "-m", "cli.main", "replay"],
        env=env_for(settings),
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report["replay"] = {"exit": replayed.returncode, "stdout": replayed.stdout[-8000:]}
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
