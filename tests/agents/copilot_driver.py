"""Run the real Copilot CLI against a real `tachograph serve`, inside `unshare -n`.

    python copilot_driver.py --work WORK --copilot BIN

Run it inside a loopback-only network namespace (harness.run_driver): the scripted model
stand-in (openai_responses_standin.py) and the managed handlers in this process,
`tachograph serve` on SQLite in WORK/data, and Copilot CLI itself. Four runs share one
serve, one stand-in and one COPILOT_CACHE_HOME, each in WORK/<run>/: `command` (command
hooks by `tachograph hook install copilot <home>`), `http` (native HTTP hooks, `--http`),
`pascal` (no install: a user's own hook file registering the same hook client under
PascalCase event names, which give Claude-style payloads) and `down` (command hooks,
serve stopped). Each run's facts go to WORK/report.json for the test, which reads the
stored data afterwards.

The scripted model: a shell command the policy denies (`echo ran > MARKER_SHELL_RAN.txt`),
one it rewrites (`echo REWRITE_ME > original.txt` to `echo REWRITTEN > rewritten.txt`),
an apply_patch writing hello.txt, then a final text.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from cli.runtime_hooks import hook_command  # noqa: E402
from tests.agents import harness  # noqa: E402
from tests.agents import openai_responses_standin as standin  # noqa: E402
from tests.agents.standin_server import Reply  # noqa: E402

MARKER = "MARKER_SHELL_RAN.txt"
DENIED = f"echo ran > {MARKER}"
ORIGINAL = "echo REWRITE_ME > original.txt"
REWRITTEN = "echo REWRITTEN > rewritten.txt"
DENY_REASON = "copilot-e2e: the marker command is not allowed"
PROMPT = "Run two shell commands, then write hello.txt."
# What the managed SessionStart and UserPromptSubmit handlers add to the model's context.
SESSION_CONTEXT = "tachograph-session-context-a41c: builds run in the ci/ folder"
PROMPT_CONTEXT = "tachograph-prompt-context-6d02: the release branch is frozen"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
FINAL_TEXT = "All done: ran the shell commands and wrote hello.txt."
# Copilot's shell tool as each payload family names it: camelCase registrations report
# Copilot's own name, PascalCase ones Claude Code's (fixtures/copilot/pascal). Tachograph
# records the name as sent, so a policy for the shell has to match both.
SHELL_TOOLS = ("bash", "Bash")
# The events a user registers under PascalCase names: those the capture registered, as its
# files (`NN-<Event>.json`) name them.
PASCAL_CAPTURE = harness.REPO / "tests" / "fixtures" / "copilot" / "pascal"
PASCAL_EVENTS = tuple(
    dict.fromkeys(p.stem.split("-", 1)[1] for p in sorted(PASCAL_CAPTURE.glob("*.json")))
)
RUNS = ("command", "http", "pascal")
# Copilot CLI unpacks ~235 MB into its cache on first start: one cache beside the npm
# installs of scripts/agent-clis (git-ignored), kept across runs like them.
CACHE = os.environ.get("TACHOGRAPH_COPILOT_CACHE", str(harness.REPO / ".cache" / "copilot-cli"))

POLICY = harness.shell_policy(
    deny=DENIED,
    reason=DENY_REASON,
    original=ORIGINAL,
    replacement={"command": REWRITTEN, "description": "rewritten"},
)


def responder(body: dict[str, Any]) -> Reply:
    turn = standin.conversation_turn(body)
    if turn == 0:
        return standin.ToolUse("bash", {"command": DENIED, "description": "marker"})
    if turn == 1:
        return standin.ToolUse("bash", {"command": ORIGINAL, "description": "original"})
    if turn == 2:
        return standin.ToolUse("apply_patch", PATCH)
    return standin.Text(FINAL_TEXT)


def write_pascal_hooks(home: Path, url: str) -> Path:
    """A user's own hook file, registering the hook client command the installer writes
    under PascalCase event names instead of Copilot's camelCase ones."""
    hooks = {
        event: [
            {
                "type": "command",
                "bash": hook_command("copilot", event, url=url, fail_closed=False),
                "timeoutSec": 30,
            }
        ]
        for event in PASCAL_EVENTS
    }
    path = home / ".copilot" / "hooks" / "user-pascal.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "hooks": hooks}))
    return path


def run_copilot(
    copilot: str, api: standin.ResponsesStandIn, run: Path, url: str, name: str
) -> dict[str, Any]:
    home, project = run / "home", run / "project"
    project.mkdir(parents=True)
    if name == "pascal":
        hook_file = write_pascal_hooks(home, url)
    else:
        harness.install_hooks("copilot", home, url, *(["--http"] if name == "http" else []))
        hook_file = home / ".copilot" / "hooks" / "tachograph.json"
    env = harness.agent_env(
        run,
        CI="1",
        COPILOT_HOME=str(home / ".copilot"),
        COPILOT_OFFLINE="true",
        COPILOT_AUTO_UPDATE="false",
        COPILOT_HOOK_ALLOW_LOCALHOST="1",
        COPILOT_PROVIDER_BASE_URL=api.base_url,
        COPILOT_PROVIDER_TYPE="openai",
        COPILOT_PROVIDER_WIRE_API="responses",
        COPILOT_PROVIDER_API_KEY="sk-standin",
        COPILOT_MODEL="gpt-5.5",
        COPILOT_CACHE_HOME=CACHE,
    )
    argv = [copilot, "-p", PROMPT, "--allow-all-tools", "--no-auto-update"]
    argv += ["--disable-client-telemetry", "-C", str(project)]
    before = len(api.agent_requests())
    report = harness.run_agent(argv, env=env, cwd=project)
    report["model_requests"] = [json.dumps(r.body) for r in api.agent_requests()[before:]]
    resume = re.search(r"--resume=([0-9a-f-]{36})", report["stdout"] + report["stderr"])
    report["native_session"] = resume.group(1) if resume else None
    report["files"] = harness.files_in(project)
    rewritten = project / "rewritten.txt"
    report["rewritten"] = rewritten.read_text() if rewritten.exists() else None
    report["hook_file"] = json.loads(hook_file.read_text())
    return report


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--copilot", required=True)
    args = parser.parse_args()
    work: Path = args.work
    contexts = {"SessionStart": SESSION_CONTEXT, "UserPromptSubmit": PROMPT_CONTEXT}
    managed = harness.ManagedHooks(POLICY, matcher=SHELL_TOOLS, contexts=contexts)
    report: dict[str, Any] = {}
    with standin.ResponsesStandIn(responder) as api:
        serve = harness.start_serve(work, managed)
        try:
            for name in RUNS:
                report[name] = run_copilot(args.copilot, api, work / name, serve.url, name)
        finally:
            harness.stop_serve(serve)
        report["down"] = run_copilot(args.copilot, api, work / "down", serve.url, "down")
        report["standin_errors"] = list(api.errors)
    report["policy_calls"] = managed.policy_inputs()
    managed.close()
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
