"""Offline runs of the real Claude Code and Gemini CLI governed by a policy document.

    python policy_run.py --work DIR --claude BIN --gemini BIN [--hold-s S]

For tests/agents/test_policy_runtimes.py. Run it inside a loopback-only network namespace
(harness.run_driver): it starts `tachograph serve` on SQLite in DIR/data with no managed
handler at all (TACHOGRAPH_HOOKS unset), records and activates POLICY through the API
with the admin key, then runs, each in its own project and HOME with hooks from
`tachograph hook install` run against serve (so they outwait the `ask` rule's hold):
- `http` and `command`: `claude -p` (native HTTP hooks, command hooks) whose scripted
  model overwrites GUARDED.txt through `bash -c` (the deny rule), touches SHADOWED.txt
  (the shadow rule) and touches ASKED.txt (the ask rule). While Claude Code waits on the
  held call this driver plays the operator: it finds the pending approval, lets it wait
  S seconds, looks that ASKED.txt was not made, and allows it (`http`) or denies it with
  a reason (`command`);
- `gemini`: `gemini -p` whose model overwrites GUARDED.txt with its own `write_file`
  tool (the same deny rule, under another runtime's tool name) and touches SHADOWED.txt.
DIR/report.json gets, per run, what the operator saw and answered, the CLI's exit code
and output, what the stand-in received and the project's files with GUARDED.txt's text.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from tests.agents import anthropic_standin as claude_standin  # noqa: E402
from tests.agents import gemini_standin, harness  # noqa: E402
from tests.agents.claude_approval_run import (  # noqa: E402
    claude_env,
    decide,
    run_operated,
    session_id_of,
    wait_ended,
)
from tests.agents.gemini_run import USER_SETTINGS  # noqa: E402
from tests.support import Server  # noqa: E402

ADMIN_KEY = "policy-e2e-admin-key-0123456789abcdef"
ADMIN = {"x-tachograph-key": ADMIN_KEY}
PROMPT = "Refresh the guarded file, then mark the project."
GUARDED, SHADOWED, ASKED = "GUARDED.txt", "SHADOWED.txt", "ASKED.txt"
ORIGINAL = "original\n"
# The deny goes through `bash -c`: the rule reads the shell analysis, not the text.
OVERWRITE = f"bash -c 'echo overwritten > {GUARDED}'"
DENY_REASON = "policy-e2e 4f1d: GUARDED.txt is frozen by policy"
ASK_REASON = "policy-e2e 9c2a: an operator decides ASKED.txt"
OPERATOR_DENY = "policy-e2e: no marker on a frozen branch"
OPERATOR_ALLOW = "policy-e2e: marker reviewed"
FINAL_TEXT = "Guarded file handled and project marked."
POLICY = f"""\
version: 1
rules:
  - id: guarded-file
    when: paths.exists(p, p.endsWith("/{GUARDED}"))
    then: deny
    reason: "{DENY_REASON}"
  - id: shadow-marker
    when: command.commands.exists(c, c.program == "touch" && "{SHADOWED}" in c.args)
    then: deny
    mode: shadow
    reason: shadowed markers would be refused
  - id: operator-decides
    when: command.commands.exists(c, c.program == "touch" && "{ASKED}" in c.args)
    then: ask
    timeoutS: 120
    reason: "{ASK_REASON}"
"""
# Each Claude Code run: its hooks (native HTTP or command) and the operator's answer.
CLAUDE_RUNS = {
    "http": (("--http",), "allow", OPERATOR_ALLOW),
    "command": ((), "deny", OPERATOR_DENY),
}


def claude_responder(body: dict[str, Any]) -> claude_standin.Reply:
    steps: list[claude_standin.Reply] = [
        claude_standin.ToolUse("Bash", {"command": OVERWRITE, "description": "refresh"}),
        claude_standin.ToolUse("Bash", {"command": f"touch {SHADOWED}", "description": "mark"}),
        claude_standin.ToolUse("Bash", {"command": f"touch {ASKED}", "description": "mark"}),
        claude_standin.Text(FINAL_TEXT),
    ]
    return steps[min(claude_standin.conversation_turn(body), len(steps) - 1)]


def gemini_responder(project: Path) -> Any:
    def reply(body: dict[str, Any]) -> Any:
        turn = gemini_standin.conversation_turn(body)
        if turn == 0:
            path = str(project / GUARDED)
            return gemini_standin.ToolUse("write_file", {"file_path": path, "content": "gone\n"})
        if turn == 1:
            command = {"command": f"touch {SHADOWED}", "description": "mark"}
            return gemini_standin.ToolUse("run_shell_command", command)
        return gemini_standin.Text(FINAL_TEXT)

    return reply


def project_of(work: Path, name: str) -> tuple[Path, Path]:
    home, project = work / name / "home", work / name / "project"
    home.mkdir(parents=True)
    project.mkdir(parents=True)
    (project / GUARDED).write_text(ORIGINAL)
    return home, project


def files_of(project: Path) -> dict[str, Any]:
    return {"files": harness.files_in(project), "guarded": (project / GUARDED).read_text()}


def install(runtime: str, target: Path, url: str, *flags: str) -> None:
    """`hook install` with a key that reads serve's longestHoldS (the ask rule's hold)."""
    env = {"PATH": harness.agent_env(target)["PATH"], "TACHOGRAPH_API_KEY": ADMIN_KEY}
    harness.tachograph("hook", "install", runtime, str(target), "--url", url, *flags, env=env)


def run_claude(
    claude: str,
    work: Path,
    name: str,
    api: httpx.Client,
    model: claude_standin.AnthropicStandIn,
    *,
    token: str,
    hold_s: float,
) -> dict[str, Any]:
    flags, verdict, reason = CLAUDE_RUNS[name]
    home, project = project_of(work, name)
    install("claude", project, str(api.base_url), *flags)
    env = claude_env(work / name, model, token)
    argv = [claude, "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash"]
    before = len(model.requests)

    def operate(cli: subprocess.Popen[bytes]) -> dict[str, Any]:
        return decide(api, cli, project, verdict, reason, hold_s, marker=ASKED)

    exit_code, operator = run_operated(argv, project, env, work / name, operate)
    out, err = work / name / "stdout", work / name / "stderr"
    text = out.read_text(errors="replace")
    native = session_id_of(text)
    wait_ended(api, native)
    return {
        "exit": exit_code,
        "native_session": native,
        "stdout": text[-8000:],
        "stderr": err.read_text(errors="replace")[-4000:],
        "operator": operator,
        "model_requests": [r.body for r in model.requests[before:] if isinstance(r.body, dict)],
        "settings": json.loads((project / ".claude" / "settings.local.json").read_text()),
        **files_of(project),
    }


def run_gemini(gemini: str, work: Path, url: str, token: str) -> dict[str, Any]:
    home, project = project_of(work, "gemini")
    settings_file = home / ".gemini" / "settings.json"
    settings_file.parent.mkdir(parents=True)
    settings_file.write_text(json.dumps(USER_SETTINGS))
    install("gemini", home, url)
    with gemini_standin.GeminiStandIn(gemini_responder(project)) as model:
        env = harness.agent_env(
            work / "gemini",
            GOOGLE_GEMINI_BASE_URL=model.url,
            GEMINI_API_KEY="standin-key",
            TACHOGRAPH_AGENT_TOKEN=token,
            CI="1",
        )
        argv = [gemini, "--skip-trust", "--approval-mode", "yolo"]
        argv += ["-m", "gemini-2.5-pro", "-p", PROMPT]
        report = harness.run_against(model, argv, env=env, cwd=project)
    return {**report, **files_of(project)}


@contextmanager
def governed(work: Path, source: str) -> Iterator[tuple[httpx.Client, dict[str, Any]]]:
    """`tachograph serve` on SQLite in WORK/data with the admin key and no managed handler,
    the policy document `source` recorded and activated: an admin client of serve and the
    revision (with the activation's status). Serve is stopped afterwards."""
    settings = harness.settings_of(work, ADMIN_KEY)
    serve = Server(settings, work / "serve.log", {"TACHOGRAPH_SERVE_CPU": "all"})
    try:
        serve.wait_ready(headers=ADMIN)
        with httpx.Client(base_url=serve.url, headers=ADMIN, timeout=30, trust_env=False) as api:
            revision = api.post("/api/policy/revisions", json={"source": source}).json()
            activated = api.post(f"/api/policy/revisions/{revision['id']}/activate")
            yield api, {**revision, "activated": activated.status_code}
    finally:
        harness.stop_serve(serve)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    parser.add_argument("--gemini", required=True)
    parser.add_argument("--hold-s", type=float, default=12, help="how long the operator waits")
    args = parser.parse_args()
    work: Path = args.work
    token = harness.agent_token(work, ADMIN_KEY)
    report: dict[str, Any] = {}
    with governed(work, POLICY) as (api, report["revision"]):
        report["longest_hold_s"] = api.get("/api/health").json()["longestHoldS"]
        with claude_standin.AnthropicStandIn(claude_responder) as model:
            for name in CLAUDE_RUNS:
                report[name] = run_claude(
                    args.claude, work, name, api, model, token=token, hold_s=args.hold_s
                )
            report["claude_standin_errors"] = list(model.errors)
        report["gemini"] = run_gemini(args.gemini, work, str(api.base_url).rstrip("/"), token)
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
