"""An offline run of the real Claude Code stopped by a budget rule once the spend it
reported through OpenTelemetry crosses the limit.

    python budget_run.py --work DIR --claude BIN

For tests/agents/test_claude_code_budget.py. Run it inside a loopback-only network
namespace (harness.run_driver): it starts `tachograph serve` on SQLite in DIR/data with no
managed handler, records and activates BUDGET (deny every tool call once the workspace
spent more than LIMIT_USD today) with the admin key, and runs `claude -p` once with native
HTTP hooks and its telemetry exported to serve (logs every 200 ms). The scripted model
makes two Bash calls (touch SPENT_FIRST, then touch SPENT_AFTER) and a final text. Its
first response reports usage Claude Code prices above the limit, and its end (after
which Claude Code reports the cost) is held until the first call ran: Claude Code runs
a streamed tool call once its block is complete, so that call's hook is decided before
any spend exists. Before answering the request that carries the first call's result,
the stand-in waits until serve's usage shows the workspace past the limit, and then for
the budget figures' follower (one refresh interval) to have read it too: the second
call's hook meets the figures, whatever the export's timing. DIR/report.json gets the
CLI's exit and output, what the stand-in received and reported, how long it waited, the
project's files and the session as serve shows it.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

# Run as a script (inside the namespace), the repository is not on the path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from domain.lifecycle import agent_session_uuid  # noqa: E402
from services.usage_figures import REFRESH_INTERVAL_S  # noqa: E402
from tests.agents import anthropic_standin as standin  # noqa: E402
from tests.agents import harness  # noqa: E402
from tests.agents.claude_approval_run import session_id_of  # noqa: E402
from tests.agents.policy_run import ADMIN, ADMIN_KEY, governed, install  # noqa: E402
from tests.agents.usage_run import claude_env  # noqa: E402

PROMPT = "Mark the project twice, then say done."
SPENT_FIRST, SPENT_AFTER = "SPENT_FIRST.txt", "SPENT_AFTER.txt"
FINAL_TEXT = "Marking stopped by the budget."
LIMIT_USD = 0.05
REASON = "budget-e2e 7b3e: this workspace spent its budget for today"
BUDGET = f"""\
version: 1
rules:
  - id: workspace-budget
    when: usage.workspace.today.costUsd > {LIMIT_USD}
    then: deny
    reason: "{REASON}"
"""
# Priced by Claude Code at well over LIMIT_USD whatever its table's rate for the model
# (60k input tokens are $0.06 even at $1 per million); later responses cost fractions
# of a cent.
FIRST_USAGE = {"input_tokens": 60_000, "output_tokens": 2_000}
LATER_USAGE = {"input_tokens": 100, "output_tokens": 10}
WAIT_S = 20


def usage_for(n: int) -> dict[str, int]:
    return {
        **(FIRST_USAGE if n == 0 else LATER_USAGE),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def workspace_spend(api: httpx.Client) -> float:
    """The default workspace's cost as serve's usage read model shows it."""
    items = api.get("/api/usage", params={"groupBy": "workspace"}).json()["items"]
    return sum(float(i["costUsd"]) for i in items if i["key"] == "default")


class Budgeted:
    """The scripted model: touch SPENT_FIRST, touch SPENT_AFTER (once the spend is over
    the limit for the budget figures too), then the final text."""

    def __init__(self, url: str, project: Path) -> None:
        self.url = url
        self.project = project
        self.waited: dict[str, Any] = {}
        self.first_ran_mid_stream: bool | None = None

    def before_message_end(self, n: int) -> None:
        """Hold the first response's end (and so Claude Code's report of its cost) until
        its tool call ran: that call's hook is decided before any spend exists."""
        if n == 0:
            deadline = time.monotonic() + WAIT_S
            while not (self.project / SPENT_FIRST).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            self.first_ran_mid_stream = (self.project / SPENT_FIRST).exists()

    def __call__(self, body: dict[str, Any]) -> standin.Reply:
        turn = standin.conversation_turn(body)
        if turn == 0:
            return standin.ToolUse(
                "Bash", {"command": f"touch {SPENT_FIRST}", "description": "mark"}
            )
        if turn == 1:
            if not self.waited:
                self.waited = self.wait_over_limit()
            return standin.ToolUse(
                "Bash", {"command": f"touch {SPENT_AFTER}", "description": "mark"}
            )
        return standin.Text(FINAL_TEXT)

    def wait_over_limit(self) -> dict[str, Any]:
        started = time.monotonic()
        spend = 0.0
        with httpx.Client(base_url=self.url, headers=ADMIN, timeout=5, trust_env=False) as api:
            while time.monotonic() - started < WAIT_S:
                spend = workspace_spend(api)
                if spend > LIMIT_USD:
                    break
                time.sleep(0.05)
        seen_s = time.monotonic() - started
        # The figures' follower reads the read model every REFRESH_INTERVAL_S: one more
        # interval (and a margin) and the hook on the next call sees what was just seen.
        time.sleep(REFRESH_INTERVAL_S + 0.5)
        return {"spend": spend, "seen_after_s": seen_s}


def session_once_counted(api: httpx.Client, session_id: str, requests: int) -> Any:
    """The session once all `requests` are on it: Claude Code exports the last at exit."""
    deadline = time.monotonic() + WAIT_S
    while True:
        session = api.get(f"/api/sessions/{session_id}").json()
        if session["usage"]["requests"] >= requests or time.monotonic() > deadline:
            return session
        time.sleep(0.1)


def run(claude: str, work: Path, project: Path, api: httpx.Client, token: str) -> dict[str, Any]:
    url = str(api.base_url).rstrip("/")
    install("claude", project, url, "--http")
    model = Budgeted(url, project)
    with standin.AnthropicStandIn(
        model, usage_for=usage_for, before_message_end=model.before_message_end
    ) as stand_in:
        env = claude_env(work, stand_in.url, url, token, "http/json")
        argv = [claude, "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash"]
        report = harness.run_against(stand_in, argv, env=env, cwd=project)
        report["standin_usage"] = list(stand_in.reported)
    native = session_id_of(report["stdout"])
    report |= {
        "native_session": native,
        "first_ran_mid_stream": model.first_ran_mid_stream,
        "waited": model.waited,
        "files": harness.files_in(project),
    }
    if native:
        session_id = str(agent_session_uuid(f"claude-code:{native}"))
        report["session_id"] = session_id
        report["session"] = session_once_counted(api, session_id, len(stand_in.reported))
    return report


def main() -> int:
    args, _, project = harness.driver_args("claude")
    token = harness.agent_token(args.work, ADMIN_KEY)
    report: dict[str, Any] = {}
    with governed(args.work, BUDGET) as (api, report["revision"]):
        report["claude"] = run(args.claude, args.work, project, api, token)
    harness.write_report(args.work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
