"""One offline Cline run against a real `tachograph serve` (tests/agents/test_cline.py).

    python cline_run.py --work DIR --cline BIN [--server-down] [--fail-closed] [--held]

Run it inside a loopback-only network namespace (harness.run_driver): it starts the managed
handlers, `tachograph serve` on SQLite in DIR/data (unless --server-down), installs the
hooks with `tachograph hook install cline DIR/home` beside a hook file of the user's own,
points Cline at the scripted Chat Completions stand-in (`cline auth`) and runs `cline
--json` once. The script: a shell call the policy rewrites, a file write, then a shell
call the policy denies (which aborts Cline's run), then the final text. With --held the
script is one shell call an approval rule holds until the driver, as the operator,
allows it. It writes DIR/report.json.

Cline leaves a detached `--cline-hub-daemon` behind after every run: `stop_hub_daemons`
ends those of this run's HOME, here and in the test (should the driver fail).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from tests.agents import harness  # noqa: E402
from tests.agents import openai_chat_standin as standin  # noqa: E402
from tests.agents.standin_server import Reply, Responder  # noqa: E402

PROMPT = "Tidy the project: run the checks, add hello.txt, then clean the build."
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN_COMMAND = "echo rewritten > REWRITTEN.txt"
DENIED_COMMAND = "echo gone > hello.txt; rm -rf build"
DENY_REASON = "rm -rf is not allowed in this workspace"
HELD_COMMAND = "echo held > HELD.txt"
FINAL_TEXT = "Checks run and hello.txt added."
TOOL_CONTEXT = "tachograph-tool-context-5b3e: builds run in the ci/ folder"
USER_HOOK = "#!/bin/sh\necho user-hook >> \"$HOME/user-hook.log\"\necho '{}'\n"
OPERATOR_WAIT_S = 2.0
APPROVALS = {
    "version": 1,
    "rules": [{"id": "held-echo", "tool": "Bash", "match": "^echo held", "timeoutS": 60}],
}
# Cline's tools take a complete input: the rewrite names the command in Claude Code's
# shape, the one the policy is shown; the adapter hands Cline `{"commands": [...]}`.
POLICY = harness.shell_policy(
    deny="rm -rf",
    reason=DENY_REASON,
    original=ORIGINAL_COMMAND,
    replacement={"command": REWRITTEN_COMMAND},
)


def responder(project: Path, *, held: bool) -> Responder:
    def reply(body: dict[str, Any]) -> Reply:
        turn = standin.conversation_turn(body)
        if held:
            if turn == 0:
                return standin.ToolUse("run_commands", {"commands": [HELD_COMMAND]})
            return standin.Text(FINAL_TEXT)
        if turn == 0:
            return standin.ToolUse("run_commands", {"commands": [ORIGINAL_COMMAND]})
        if turn == 1:
            path = str(project / "hello.txt")
            return standin.ToolUse("editor", {"path": path, "new_text": "hello\n"})
        if turn == 2:
            return standin.ToolUse("run_commands", {"commands": [DENIED_COMMAND]})
        return standin.Text(FINAL_TEXT)

    return reply


def stop_hub_daemons(home: Path) -> list[int]:
    """Kill the `--cline-hub-daemon` processes Cline started with this HOME; their pids."""
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if b"--cline-hub-daemon" not in argv:
                continue
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"HOME={home}".encode() in environ:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
            except ProcessLookupError:
                pass
    return killed


def operator(url: str, decisions: list[dict[str, Any]]) -> threading.Thread:
    """Allow the first held call after OPERATOR_WAIT_S, noting when it was seen and decided."""

    def run() -> None:
        with httpx.Client(base_url=url, timeout=10) as client:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                items = client.get("/api/approvals", params={"status": "pending"}).json()["items"]
                if items:
                    seen = time.monotonic()
                    time.sleep(OPERATOR_WAIT_S)
                    done = client.post(
                        f"/api/approvals/{items[0]['id']}/decide", json={"decision": "allow"}
                    )
                    decisions.append(
                        {"status": done.status_code, "waitedS": time.monotonic() - seen}
                    )
                    return
                time.sleep(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def main() -> int:
    held = "--held" in sys.argv
    if held:
        sys.argv.remove("--held")
    args, home, project = harness.driver_args("cline")
    work: Path = args.work
    user_hooks = home / ".cline" / "hooks"
    user_hooks.mkdir(parents=True, exist_ok=True)
    (user_hooks / "PreToolUse").write_text(USER_HOOK)  # the user's own: kept, and still run
    (user_hooks / "PreToolUse").chmod(0o755)
    managed = harness.ManagedHooks(POLICY, matcher=["Bash"], contexts={"PostToolUse": TOOL_CONTEXT})
    extra = {"TACHOGRAPH_APPROVALS": json.dumps(APPROVALS)} if held else {}
    decisions: list[dict[str, Any]] = []
    try:
        with harness.serving(work, managed, down=args.server_down, extra_env=extra) as url:
            harness.install_hooks(
                "cline", home, url, *(["--fail-closed"] if args.fail_closed else [])
            )
            waiter = operator(url, decisions) if held else None
            with standin.ChatStandIn(responder(project, held=held)) as api:
                env = harness.agent_env(work, TERM="dumb")
                auth = [args.cline, "auth", "-p", "openai-compatible", "-k", "sk-standin"]
                auth += ["-m", "standin-model", "-b", f"{api.url}/v1"]
                configured = harness.run_agent(auth, env=env, cwd=project, timeout=60)
                argv = [args.cline, "--json", "-P", "openai-compatible", "-m", "standin-model"]
                report = harness.run_against(api, [*argv, PROMPT], env=env, cwd=project)
                report["auth_exit"] = configured["exit"]
            if waiter is not None:
                waiter.join(10)
            if not args.server_down:
                # Cline runs its end-of-task hooks detached: let them reach serve.
                harness.wait_for_any_event(url, ("Stop", "SessionEnd"), seconds=15)
    finally:
        report_daemons = stop_hub_daemons(home)
    report["hub_daemons_stopped"] = len(report_daemons)
    report["decisions"] = decisions
    report["hello"] = (
        (project / "hello.txt").read_text() if (project / "hello.txt").exists() else None
    )
    report["user_hook_runs"] = (
        len((home / "user-hook.log").read_text().splitlines())
        if (home / "user-hook.log").exists()
        else 0
    )
    harness.write_run_report(work, report, managed, project, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
