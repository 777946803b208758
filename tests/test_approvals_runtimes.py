"""Approvals on every runtime's hook path through a real `serve` (both stores): Codex,
Gemini CLI, Copilot CLI, Qwen Code, Factory Droid, OpenCode and Kilo (their captured
PreToolUse payloads) and Coder's signed
pre_tool_use, each allowed, denied and timed out, answered in the runtime's own format.
Claude Code's paths are in tests/test_approvals_api.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.support import Server
from tests.test_agent_adapters_api import AUDIENCE, SECRET, coder_request
from tests.test_approvals_api import ADMIN, ADMIN_KEY, Held, issue, pending

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parent / "fixtures"
RULES = {
    "version": 1,
    "rules": [
        {"id": f"{tool}-late", "tool": tool, "match": "^hold-late", "timeoutS": 1}
        for tool in ("Bash", "run_shell_command", "bash")
    ]
    + [
        {"id": f"{tool}-hold", "tool": tool, "match": "^hold", "timeoutS": 60}
        for tool in ("Bash", "run_shell_command", "bash")
    ],
}


def captured(relative: str, **changes: Any) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / relative).read_text())
    return {**payload, **changes}


def codex(command: str) -> tuple[str, dict[str, Any]]:
    return "/hooks/codex", captured(
        "codex/basic/03-PreToolUse.json",
        session_id=str(uuid.uuid4()),
        tool_use_id=f"call_{uuid.uuid4().hex[:12]}",
        tool_input={"command": command},
    )


def gemini(command: str) -> tuple[str, dict[str, Any]]:
    return "/hooks/gemini/BeforeTool", captured(
        "gemini/basic/07-BeforeTool.json",
        session_id=str(uuid.uuid4()),
        tool_input={"command": command, "description": "run"},
    )


def copilot(command: str) -> tuple[str, dict[str, Any]]:
    return "/hooks/copilot/preToolUse", captured(
        "copilot/basic/04-preToolUse.json",
        sessionId=str(uuid.uuid4()),
        toolArgs={"command": command, "description": "run"},
    )


def qwen(command: str) -> tuple[str, dict[str, Any]]:
    # Qwen Code's `run_shell_command` is recorded as `Bash`: the Bash rules hold it.
    return "/hooks/qwen", captured(
        "qwen-code/basic/05-PreToolUse.json",
        session_id=str(uuid.uuid4()),
        tool_call_id=f"call_{uuid.uuid4().hex[:12]}",
        tool_input={"command": command, "description": "run", "is_background": False},
    )


def droid(command: str) -> tuple[str, dict[str, Any]]:
    # Factory Droid's `Execute` is recorded as `Bash` too.
    return "/hooks/droid", captured(
        "factory-droid/basic/02-PreToolUse.json",
        session_id=str(uuid.uuid4()),
        tool_input={"command": command, "summary": "run"},
    )


def plugin(runtime: str) -> Callable[[str], tuple[str, dict[str, Any]]]:
    """OpenCode's and Kilo's `tool.execute.before` as their plugin posts it: `bash` is
    recorded as `Bash`, so the Bash rules hold it."""

    def body(command: str) -> tuple[str, dict[str, Any]]:
        hook = captured(f"{runtime}/basic/{PLUGIN_CAPTURES[runtime]}")
        given = {**hook["input"], "sessionID": f"ses_{uuid.uuid4().hex[:20]}"}
        given["callID"] = f"call_{uuid.uuid4().hex[:12]}"
        args = {"command": command, "description": "run"}
        return f"/hooks/{runtime}", {"hook": hook["hook"], "input": given, "output": {"args": args}}

    return body


PLUGIN_CAPTURES = {
    "opencode": "071-tool.execute.before.json",
    "kilo": "065-tool.execute.before.json",
}


def allowed(runtime: str, answer: dict[str, Any]) -> bool:
    return answer == {}


def denied(runtime: str, answer: dict[str, Any]) -> str:
    """The reason of a runtime's deny answer (the test fails if it is not a deny)."""
    if runtime in ("codex", "qwen", "droid"):  # Claude Code's answer shape
        output = answer["hookSpecificOutput"]
        assert output["permissionDecision"] == "deny", answer
        return str(output["permissionDecisionReason"])
    if runtime in PLUGIN_CAPTURES:  # the plugin throws this: the tool result the model reads
        return str(answer["deny"])
    if runtime == "gemini":
        assert answer["decision"] == "deny", answer
        return str(answer["reason"])
    assert answer["permissionDecision"] == "deny", answer
    return str(answer["permissionDecisionReason"])


RUNTIMES: dict[str, Callable[[str], tuple[str, dict[str, Any]]]] = {
    "codex": codex,
    "gemini": gemini,
    "copilot": copilot,
    "qwen": qwen,
    "droid": droid,
    "opencode": plugin("opencode"),
    "kilo": plugin("kilo"),
}


@pytest.fixture
def serve(settings: Settings, tmp_path: Path) -> Iterator[httpx.Client]:
    env = {
        "TACHOGRAPH_APPROVALS": json.dumps(RULES),
        "TACHOGRAPH_CODER_HOOK_SECRET": SECRET,
        "TACHOGRAPH_CODER_HOOK_URL": AUDIENCE,
        # Coder's budget is half of this: long enough for the test to decide in.
        "TACHOGRAPH_CODER_HOOK_TIMEOUT_MS": "20000",
    }
    server = Server(settings.with_(api_key=ADMIN_KEY), tmp_path / "serve.log", env)
    try:
        server.wait_ready(headers=ADMIN)
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as client:
            yield client
    finally:
        server.kill()


def decide(client: httpx.Client, verdict: str, reason: str | None = None) -> None:
    [request] = pending(client)
    body = {"decision": verdict, **({"reason": reason} if reason else {})}
    decided = client.post(f"/api/approvals/{request['id']}/decide", json=body)
    assert decided.status_code == 200, decided.text


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_each_runtime_is_held_then_allowed_denied_or_timed_out(
    serve: httpx.Client, runtime: str
) -> None:
    agent = issue(serve, role="agent", workspaceId="default")

    def send(command: str) -> Held:
        route, body = RUNTIMES[runtime](command)
        return Held(lambda: serve.post(route, json=body, headers=agent, timeout=90))

    first = send("hold-me please")
    decide(serve, "allow")
    assert allowed(runtime, first.result().json())

    second = send("hold-me again")
    decide(serve, "deny", "not on this branch")
    assert "not on this branch" in denied(runtime, second.result().json())

    late = send("hold-late now").result()
    assert "No operator decided" in denied(runtime, late.json())
    seen = serve.get(
        "/api/approvals", params={"minPosition": late.headers["x-tachograph-position"]}
    )
    statuses = sorted(a["status"] for a in seen.json()["items"])
    assert statuses == ["decided", "decided", "expired"]


def coder(client: httpx.Client, command: str, dispatch_id: str) -> Held:
    body, headers = coder_request(
        data={"tool_use_id": dispatch_id, "tool_name": "bash", "tool_input": {"cmd": command}},
        dispatch_id=dispatch_id,
        chat_id="chat-approvals",
    )
    return Held(lambda: client.post("/hooks/coder", content=body, headers=headers, timeout=90))


def test_coder_is_held_within_its_budget_then_allowed_denied_or_timed_out(
    serve: httpx.Client,
) -> None:
    first = coder(serve, "hold-me deploy", "disp-allow")
    decide(serve, "allow")
    assert "permission" not in first.result().json()  # pass: Coder runs the call

    second = coder(serve, "hold-me again", "disp-deny")
    decide(serve, "deny", "ask the release manager")
    answer = second.result().json()
    assert answer["permission"]["decision"] == "deny"
    assert "ask the release manager" in answer["permission"]["reason"]

    late = coder(serve, "hold-late drop", "disp-late")
    assert "No operator decided" in late.result().json()["permission"]["reason"]


def test_coder_past_its_budget_is_told_to_retry_and_the_retry_gets_the_decision(
    settings: Settings, tmp_path: Path
) -> None:
    env = {
        "TACHOGRAPH_APPROVALS": json.dumps(RULES),
        "TACHOGRAPH_CODER_HOOK_SECRET": SECRET,
        "TACHOGRAPH_CODER_HOOK_URL": AUDIENCE,
        "TACHOGRAPH_CODER_HOOK_TIMEOUT_MS": "600",  # 300 ms: no person answers that fast
    }
    server = Server(settings.with_(api_key=ADMIN_KEY), tmp_path / "short.log", env)
    try:
        server.wait_ready(headers=ADMIN)
        with httpx.Client(base_url=server.url, headers=ADMIN, timeout=60) as client:
            waiting = coder(client, "hold-me slowly", "disp-first").result().json()
            assert waiting["permission"]["decision"] == "deny"
            assert "Try the same call again" in waiting["permission"]["reason"]
            decide(client, "allow")
            retried = coder(client, "hold-me slowly", "disp-retry").result().json()
            assert "permission" not in retried  # the same approval answers the retry
            assert len(client.get("/api/approvals").json()["items"]) == 1
    finally:
        server.kill()
