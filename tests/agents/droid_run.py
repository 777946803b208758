"""One offline Factory Droid run against a real `tachograph serve` (tests/agents/test_droid.py).

    python droid_run.py --work DIR --droid BIN [--server-down] [--fail-closed]

Run it inside a loopback-only network namespace (harness.run_driver): it starts the managed
handlers, `tachograph serve` on SQLite in DIR/data (unless --server-down), installs the
hooks with `tachograph hook install droid DIR/home` beside a BYOK custom model in the
user's settings.json, and runs the scripted Chat Completions stand-in and the real
`droid exec`. It writes DIR/report.json (harness.write_run_report).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import harness  # noqa: E402
from tests.agents import openai_chat_standin as standin  # noqa: E402
from tests.agents.gemini_run import DENY_REASON, FINAL_TEXT, ORIGINAL_COMMAND, PROMPT  # noqa: E402
from tests.agents.standin_server import Reply, Responder  # noqa: E402

SESSION_CONTEXT = "tachograph-session-context-2b9e: builds run in the ci/ folder"
DENIED_COMMAND = "echo gone > DENIED.txt; rm -rf build"
REWRITTEN = {"command": "echo rewritten > REWRITTEN.txt", "summary": "rewritten by policy"}
POLICY = harness.shell_policy(
    deny="rm -rf", reason=DENY_REASON, original=ORIGINAL_COMMAND, replacement=REWRITTEN
)


def responder(project: Path) -> Responder:
    """A denied command, a rewritten one, a file created, the final text: Droid's tools."""

    def reply(body: dict[str, Any]) -> Reply:
        turn = standin.conversation_turn(body)
        if turn == 0:
            return standin.ToolUse("Execute", {"command": DENIED_COMMAND, "summary": "clean"})
        if turn == 1:
            return standin.ToolUse("Execute", {"command": ORIGINAL_COMMAND, "summary": "checks"})
        if turn == 2:
            path = str(project / "hello.txt")
            return standin.ToolUse("Create", {"file_path": path, "content": "hello\n"})
        return standin.Text(FINAL_TEXT)

    return reply


def main() -> int:
    args, home, project = harness.driver_args("droid")
    work: Path = args.work
    managed = harness.ManagedHooks(
        POLICY, matcher=["Bash"], contexts={"SessionStart": SESSION_CONTEXT}
    )
    with (
        harness.serving(work, managed, down=args.server_down) as url,
        standin.ChatStandIn(responder(project)) as api,
    ):
        settings_file = home / ".factory" / "settings.json"
        settings_file.parent.mkdir(parents=True, exist_ok=True)
        model = {
            "model": "standin-model",
            "displayName": "Stand-in",
            "baseUrl": f"{api.url}/v1",
            "apiKey": "sk-standin",
            "provider": "generic-chat-completion-api",
            "maxOutputTokens": 4096,
        }
        settings_file.write_text(json.dumps({"customModels": [model]}))
        flags = ["--fail-closed"] if args.fail_closed else []
        harness.install_hooks("droid", home, url, *flags)
        env = harness.agent_env(work, TERM="dumb")
        argv = [args.droid, "exec", "--skip-permissions-unsafe", "-o", "stream-json"]
        argv += ["-m", "custom:standin-model", PROMPT]
        report = harness.run_against(api, argv, env=env, cwd=project)
    harness.write_run_report(work, report, managed, project, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
