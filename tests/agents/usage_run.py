"""Offline runs of the real Claude Code and Gemini CLI with their OpenTelemetry pointed at
`tachograph serve`, for tests/agents/test_usage_telemetry.py.

    python usage_run.py --work DIR --claude BIN --gemini BIN --codex BIN

Run it inside a loopback-only network namespace (harness.run_driver). It starts `serve`
on SQLite with an admin key, issues one agent token (bound to the `default` workspace),
and runs, each in its own HOME and project with the hooks installed: Claude Code twice
(OTLP as `http/json`, then as `http/protobuf`) against the Messages API stand-in,
Gemini CLI once against the Gemini API stand-in, and `codex exec` once against the
Responses API stand-in. The token reaches the runtimes twice:
as the hooks' `TACHOGRAPH_AGENT_TOKEN` and in `OTEL_EXPORTER_OTLP_HEADERS`. DIR/report.json
gets, per run, the CLI's exit and output, its native session id, the model requests the
stand-in answered and the usage it reported in them, and the session as serve shows it
once the runtime's export has arrived.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]

from domain.lifecycle import agent_session_uuid  # noqa: E402
from tests.agents import (  # noqa: E402
    anthropic_standin,
    codex_run,
    gemini_standin,
    harness,
    openai_responses_standin,
    standin_server,
)
from tests.hook_server import answer  # noqa: E402
from tests.support import env_for, free_port  # noqa: E402

ADMIN_KEY = "usage-e2e-admin-key-0123456789abcdef"
PROMPT = "Show the date, then say done."
# Short intervals so a run's telemetry is exported at once (each CLI also flushes at exit).
OTEL_INTERVALS = {"OTEL_METRIC_EXPORT_INTERVAL": "500", "OTEL_LOGS_EXPORT_INTERVAL": "200"}
LOCAL = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def claude_responder(body: dict[str, Any]) -> anthropic_standin.Reply:
    if anthropic_standin.conversation_turn(body) == 0:
        return anthropic_standin.ToolUse("Bash", {"command": "date", "description": "date"})
    return anthropic_standin.Text("done")


def varied_usage(n: int) -> dict[str, int]:
    """The `usage` the Messages stand-in reports in its n-th response: other figures each
    time, cache reads and writes among them, so a sum that matches is no coincidence."""
    return {
        "input_tokens": 120 + 37 * n,
        "output_tokens": 9 + 4 * n,
        "cache_creation_input_tokens": 11 * (n + 1),
        "cache_read_input_tokens": 250 * n,
    }


def gemini_responder(body: dict[str, Any]) -> standin_server.Reply:
    if gemini_standin.conversation_turn(body) == 0:
        return gemini_standin.ToolUse(
            "run_shell_command", {"command": "date", "description": "date"}
        )
    return gemini_standin.Text("done")


def get(url: str) -> Any:
    request = urllib.request.Request(url, headers={"x-tachograph-key": ADMIN_KEY})
    with LOCAL.open(request, timeout=10) as response:
        return json.load(response)


def session_once_counted(url: str, session_id: str, requests: int) -> dict[str, Any] | None:
    """The session as serve shows it once `requests` model requests are on it (10 s)."""
    deadline = time.monotonic() + 10
    found = None
    while time.monotonic() < deadline:
        try:
            found = get(f"{url}/api/sessions/{session_id}")
        except OSError:
            found = None
        if found is not None and found["usage"]["requests"] >= requests:
            break
        time.sleep(0.1)
    return found


def otel_env(url: str, token: str, protocol: str | None) -> dict[str, str]:
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": url,
        "OTEL_EXPORTER_OTLP_HEADERS": f"x-tachograph-key={token}",
        **OTEL_INTERVALS,
    }
    if protocol is not None:
        env |= {
            "CLAUDE_CODE_ENABLE_TELEMETRY": "1",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        }
    return env


def claude_env(run: Path, model_url: str, url: str, token: str, protocol: str) -> dict[str, str]:
    """Claude Code's environment: offline against its model stand-in at `model_url`, the
    agent token for its hooks, and its OpenTelemetry export pointed at serve (`url`)."""
    return harness.agent_env(
        run,
        ANTHROPIC_BASE_URL=model_url,
        ANTHROPIC_API_KEY="sk-ant-standin-not-a-real-key",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        DISABLE_ERROR_REPORTING="1",
        TACHOGRAPH_AGENT_TOKEN=token,
        **otel_env(url, token, protocol),
    )


def run_claude(
    claude: str, work: Path, url: str, token: str, protocol: str, otlp_url: str
) -> dict[str, Any]:
    """`otlp_url`: where its OpenTelemetry goes (serve's port, or the receiver's own)."""
    run = work / f"claude-{protocol.replace('/', '-')}"
    project = run / "project"
    project.mkdir(parents=True)
    harness.tachograph(
        "hook",
        "install",
        "claude",
        str(project),
        "--url",
        url,
        env=env_for(harness.settings_of(work)),
    )
    with anthropic_standin.AnthropicStandIn(claude_responder, usage_for=varied_usage) as api:
        env = claude_env(run, api.url, otlp_url, token, protocol)
        argv = [claude, "-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash"]
        report = harness.run_agent(argv, env=env, cwd=project, timeout=120)
        answered = api.reported
    result = json.loads(report["stdout"]) if report["exit"] == 0 else {}
    native = result.get("session_id")
    report |= {
        "native_session": native,
        "cli_cost_usd": result.get("total_cost_usd"),
        "cli_usage": result.get("usage"),
        # What the stand-in reported in each response's `usage`.
        "standin_usage": list(api.reported),
        "otlp_url": otlp_url,
    }
    if native:
        session_id = str(agent_session_uuid(f"claude-code:{native}"))
        report["session"] = session_once_counted(url, session_id, len(answered))
        report["timeline"] = get(f"{url}/api/sessions/{session_id}/timeline")["items"]
    return report


def run_gemini(gemini: str, work: Path, url: str, token: str) -> dict[str, Any]:
    run = work / "gemini"
    home, project = run / "home", run / "project"
    project.mkdir(parents=True)
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    telemetry = {"enabled": True, "target": "local", "otlpEndpoint": url, "otlpProtocol": "http"}
    settings.write_text(
        json.dumps(
            {
                "security": {"auth": {"selectedType": "gemini-api-key"}},
                "privacy": {"usageStatisticsEnabled": False},
                "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
                "telemetry": {**telemetry, "logPrompts": False},
            }
        )
    )
    harness.install_hooks("gemini", home, url)
    with gemini_standin.GeminiStandIn(gemini_responder) as api:
        env = harness.agent_env(
            run,
            GOOGLE_GEMINI_BASE_URL=api.url,
            GEMINI_API_KEY="standin-key",
            TACHOGRAPH_AGENT_TOKEN=token,
            CI="1",
            **otel_env(url, token, None),
        )
        argv = [gemini, "--skip-trust", "--approval-mode", "yolo", "-m", "gemini-2.5-pro"]
        argv += ["-p", PROMPT, "--output-format", "json"]
        report = harness.run_agent(argv, env=env, cwd=project, timeout=120)
        answered = [r for r in api.requests if "generatecontent" in r.path.lower()]
    # The JSON result's head (run_agent keeps the last 4000 characters of a long one).
    found = re.search(r'"session_id": "([^"]+)"', report["stdout"])
    native = found.group(1) if found else None
    tokens = re.search(
        r'"tokens": \{\s*"input": (\d+),\s*"prompt": \d+,\s*"candidates": (\d+)', report["stdout"]
    )
    report |= {
        "native_session": native,
        # Gemini CLI's own count of what its API reported (its JSON result's `stats`).
        "cli_tokens": [int(tokens.group(1)), int(tokens.group(2))] if tokens else None,
        # What the stand-in reports in every response (gemini_standin: usageMetadata).
        "standin_usage": [{"input_tokens": 100, "output_tokens": 10} for _ in answered],
    }
    if native:
        session_id = str(agent_session_uuid(f"gemini-cli:{native}"))
        report["session"] = session_once_counted(url, session_id, len(answered))
    return report


def run_codex(codex: str, work: Path, url: str, token: str) -> dict[str, Any]:
    """`codex exec` with its `[otel]` exporter (config.toml) pointed at serve's /v1/logs."""
    run = work / "codex"
    home, project = run / "home", run / "project"
    project.mkdir(parents=True)
    harness.install_hooks("codex", home, url)
    with openai_responses_standin.ResponsesStandIn(lambda _: standin_server.Text("done")) as api:
        codex_run.codex_config(home / ".codex", api.base_url)
        config = home / ".codex" / "config.toml"
        exporter = (
            f'{{ otlp-http = {{ endpoint = "{url}/v1/logs", protocol = "json", '
            f'headers = {{ "x-tachograph-key" = "{token}" }} }} }}'
        )
        config.write_text(
            config.read_text() + f"[otel]\nlog_user_prompt = false\nexporter = {exporter}\n"
        )
        env = harness.agent_env(
            run,
            CODEX_HOME=str(home / ".codex"),
            STANDIN_API_KEY="sk-standin",
            TMPDIR=str(codex_run.codex_tmp(run)),
            TACHOGRAPH_AGENT_TOKEN=token,
        )
        argv = [codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust"]
        report = harness.run_agent([*argv, "-C", str(project), PROMPT], env=env, cwd=project)
        answered = api.agent_requests()
    found = re.search(r"session id: (\S+)", report["stdout"] + report["stderr"])
    native = found.group(1) if found else None
    report |= {
        "native_session": native,
        # What the stand-in reports in every completed response (openai_responses_standin).
        "standin_usage": [{"input_tokens": 100, "output_tokens": 10} for _ in answered],
    }
    if native:
        session_id = str(agent_session_uuid(f"codex:{native}"))
        report["session"] = session_once_counted(url, session_id, len(answered))
    return report


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--claude", required=True)
    parser.add_argument("--gemini", required=True)
    parser.add_argument("--codex", required=True)
    args = parser.parse_args()
    work: Path = args.work
    issue = ["keys", "issue", "--role", "agent", "--workspace", "default"]
    token = harness.tachograph(*issue, env=env_for(harness.settings_of(work, ADMIN_KEY)))
    token = token.strip()
    managed = harness.ManagedHooks(answer("pass"))
    # The receiver also runs in its own process (TACHOGRAPH_OTLP_PORT): the protobuf run
    # exports there, the others to serve's own port.
    receiver = f"http://127.0.0.1:{free_port()}"
    serve = harness.start_serve(
        work,
        managed,
        api_key=ADMIN_KEY,
        extra_env={"TACHOGRAPH_SERVE_CPU": "all", "TACHOGRAPH_OTLP_PORT": receiver.rsplit(":")[-1]},
    )
    report: dict[str, Any] = {}
    try:
        for protocol, otlp_url in (("http/json", serve.url), ("http/protobuf", receiver)):
            report[protocol] = run_claude(args.claude, work, serve.url, token, protocol, otlp_url)
        report["receiver_metrics"] = urllib.request.urlopen(f"{receiver}/metrics").read().decode()
        report["gemini"] = run_gemini(args.gemini, work, serve.url, token)
        report["codex"] = run_codex(args.codex, work, serve.url, token)
        report["by_agent"] = get(f"{serve.url}/api/usage?groupBy=agent")["items"]
    finally:
        harness.stop_serve(serve)
        managed.close()
    harness.write_report(work, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
