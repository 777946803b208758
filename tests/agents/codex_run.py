"""One offline Codex run against a real `tachograph serve`, for tests/agents/test_codex.py.

    python codex_run.py --work DIR --codex BIN [--server-down | --serve-stops-at-escalation]

Run it inside a loopback-only network namespace (harness.run_driver): it starts the
managed handlers, `tachograph serve` on SQLite (unless --server-down), installs the hooks
with `tachograph hook install codex DIR/home` (`--fail-closed` with
--serve-stops-at-escalation), and runs the scripted Responses stand-in and the real
`codex exec` against them. Codex runs sandboxed with approvals on request, decided by its
own automatic reviewer (`--approve-for-me`, the stand-in answering for the reviewer too):
the setup in which it asks permission (fixtures' perm_allow). It writes DIR/report.json:
the CLI's exit code and time, what the stand-in received and which files the commands
made.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import harness  # noqa: E402
from tests.agents import openai_responses_standin as standin  # noqa: E402
from tests.agents.standin_server import Reply  # noqa: E402
from tests.hook_server import Behaviour  # noqa: E402
from tests.support import Server, free_port  # noqa: E402

PROMPT = "Tidy the project: run the checks, then add hello.txt."
# What the managed SessionStart and UserPromptSubmit handlers add to the model's context.
SESSION_CONTEXT = "tachograph-session-context-5c1e: builds run in the ci/ folder"
PROMPT_CONTEXT = "tachograph-prompt-context-93ab: the release branch is frozen"
DENIED_COMMAND = "echo pushed > DENIED.txt; git push --force origin main"
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN_COMMAND = "echo rewritten > REWRITTEN.txt"
DENY_REASON = "force-pushing is not allowed in this workspace"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
# Needs the sandbox lifted, so Codex asks permission (PermissionRequest) before it runs.
ESCALATED_COMMAND = "echo ran > ESCALATED.txt"
ESCALATION = {
    "cmd": ESCALATED_COMMAND,
    "sandbox_permissions": "require_escalated",
    "justification": "Need to write a marker file outside the sandbox",
}
# The automatic reviewer is a model request of its own, told to answer strict JSON.
REVIEWER_BRIEF = "You are judging one planned coding-agent action"
FINAL_TEXT = "Checks run and hello.txt added."
STOPPED_TEXT = "Stopped: the marker could not be written."

POLICY = harness.shell_policy(
    deny="push --force",
    reason=DENY_REASON,
    original=ORIGINAL_COMMAND,
    replacement={"command": REWRITTEN_COMMAND},
)


def is_review(body: dict[str, Any]) -> bool:
    return any(REVIEWER_BRIEF in text for text in standin.developer_texts(body))


def responder(body: dict[str, Any]) -> Reply:
    if is_review(body):
        return standin.Text('{"outcome": "allow"}')
    turn = standin.conversation_turn(body)
    if turn == 0:
        return standin.ToolUse("exec_command", {"cmd": DENIED_COMMAND})
    if turn == 1:
        return standin.ToolUse("exec_command", {"cmd": ORIGINAL_COMMAND})
    if turn == 2:
        return standin.ToolUse("apply_patch", PATCH)
    if turn == 3:
        return standin.ToolUse("exec_command", ESCALATION)
    return standin.Text(FINAL_TEXT)


def escalating_responder(body: dict[str, Any]) -> Reply:
    """The run in which Tachograph goes away: one escalated command, then the final text."""
    if is_review(body):
        return standin.Text('{"outcome": "allow"}')
    if standin.conversation_turn(body) == 0:
        return standin.ToolUse("exec_command", ESCALATION)
    return standin.Text(STOPPED_TEXT)


def stopping_at_escalation(serve: Server) -> Behaviour:
    """The policy, but the escalated command's PreToolUse stops `serve` before it is
    answered: once the listener is closed the PreToolUse is answered (and recorded), and
    the permission request that follows finds Tachograph gone."""

    def decide(body: dict[str, Any]) -> tuple[int, Any]:
        if harness.command_of(body) == ESCALATED_COMMAND:
            serve.signal(signal.SIGTERM)
            harness.wait_closed(serve.port)
        return POLICY(body)

    return decide


def codex_tmp(work: Path) -> Path:
    """A TMPDIR of the run's own for Codex.

    With a bubblewrap on PATH (the system's, which Tachograph's jail installs), Codex's
    sandbox starts its helper through a `codex-linux-sandbox` alias it writes into
    CODEX_HOME, and it refuses to write one below the temporary directory; the run's
    CODEX_HOME is below /tmp, so without this every sandboxed command fails with
    `execvp codex-linux-sandbox`. A real ~/.codex is never below TMPDIR.
    """
    tmp = work / "tmp"
    tmp.mkdir(exist_ok=True)
    return tmp


def codex_config(codex_home: Path, base_url: str) -> None:
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "gpt-5.5"\nmodel_provider = "standin"\ncheck_for_update_on_startup = false\n'
        "[analytics]\nenabled = false\n[feedback]\nenabled = false\n"
        '[model_providers.standin]\nname = "Stand-in"\n'
        f'base_url = "{base_url}"\nwire_api = "responses"\nenv_key = "STANDIN_API_KEY"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--codex", required=True)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--server-down", action="store_true")
    mode.add_argument("--serve-stops-at-escalation", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    home, project = work / "home", work / "project"
    project.mkdir(parents=True, exist_ok=True)
    contexts = {"SessionStart": SESSION_CONTEXT, "UserPromptSubmit": PROMPT_CONTEXT}
    managed = harness.ManagedHooks(POLICY, contexts=contexts)
    serve = None if args.server_down else harness.start_serve(work, managed)
    url = serve.url if serve else f"http://127.0.0.1:{free_port()}"
    if serve and args.serve_stops_at_escalation:
        managed.replace(harness.POLICY, stopping_at_escalation(serve))
    script = escalating_responder if args.serve_stops_at_escalation else responder
    try:
        fail_closed = ["--fail-closed"] if args.serve_stops_at_escalation else []
        harness.install_hooks("codex", home, url, *fail_closed)
        with standin.ResponsesStandIn(script) as api:
            codex_config(home / ".codex", api.base_url)
            env = harness.agent_env(
                work,
                CODEX_HOME=str(home / ".codex"),
                STANDIN_API_KEY="sk-standin",
                TMPDIR=str(codex_tmp(work)),
            )
            argv = [args.codex, "exec", "--skip-git-repo-check", "--approve-for-me"]
            argv += ["--dangerously-bypass-hook-trust", "-C", str(project), PROMPT]
            report = harness.run_agent(argv, env=env, cwd=project)
            time.sleep(0.5)  # the hooks of the session's end, delivered detached
            bodies = [r.body for r in api.agent_requests()]
            report["model_requests"] = [json.dumps(b) for b in bodies if not is_review(b)]
            report["reviews"] = [json.dumps(b) for b in bodies if is_review(b)]
            report["standin_errors"] = list(api.errors)
    finally:
        if serve is not None:
            harness.stop_serve(serve)
        managed.close()
    report["files"] = harness.files_in(project)
    report["policy_calls"] = managed.policy_inputs()
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
