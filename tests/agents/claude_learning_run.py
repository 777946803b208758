"""The learning loop with the real Claude Code, offline: learn, deliver, revert.

    python claude_learning_run.py --work DIR --claude BIN   (test_claude_code_learning.py)

Run it inside a loopback-only network namespace (`unshare -n`, lo up), like claude_run.py:
`tachograph serve` on SQLite in DIR/data with evolution on, the scripted Messages API
stand-in and `claude -p` with hooks from `tachograph hook install claude`, three times:

1. `learn`: the model runs two shell commands that fail; the turn ends. Serve derives a
   failure signal from the turn, and reflection (the built-in rules reflector) makes an
   overlay lesson of it. The driver waits for that revision.
2. `taught`: a turn that needs no tool. The lesson should reach the model.
3. `after`: the driver reverts the lesson's revision first; the same turn again.

DIR/report.json gets, per run, the exit code, native session id and the model requests;
plus the learned revision, its deliveries as the API lists them before and after the
revert, and the revert's answer. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

import anthropic_standin as standin  # noqa: E402
import claude_run  # noqa: E402
from claude_run import ADMIN_KEY, LOCAL, SERVE_PORT, tachograph  # noqa: E402

URL = f"http://127.0.0.1:{SERVE_PORT}"
FAILING = [
    "echo 'learning-e2e: the fixture database is missing' >&2; exit 3",
    "echo 'learning-e2e: the fixture database is missing' >&2; exit 3",
]
LEARN_PROMPT = "Run the integration checks."
TAUGHT_PROMPT = "Say what you would check first."
FINAL_TEXT = "Done."


def api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        URL + path,
        data=data,
        method=method,
        headers={"x-tachograph-key": ADMIN_KEY, "content-type": "application/json"},
    )
    try:
        with LOCAL.open(request, timeout=10) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def responder(phase: dict[str, str]) -> standin.Responder:
    def reply(body: dict[str, Any]) -> standin.Reply:
        if phase["name"] == "learn":
            step = standin.conversation_turn(body)
            if step < len(FAILING):
                return standin.ToolUse("Bash", {"command": FAILING[step], "description": "check"})
        return standin.Text(FINAL_TEXT)

    return reply


def run(claude: str, work: Path, name: str, prompt: str, model: Any, token: str) -> dict[str, Any]:
    """One `claude -p` run with hooks from `tachograph hook install claude` (command mode)."""
    env = tool_environment(work)
    ran: dict[str, Any] = claude_run.run_claude(
        claude, work, name, model, tool_env=env, token=token, http=False, prompt=prompt
    )
    return ran


def tool_environment(work: Path) -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspace"),
        "TACHOGRAPH_API_KEY": ADMIN_KEY,
    }


def wait_for_lesson(seconds: float = 60) -> dict[str, Any] | None:
    """The first overlay revision reflection makes of the failed turn."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        status, body = api("GET", "/api/autonomy/revisions?targetKind=overlay")
        if status == 200 and body["items"]:
            return dict(body["items"][-1])
        time.sleep(0.2)
    return None


def deliveries(revision_id: str) -> Any:
    return api("GET", f"/api/autonomy/revisions/{revision_id}/deliveries")[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    args = parser.parse_args()
    work: Path = args.work
    (work / "workspace").mkdir(parents=True, exist_ok=True)
    tool_env = tool_environment(work)
    token = tachograph(
        "keys", "issue", "--role", "agent", "--workspace", "default", env=tool_env
    ).strip()
    serve_env = {
        **tool_env,
        "TACHOGRAPH_REFLECTION_INTERVAL_S": "0.2",
        "TACHOGRAPH_SERVE_CPU": "all",
    }
    report: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    phase = {"name": "learn"}
    log = work / "serve.log"
    with standin.AnthropicStandIn(responder(phase)) as model:
        with log.open("ab") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(SERVE_PORT)],
                cwd=claude_run.REPO,
                env=serve_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            claude_run.wait_for(URL + "/api/health", serve, log)
            report["evolution"] = api("PATCH", "/api/settings/autonomy", {"evolution": True})
            report["learn"] = run(args.claude, work, "learn", LEARN_PROMPT, model, token)
            lesson = wait_for_lesson()
            report["lesson"] = lesson
            if lesson is not None:
                report["lesson_signal"] = api(
                    "GET", f"/api/autonomy/signals/{lesson.get('signalId')}"
                )
                phase["name"] = "taught"
                report["taught"] = run(args.claude, work, "taught", TAUGHT_PROMPT, model, token)
                report["deliveries_taught"] = deliveries(lesson["id"])
                report["revert"] = api("POST", f"/api/autonomy/revisions/{lesson['id']}/revert", {})
                phase["name"] = "after"
                report["after"] = run(args.claude, work, "after", TAUGHT_PROMPT, model, token)
                report["deliveries_after"] = deliveries(lesson["id"])
                report["signals"] = api("GET", "/api/autonomy/signals")[1]
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(30)
        report["standin_errors"] = list(model.errors)
    (work / "report.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
