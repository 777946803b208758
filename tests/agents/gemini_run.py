"""One offline Gemini CLI run against a real `tachograph serve` (tests/agents/test_gemini_cli.py).

    python gemini_run.py --work DIR --gemini BIN [--server-down]

Run it inside a loopback-only network namespace (harness.run_driver): it issues an agent
token, starts the managed handlers, `tachograph serve` on SQLite in DIR/data (unless
--server-down), installs the hooks with `tachograph hook install gemini DIR/home` into the
user's settings.json (which turns Gemini CLI's environment redaction on), and runs the
scripted Gemini API stand-in and the real `gemini -p`. The agent token is the only
credential Gemini CLI's environment holds. It writes DIR/report.json: the CLI's exit code
and time, what the stand-in received, the policy handler's calls and which files the
commands made.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import gemini_standin as standin  # noqa: E402
from tests.agents import harness  # noqa: E402
from tests.agents.standin_server import Reply, Responder  # noqa: E402
from tests.support import env_for, free_port  # noqa: E402

PROMPT = "Tidy the project: run the checks, then add hello.txt."
# What the managed UserPromptSubmit (BeforeAgent) handler adds. (Not at SessionStart:
# Gemini CLI's `-p` glues that context onto the prompt itself, which BeforeAgent then
# reports as the prompt.)
PROMPT_CONTEXT = "tachograph-prompt-context-e27a: the release branch is frozen"
DENIED_COMMAND = "echo gone > DENIED.txt; rm -rf build"
ORIGINAL_COMMAND = "echo original > ORIGINAL.txt"
REWRITTEN = {"command": "echo rewritten > REWRITTEN.txt", "description": "rewritten by policy"}
DENY_REASON = "rm -rf is not allowed in this workspace"
FINAL_TEXT = "Checks run and hello.txt added."
ADMIN_KEY = "gemini-e2e-admin-key-0123456789"
USER_SETTINGS: dict[str, Any] = {
    "security": {
        "auth": {"selectedType": "gemini-api-key"},
        "environmentVariableRedaction": {"enabled": True},
    },
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}

# Gemini CLI builds the tool from a rewrite alone: the replacement is the complete input.
POLICY = harness.shell_policy(
    deny="rm -rf", reason=DENY_REASON, original=ORIGINAL_COMMAND, replacement=REWRITTEN
)


def responder(
    project: Path, turn_of: Callable[[dict[str, Any]], int] = standin.conversation_turn
) -> Responder:
    """The script: a denied command, a rewritten one, a file write, the final text. Qwen
    Code (a Gemini CLI fork, tests/agents/qwen_run.py) has the same tools: `turn_of` counts
    the tool results in its API's requests."""

    def reply(body: dict[str, Any]) -> Reply:
        turn = turn_of(body)
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--gemini", required=True)
    parser.add_argument("--server-down", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    home, project = work / "home", work / "project"
    project.mkdir(parents=True, exist_ok=True)
    settings_file = home / ".gemini" / "settings.json"
    settings_file.parent.mkdir(parents=True, exist_ok=True)
    settings_file.write_text(json.dumps(USER_SETTINGS))
    issue = ["keys", "issue", "--role", "agent", "--workspace", "default"]
    token = harness.tachograph(*issue, env=env_for(harness.settings_of(work, ADMIN_KEY)))
    managed = harness.ManagedHooks(
        POLICY, matcher=["run_shell_command"], contexts={"UserPromptSubmit": PROMPT_CONTEXT}
    )
    serve = None
    if not args.server_down:
        extra = {"TACHOGRAPH_SERVE_CPU": "all"}
        serve = harness.start_serve(work, managed, api_key=ADMIN_KEY, extra_env=extra)
    url = serve.url if serve else f"http://127.0.0.1:{free_port()}"
    try:
        harness.install_hooks("gemini", home, url)
        with standin.GeminiStandIn(responder(project)) as api:
            env = harness.agent_env(
                work,
                GOOGLE_GEMINI_BASE_URL=api.url,
                GEMINI_API_KEY="standin-key",
                # The hook's only credential; Gemini CLI redacts *TOKEN* names from hooks
                # (redaction is on in this settings.json) unless they are allow-listed.
                TACHOGRAPH_AGENT_TOKEN=token.strip(),
                CI="1",
            )
            argv = [args.gemini, "--skip-trust", "--approval-mode", "yolo"]
            argv += ["-m", "gemini-2.5-pro", "-p", PROMPT]
            report = harness.run_agent(argv, env=env, cwd=project, timeout=90)
            report["model_requests"] = [json.dumps(r.body) for r in api.agent_requests()]
            report["standin_errors"] = list(api.errors)
    finally:
        if serve is not None:
            harness.stop_serve(serve)
        managed.close()
    report["files"] = harness.files_in(project)
    report["policy_calls"] = managed.policy_inputs()
    report["serve_url"] = url
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
