"""One offline OpenCode (or Kilo) run against a real `tachograph serve`
(tests/agents/test_opencode.py).

    python opencode_run.py --work DIR --agent BIN --runtime opencode|kilo
        [--server-down] [--fail-closed]

Run it inside a loopback-only network namespace (harness.run_driver): it issues an agent
token, starts the managed handlers and `tachograph serve` on SQLite in DIR/data with one
approval rule and a learned fact for its agent (unless --server-down), writes the user's
own configuration (a provider for the Chat Completions stand-in) and installs
Tachograph's plugin with `tachograph hook install <runtime> DIR/home` beside it (no plugin
package seeded: the installer keeps the CLI from installing one), then runs the real
CLI's `run`. While it runs, an operator thread waits for the held call, checks that it
has not run, and allows it. It writes DIR/report.json (harness.write_run_report, and what
the operator saw).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.agents import harness  # noqa: E402
from tests.agents import openai_chat_standin as standin  # noqa: E402
from tests.agents.gemini_run import DENY_REASON, FINAL_TEXT, ORIGINAL_COMMAND, PROMPT  # noqa: E402
from tests.agents.standin_server import Reply, Responder  # noqa: E402
from tests.hook_server import Behaviour  # noqa: E402
from tests.support import env_for, free_port  # noqa: E402

ADMIN_KEY = "opencode-e2e-admin-key-0123456789abcdef"
SESSION_CONTEXT = "tachograph-session-context-5c1d: builds run in the ci/ folder"
PROMPT_CONTEXT = "tachograph-prompt-context-91ae: the release branch is frozen"
KEPT_FILE = "KEEP.txt"
KEPT_TEXT = "the user's own notes\n"
REWRITTEN = {"command": "echo rewritten > REWRITTEN.txt", "description": "rewritten by policy"}
HELD_COMMAND = "echo approved > APPROVED.txt"
APPROVALS = {
    "version": 1,
    "rules": [{"id": "approved-marker", "tool": "Bash", "match": "APPROVED", "timeoutS": 120}],
}
ALLOW_REASON = "opencode-approval: marker reviewed"
# A learned fact an operator set for the runtime's agent: delivered with its context.
LESSON = "tachograph-lesson-3e7f: run the linters before committing"
# OpenCode's own switches that would reach the network at start-up.
OFFLINE_SWITCHES = ("DISABLE_MODELS_FETCH", "DISABLE_AUTOUPDATE", "DISABLE_LSP_DOWNLOAD")


def policy(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed PreToolUse handler: no overwriting KEEP.txt, the checks rewritten."""
    tool_input = body.get("detail", {}).get("toolInput") or {}
    if str(tool_input.get("file_path", "")).endswith(KEPT_FILE):
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": DENY_REASON}
    if tool_input.get("command") == ORIGINAL_COMMAND:
        return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": REWRITTEN}
    return 200, {"schemaVersion": 1, "outcome": "pass"}


def responder(project: Path) -> Responder:
    """Overwrite KEEP.txt (denied), the checks (rewritten), the held command, a new file,
    the final text: OpenCode's own tools and fields."""
    steps: list[Reply] = [
        standin.ToolUse("write", {"filePath": str(project / KEPT_FILE), "content": "gone\n"}),
        standin.ToolUse("bash", {"command": ORIGINAL_COMMAND, "description": "checks"}),
        standin.ToolUse("bash", {"command": HELD_COMMAND, "description": "mark approved"}),
        standin.ToolUse("write", {"filePath": str(project / "hello.txt"), "content": "hello\n"}),
        standin.Text(FINAL_TEXT),
    ]

    def reply(body: dict[str, Any]) -> Reply:
        return steps[min(standin.conversation_turn(body), len(steps) - 1)]

    return reply


class Operator:
    """Waits for the held call, checks its command has not run, then allows it."""

    def __init__(self, url: str, project: Path) -> None:
        self.url, self.project = url, project
        self.seen: dict[str, Any] = {}
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        headers = {"x-tachograph-key": ADMIN_KEY}
        with httpx.Client(base_url=self.url, headers=headers, timeout=30) as api:
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                items = api.get("/api/approvals", params={"status": "pending"}).json()["items"]
                if items:
                    break
                time.sleep(0.1)
            else:
                return
            time.sleep(2)  # the call must still be waiting, its command not run
            self.seen["ran_before_decision"] = (self.project / "APPROVED.txt").exists()
            body = {"decision": "allow", "reason": ALLOW_REASON}
            decided = api.post(f"/api/approvals/{items[0]['id']}/decide", json=body)
            self.seen["decided"] = decided.status_code


def write_user_config(home: Path, runtime: str, api_url: str) -> dict[str, Any]:
    """The user's own configuration: the stand-in as an OpenAI-compatible provider."""
    config = {
        "autoupdate": False,
        "share": "disabled",
        "model": "standin/standin-model",
        "small_model": "standin/standin-model",
        "permission": {"edit": "allow", "bash": "allow"},
        "provider": {
            "standin": {
                "npm": "@ai-sdk/openai-compatible",  # bundled: nothing to download
                "name": "Stand-in",
                "options": {"baseURL": f"{api_url}/v1", "apiKey": "sk-standin"},
                "models": {
                    "standin-model": {
                        "name": "Stand-in",
                        "tool_call": True,
                        "limit": {"context": 128000, "output": 4096},
                    }
                },
            }
        },
    }
    path = home / ".config" / runtime / f"{runtime}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))
    return config


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--agent", required=True)
    parser.add_argument("--runtime", choices=["opencode", "kilo"], required=True)
    parser.add_argument("--server-down", action="store_true")
    parser.add_argument("--fail-closed", action="store_true")
    args = parser.parse_args()
    work: Path = args.work
    home, project = work / "home", work / "project"
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / KEPT_FILE).write_text(KEPT_TEXT)
    issue = ["keys", "issue", "--role", "agent", "--workspace", "default"]
    token = harness.tachograph(*issue, env=env_for(harness.settings_of(work, ADMIN_KEY)))
    contexts = {"SessionStart": SESSION_CONTEXT, "UserPromptSubmit": PROMPT_CONTEXT}
    behaviour: Behaviour = policy
    managed = harness.ManagedHooks(behaviour, matcher=["Bash", "Write"], contexts=contexts)
    serve = None
    if not args.server_down:
        extra = {"TACHOGRAPH_APPROVALS": json.dumps(APPROVALS)}
        serve = harness.start_serve(work, managed, api_key=ADMIN_KEY, extra_env=extra)
    url = serve.url if serve else f"http://127.0.0.1:{free_port()}"
    operator = Operator(url, project) if serve else None
    if serve is not None:
        with httpx.Client(base_url=url, headers={"x-tachograph-key": ADMIN_KEY}) as api:
            edit = f"/api/autonomy/targets/fact/{args.runtime}/linters"
            api.put(edit, json={"content": LESSON}).raise_for_status()
    try:
        with standin.ChatStandIn(responder(project)) as api:
            config = write_user_config(home, args.runtime, api.url)
            flags = ["--fail-closed"] if args.fail_closed else []
            # The installer asks serve for its longest hold, as an operator's reader key.
            env = {"PATH": "/usr/bin:/bin", "TACHOGRAPH_API_KEY": ADMIN_KEY}
            harness.tachograph(
                "hook", "install", args.runtime, str(home), "--url", url, *flags, env=env
            )
            prefix = args.runtime.upper()
            switches = {f"{prefix}_{name}": "1" for name in OFFLINE_SWITCHES}
            env = harness.agent_env(
                work, TERM="dumb", TACHOGRAPH_AGENT_TOKEN=token.strip(), **switches
            )
            argv = [args.agent, "run", "--format", "json", "--print-logs", PROMPT]
            stderr = work / "cli-stderr.log"
            report = harness.run_against(api, argv, env=env, cwd=project, stderr_file=stderr)
            # What the CLI logs when it installs its plugin SDK before loading plugins.
            report["sdk_install_tried"] = "dependency install" in stderr.read_text()
    finally:
        if serve is not None:
            harness.stop_serve(serve)
        managed.close()
    if operator is not None:
        operator.thread.join(5)
        report["operator"] = operator.seen
    config_file = home / ".config" / args.runtime / f"{args.runtime}.json"
    # The CLI itself adds `$schema` to it.
    kept = {k: v for k, v in json.loads(config_file.read_text()).items() if k != "$schema"}
    report["user_config_kept"] = kept == config
    report["kept_text"] = (project / KEPT_FILE).read_text()
    report["stderr"] = report["stderr"][-4000:]
    harness.write_run_report(work, report, managed, project, url)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
