"""Qwen Code adapter (§6.5): the captured payloads mapped (tools under Claude Code's names),
the answers in Qwen Code's format with what 0.24.4 cannot apply said in the note, and the
route."""

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
from ingest.runtimes.qwen_code import (
    AGENT,
    NORMALISED_EVENTS,
    decision_to_qwen,
    qwen_payload_to_event,
)
from ingest.runtimes.runtimes import RUNTIMES, runtime_for
from tests.adapters.event_fields import wire_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "qwen-code"
SCENARIOS = ("basic", "context", "deny_json", "modify")
ALL = sorted(p for s in SCENARIOS for p in (FIXTURES / s).glob("*.json"))
# What the basic run records, in order (the prompt continuations are not recorded).
RECORDED = [
    "InstructionsLoaded",
    "SessionStart",
    "Notification",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PostToolBatch",
    "PreToolUse",
    "PostToolUse",
    "PostToolBatch",
    "Stop",
]


def fixture(scenario: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / scenario / name).read_text())
    return payload


def test_the_captures_are_all_there() -> None:
    assert len(ALL) == 13 + 13 + 11 + 13
    assert {json.loads(p.read_text())["hook_event_name"] for p in ALL} == set(RECORDED)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_maps_with_its_session_and_turn(path: Path) -> None:
    payload = json.loads(path.read_text())
    ev = qwen_payload_to_event(payload)
    if payload["hook_event_name"] == "UserPromptSubmit" and "submitted_prompt" not in payload:
        assert ev is None  # the refiring before a tool-result continuation
        return
    assert ev is not None
    assert (ev.event, ev.agent) == (payload["hook_event_name"], AGENT)
    assert ev.agent_session_id == payload["session_id"]
    assert ev.turn_id == payload.get("prompt_id")
    assert ev.cwd == payload["cwd"]
    assert "hookEventName" not in ev.detail


def test_a_shell_call_is_a_bash_call_named_by_the_models_id() -> None:
    payload = fixture("basic", "05-PreToolUse.json")
    ev = qwen_payload_to_event(payload)
    assert ev is not None
    wire = wire_fields(ev)
    assert (wire["toolName"], wire["toolInput"]) == ("Bash", payload["tool_input"])
    assert wire["toolCallId"] == "call_mock00485b424d"
    assert wire["detail"]["nativeToolName"] == "run_shell_command"
    assert wire["detail"]["toolUseId"] == payload["tool_use_id"]
    assert ev.event_id == f"qwen-code:{payload['session_id']}:PreToolUse:call_mock00485b424d"
    post = qwen_payload_to_event(fixture("basic", "06-PostToolUse.json"))
    assert post is not None and post.tool_call_id == ev.tool_call_id
    assert post.tool_response == fixture("basic", "06-PostToolUse.json")["tool_response"]


def test_a_file_write_is_a_write_call_and_unknown_tools_keep_their_names() -> None:
    payload = fixture("basic", "09-PreToolUse.json")
    ev = qwen_payload_to_event(payload)
    assert ev is not None and ev.tool_name == "Write"
    assert ev.tool_input == payload["tool_input"]
    other = qwen_payload_to_event({**payload, "tool_name": "save_memory"})
    assert other is not None and other.tool_name == "save_memory"
    assert "nativeToolName" not in other.detail


def test_only_a_real_prompt_is_a_prompt() -> None:
    first = qwen_payload_to_event(fixture("basic", "04-UserPromptSubmit.json"))
    assert first is not None and first.prompt == "Run a shell command, then write hello.txt."
    assert qwen_payload_to_event(fixture("basic", "08-UserPromptSubmit.json")) is None
    typed = {**fixture("basic", "08-UserPromptSubmit.json"), "prompt": "and then?"}
    kept = qwen_payload_to_event(typed)
    assert kept is not None and kept.prompt == "and then?"


def test_the_stop_carries_the_final_message() -> None:
    ev = qwen_payload_to_event(fixture("basic", "13-Stop.json"))
    assert ev is not None
    assert ev.last_assistant_message == "All done: ran a shell command and wrote hello.txt."


def test_the_registration_wins_and_bad_bodies_are_refused() -> None:
    payload = fixture("basic", "05-PreToolUse.json")
    ev = qwen_payload_to_event({**payload, "hook_event_name": "Other"}, "PreToolUse")
    assert ev is not None and ev.event == "PreToolUse"
    with pytest.raises(ValueError, match="JSON object"):
        qwen_payload_to_event([1])
    with pytest.raises(ValueError, match="hook_event_name"):
        qwen_payload_to_event({"session_id": "s"})
    assert runtime_for("qwen") is RUNTIMES["qwen"]


# --- answers ---------------------------------------------------------------------------


def _pre(output: dict[str, Any]) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", **output}}


@pytest.mark.parametrize(
    ("event", "decision", "answer", "note"),
    [
        ("PreToolUse", Decision("pass"), {}, None),
        (
            "PreToolUse",
            Decision("deny", "no rm"),
            _pre({"permissionDecision": "deny", "permissionDecisionReason": "no rm"}),
            None,
        ),
        (
            "PreToolUse",
            Decision("deny", "no", additional_context="ctx"),
            _pre({"permissionDecision": "deny", "permissionDecisionReason": "no\n\nctx"}),
            None,
        ),
        (
            "PreToolUse",
            Decision("pass", additional_context="ctx"),
            {},
            "additionalContext dropped: Qwen Code does not read it on PreToolUse",
        ),
        (
            "PostToolUse",
            Decision("pass", additional_context="ctx"),
            {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "ctx"}},
            None,
        ),
        (
            "SessionStart",
            Decision("pass", additional_context="rules"),
            {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "rules"}},
            None,
        ),
        (
            "Stop",
            Decision("continue", "run the tests"),
            {"decision": "block", "reason": "run the tests"},
            None,
        ),
        (
            "PermissionRequest",
            Decision("pass", approved=True),
            {
                "hookSpecificOutput": {
                    "hookEventName": "PermissionRequest",
                    "decision": {"behavior": "allow"},
                }
            },
            None,
        ),
    ],
)
def test_decisions_render_in_qwen_format(
    event: str, decision: Decision, answer: dict[str, Any], note: str | None
) -> None:
    assert decision_to_qwen(event, decision) == (answer, note)


def test_a_rewrite_it_cannot_apply_is_a_deny_that_names_the_replacement() -> None:
    answer, note = decision_to_qwen(
        "PreToolUse", Decision("modify", "use ls", replacement={"command": "ls"})
    )
    output = answer["hookSpecificOutput"]
    assert output["permissionDecision"] == "deny"
    assert output["permissionDecisionReason"].startswith("use ls\n\n")
    assert output["permissionDecisionReason"].endswith('Replacement input:\n{"command": "ls"}')
    assert "updatedInput" not in output
    assert note == (
        "PreToolUse modify is not applied by Qwen Code 0.24.4 (it ignores updatedInput); "
        "answered deny with the replacement in the reason"
    )


# --- the route and the command hook ----------------------------------------------------


@pytest.fixture
def qwen_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_the_route_records_a_whole_run(qwen_client: TestClient) -> None:
    position = "0"
    for path in sorted((FIXTURES / "basic").glob("*.json")):
        response = qwen_client.post("/hooks/qwen", json=json.loads(path.read_text()))
        assert response.status_code == 200, response.text
        assert response.json() == {}
        position = response.headers.get("x-tachograph-position", position)
    native = fixture("basic", "02-SessionStart.json")["session_id"]
    session_id = str(agent_session_uuid(f"qwen-code:{native}"))
    hooks = qwen_client.get(f"/api/sessions/{session_id}/hooks", params={"minPosition": position})
    events = [r["event"] for r in hooks.json()["items"]]
    assert events == RECORDED
    body = qwen_client.get(f"/api/sessions/{session_id}", params={"minPosition": position}).json()
    assert (body["agent"], body["agentSessionId"]) == ("qwen-code", native)
    assert body["title"] == "Run a shell command, then write hello.txt."
    timeline = qwen_client.get(
        f"/api/sessions/{session_id}/timeline", params={"minPosition": position}
    ).json()
    calls = [c["tool"] for turn in timeline["items"] for c in turn["calls"]]
    assert sorted(calls) == ["Bash", "Write"]


def test_the_command_hook_fails_closed_in_qwen_format(tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": "http://127.0.0.1:9", "TACHOGRAPH_HOOK_LOG": str(tmp_path / "l")}

    def relay(name: str, event: str) -> str:
        out = io.StringIO()
        payload = json.dumps(fixture("basic", name))
        run_command_hook(
            "qwen", event, stdin=io.StringIO(payload), stdout=out, env=env, fail_closed=True
        )
        return out.getvalue()

    denied = json.loads(relay("05-PreToolUse.json", "PreToolUse"))
    assert denied == _pre(
        {"permissionDecision": "deny", "permissionDecisionReason": FAIL_CLOSED_REASON}
    )
    assert relay("06-PostToolUse.json", "PostToolUse") == ""


# --- hook install / uninstall qwen ------------------------------------------------------

URL = "http://127.0.0.1:9"
USER_SETTINGS: dict[str, Any] = {
    "model": {"name": "mock-model"},
    "hooks": {"PreToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "./g"}]}]},
}


def own_handlers(home: Path) -> dict[str, list[dict[str, Any]]]:
    settings = json.loads((home / ".qwen" / "settings.json").read_text())
    return {
        event: [h for g in groups for h in g["hooks"] if "command.py qwen " in h["command"]]
        for event, groups in settings["hooks"].items()
    }


def test_the_cli_installs_beside_the_users_hooks_and_uninstalls_only_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / ".qwen" / "settings.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS))
    install = ["hook", "install", "qwen", str(tmp_path), "--url", URL, "--fail-closed"]
    assert cli_main(install) == 0
    assert cli_main(install) == 0  # twice: never duplicated
    handlers = own_handlers(tmp_path)
    assert set(handlers) == {
        *NORMALISED_EVENTS,
        "PermissionRequest",
        "PermissionDenied",
        "PostToolBatch",
    }
    assert all(len(h) == 1 for h in handlers.values())
    [pre] = handlers["PreToolUse"]
    words = shlex.split(pre["command"])
    assert words[0] == f"TACHOGRAPH_URL={URL}" and words[1].startswith("TACHOGRAPH_HOOK_TIMEOUT_S=")
    assert Path(words[2]).is_absolute() and words[3] == "-S"  # this installation's Python
    assert words[5:] == ["qwen", "PreToolUse", "--fail-closed"]
    # A held call waits as long as the longest hold: the runtime's timeout is milliseconds.
    client_wait_s = int(words[1].split("=")[1])
    assert pre["timeout"] > client_wait_s * 1000
    [post] = handlers["PostToolUse"]
    assert shlex.split(post["command"])[-2:] == ["qwen", "PostToolUse"]  # not a gate
    assert post["timeout"] == 30_000
    settings = json.loads(path.read_text())
    assert settings["model"] == USER_SETTINGS["model"]
    assert settings["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert cli_main(["hook", "install", "qwen", str(tmp_path), "--http"]) == 1
    assert "command hooks only" in capsys.readouterr().err
    assert cli_main(["hook", "uninstall", "qwen", str(tmp_path)]) == 0
    assert json.loads(path.read_text()) == USER_SETTINGS
