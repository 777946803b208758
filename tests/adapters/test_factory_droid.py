"""Factory Droid adapter (§6.5): the captured payloads mapped (tools under Claude Code's
names), the answers in Droid's format, the route, and `hook install|uninstall droid`."""

from __future__ import annotations

import io
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from cli.main import main as cli_main
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from hook_client.command import FAIL_CLOSED_REASON, run_command_hook
from infra.settings import Settings
from ingest.runtimes.factory_droid import (
    AGENT,
    NORMALISED_EVENTS,
    decision_to_droid,
    droid_payload_to_event,
)
from ingest.runtimes.runtimes import RUNTIMES, runtime_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "factory-droid"
ALL = sorted(FIXTURES.glob("*/*.json"))
BASIC = ["SessionStart", "PreToolUse", "PostToolUse", "PreToolUse", "PostToolUse", "Stop"]


def fixture(scenario: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / scenario / name).read_text())
    return payload


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_maps_with_its_session(path: Path) -> None:
    payload = json.loads(path.read_text())
    ev = droid_payload_to_event(payload)
    assert (ev.event, ev.agent) == (payload["hook_event_name"], AGENT)
    assert ev.agent_session_id == payload["session_id"] and ev.cwd == payload["cwd"]
    assert ev.event_id is None and ev.tool_call_id is None  # Droid names no occurrence
    assert ev.tool_name in (None, "Bash", "Write")
    assert len(ALL) == 7 + 5 + 4 + 5


def test_the_shell_is_bash_and_create_is_write() -> None:
    pre = droid_payload_to_event(fixture("basic", "02-PreToolUse.json"))
    assert (pre.tool_name, pre.detail["nativeToolName"]) == ("Bash", "Execute")
    assert pre.tool_input == fixture("basic", "02-PreToolUse.json")["tool_input"]
    post = droid_payload_to_event(fixture("basic", "03-PostToolUse.json"))
    assert post.tool_response == "shell-done\n\n\n[Process exited with code 0]"
    create = droid_payload_to_event(fixture("basic", "04-PreToolUse.json"))
    assert (create.tool_name, create.detail["nativeToolName"]) == ("Write", "Create")
    assert droid_payload_to_event({**fixture("basic", "04-PreToolUse.json"), "tool_name": "Read"})
    with pytest.raises(ValueError, match="hook_event_name"):
        droid_payload_to_event({"session_id": "s"})
    assert runtime_for("droid") is RUNTIMES["droid"]


def _pre(output: dict[str, Any]) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **output}}


@pytest.mark.parametrize(
    ("event", "decision", "answer", "note"),
    [
        (
            "PreToolUse",
            Decision("deny", "no", additional_context="ctx"),
            _pre({"permissionDecision": "deny", "permissionDecisionReason": "no\n\nctx"}),
            None,
        ),
        (
            "PreToolUse",
            Decision("modify", replacement={"command": "ls"}),
            _pre({"permissionDecision": "allow", "updatedInput": {"command": "ls"}}),
            None,
        ),
        (
            "PreToolUse",
            Decision("pass", additional_context="ctx"),
            {},
            "additionalContext dropped: Factory Droid does not read it on PreToolUse",
        ),
        (
            "PostToolUse",
            Decision("pass", additional_context="ctx"),
            {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "ctx"}},
            None,
        ),
        ("Stop", Decision("continue", "tests"), {"decision": "block", "reason": "tests"}, None),
    ],
)
def test_decisions_render_in_droid_format(
    event: str, decision: Decision, answer: dict[str, Any], note: str | None
) -> None:
    assert decision_to_droid(event, decision) == (answer, note)


@pytest.fixture
def droid_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_the_route_records_a_whole_run(droid_client: TestClient) -> None:
    position = "0"
    for path in sorted((FIXTURES / "basic").glob("*.json")):
        response = droid_client.post("/hooks/droid", json=json.loads(path.read_text()))
        assert response.status_code == 200, response.text
        assert response.json() == {}
        position = response.headers.get("x-tachograph-position", position)
    native = fixture("basic", "01-SessionStart.json")["session_id"]
    session_id = str(agent_session_uuid(f"factory-droid:{native}"))
    params = {"minPosition": position}
    hooks = droid_client.get(f"/api/sessions/{session_id}/hooks", params=params).json()
    assert [r["event"] for r in hooks["items"]] == [*BASIC, "SessionEnd"]
    body = droid_client.get(f"/api/sessions/{session_id}", params=params).json()
    assert (body["agent"], body["agentSessionId"]) == ("factory-droid", native)


def test_the_command_hook_fails_closed_in_droid_format(tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": "http://127.0.0.1:9", "TACHOGRAPH_HOOK_LOG": str(tmp_path / "l")}
    out = io.StringIO()
    payload = json.dumps(fixture("basic", "02-PreToolUse.json"))
    run_command_hook(
        "droid", "PreToolUse", stdin=io.StringIO(payload), stdout=out, env=env, fail_closed=True
    )
    assert json.loads(out.getvalue()) == _pre(
        {"permissionDecision": "deny", "permissionDecisionReason": FAIL_CLOSED_REASON}
    )


def test_the_cli_installs_beside_the_custom_model_and_uninstalls_only_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".factory" / "settings.json"
    path.parent.mkdir()
    mine = {"hooks": [{"type": "command", "command": "./mine", "timeout": 5}]}
    user = {"customModels": [{"model": "m", "provider": "anthropic"}], "hooks": {"Stop": [mine]}}
    path.write_text(json.dumps(user))
    url = "http://127.0.0.1:9"
    assert cli_main(["hook", "install", "droid", str(tmp_path), "--url", url, "--fail-closed"]) == 0
    settings = json.loads(path.read_text())
    assert settings["customModels"] == user["customModels"]
    assert set(settings["hooks"]) == set(NORMALISED_EVENTS)
    assert settings["hooks"]["Stop"][0] == mine
    [pre] = settings["hooks"]["PreToolUse"][0]["hooks"]
    words = shlex.split(pre["command"])
    assert words[-3:] == ["droid", "PreToolUse", "--fail-closed"]
    assert pre["timeout"] > int(words[1].split("=")[1])  # seconds, past the client's wait
    [post] = settings["hooks"]["PostToolUse"][0]["hooks"]
    assert shlex.split(post["command"])[-2:] == ["droid", "PostToolUse"]
    assert cli_main(["hook", "uninstall", "droid", str(tmp_path)]) == 0
    assert json.loads(path.read_text()) == user
