"""One offline Qwen Code run against a real `tachograph serve` (tests/agents/test_qwen_code.py).

    python qwen_run.py --work DIR --qwen BIN [--server-down] [--fail-closed]

Run it inside a loopback-only network namespace (harness.run_driver): it starts the managed
handlers, `tachograph serve` on SQLite in DIR/data (unless --server-down), installs the
hooks with `tachograph hook install qwen DIR/home` into the user's settings.json, and runs
the scripted Chat Completions stand-in and the real `qwen` headless (Gemini CLI's script
and policy: Qwen Code has the same tools). It writes
DIR/report.json: the CLI's exit code and time, what the stand-in received, the policy
handler's calls and which files the commands made.
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
from tests.agents.gemini_run import POLICY, PROMPT, responder  # noqa: E402

SESSION_CONTEXT = "tachograph-session-context-7d21: builds run in the ci/ folder"
PROMPT_CONTEXT = "tachograph-prompt-context-4f08: the release branch is frozen"
USER_SETTINGS: dict[str, Any] = {
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "security": {"folderTrust": {"enabled": False}, "auth": {"selectedType": "openai"}},
    "model": {"name": "standin-model"},
    "tools": {"sandbox": False},
}


def main() -> int:
    args, home, project = harness.driver_args("qwen")
    work: Path = args.work
    settings_file = home / ".qwen" / "settings.json"
    settings_file.parent.mkdir(parents=True, exist_ok=True)
    settings_file.write_text(json.dumps(USER_SETTINGS))
    contexts = {"SessionStart": SESSION_CONTEXT, "UserPromptSubmit": PROMPT_CONTEXT}
    # Tachograph records the shell under Claude Code's name: the rule matches `Bash`.
    managed = harness.ManagedHooks(POLICY, matcher=["Bash"], contexts=contexts)
    with harness.serving(work, managed, down=args.server_down) as url:
        harness.install_hooks("qwen", home, url, *(["--fail-closed"] if args.fail_closed else []))
        with standin.ChatStandIn(responder(project, standin.conversation_turn)) as api:
            env = harness.agent_env(
                work,
                OPENAI_BASE_URL=f"{api.url}/v1",
                OPENAI_API_KEY="sk-standin",
                OPENAI_MODEL="standin-model",
                TERM="dumb",
            )
            argv = [args.qwen, "--auth-type", "openai", "--approval-mode", "yolo"]
            argv += ["--output-format", "stream-json", PROMPT]
            report = harness.run_against(api, argv, env=env, cwd=project)
    harness.write_run_report(work, report, managed, project, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
