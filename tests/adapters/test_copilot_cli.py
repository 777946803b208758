"""Copilot CLI adapter (§6.5): the real 1.0.102 payloads of both families mapped, answers
rendered in Copilot's format, Tachograph's own hook file installed and removed.

The payloads in tests/fixtures/copilot/ are what the real binary wrote to its hooks
(tests/fixtures/SOURCES.md): camelCase registrations get Copilot's own payload, the `pascal`
scenario's PascalCase registrations a Claude-style one.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cli.copilot_hooks import install_copilot_hooks, install_note, uninstall_copilot_hooks
from cli.hook_files import HookFileError
from cli.main import main as cli_main
from domain.dispatch_facts import input_summary
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from ingest.runtimes.copilot_cli import (
    REGISTERED_EVENTS,
    copilot_payload_to_event,
    decision_to_copilot,
)
from ingest.runtimes.runtimes import RUNTIMES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "copilot"
PAYLOADS = sorted(p for p in FIXTURES.glob("*/*.json"))
HTTP_PAYLOADS = sorted(FIXTURES.glob("basic/http/*.json"))
URL = "http://127.0.0.1:8000"
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"

# The registration name (the file's) -> the event Tachograph records.
NORMALISED = {
    "sessionStart": "SessionStart",
    "userPromptSubmitted": "UserPromptSubmit",
    "userPromptTransformed": "UserPromptTransformed",
    "preToolUse": "PreToolUse",
    "permissionRequest": "PermissionRequest",
    "postToolUse": "PostToolUse",
    "postToolUseFailure": "PostToolUseFailure",
    "agentStop": "Stop",
    "errorOccurred": "ErrorOccurred",
    "sessionEnd": "SessionEnd",
    **{
        name: name
        for name in (
            "SessionStart",
            "UserPromptSubmit",
            "PreToolUse",
            "PermissionRequest",
            "PostToolUse",
            "Stop",
            "SessionEnd",
        )
    },
}


def load(path: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(path.read_text())
    return payload


def registration(path: Path) -> str:
    match = re.match(r"\d+-(\w+?)(?:\.http)?\.json$", path.name)
    assert match is not None
    return match.group(1)


def test_the_captures_cover_every_scenario() -> None:
    assert {p.parent.name for p in PAYLOADS} == {
        "basic",
        "deny_json",
        "fail401",
        "modify",
        "pascal",
        "perm_deny",
    }
    # The HTTP hook got exactly what the command hook got.
    for http in HTTP_PAYLOADS:
        command = FIXTURES / "basic" / http.name.replace(".http.json", ".json")
        assert load(http) == load(command)


@pytest.mark.parametrize("path", PAYLOADS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_payload_maps_field_by_field(path: Path) -> None:
    payload = load(path)
    name = registration(path)
    ev = copilot_payload_to_event(payload, name)
    assert ev.event == NORMALISED[name]
    assert ev.agent == "copilot-cli"
    assert ev.agent_session_id == payload.get("sessionId", payload.get("session_id"))
    assert ev.cwd == payload["cwd"]
    assert ev.tool_name == payload.get("toolName", payload.get("tool_name"))
    assert ev.prompt == payload.get("prompt")
    assert ev.tool_response == payload.get("toolResult", payload.get("tool_result"))
    raw_input = next(
        (payload[k] for k in ("toolArgs", "toolInput", "tool_input") if k in payload), None
    )
    if isinstance(raw_input, str) and raw_input.startswith("*** Begin Patch"):
        # apply_patch (`Edit` in PascalCase payloads): a file-change call.
        assert ev.tool_input == {"patch": raw_input, "file_paths": ["hello.txt"]}
        # The activity trail names the file, whichever name the tool came under.
        assert input_summary(ev.tool_name, ev.tool_input) == "hello.txt"
    elif isinstance(raw_input, str):
        # apply_patch's input is whatever text it got (the modify capture's JSON-wrapped one).
        assert ev.tool_name == "apply_patch"
        assert ev.tool_input == {"patch": raw_input, "file_paths": []}
    else:
        assert ev.tool_input == raw_input
    error = payload.get("error")
    assert ev.error == (error["message"] if isinstance(error, dict) else error)
    # Copilot names no tool call: nothing is deduplicated.
    assert ev.tool_call_id is None and ev.event_id is None and ev.turn_id is None
    # Everything else is kept for handlers, camelCased, never dropped.
    for key in (
        "timestamp",
        "source",
        "initialPrompt",
        "initial_prompt",
        "transformedPrompt",
        "transcriptPath",
        "transcript_path",
        "stopReason",
        "stop_reason",
        "stop_hook_active",
        "reason",
        "permissionSuggestions",
        "errorContext",
        "recoverable",
    ):
        if key in payload:
            camel = re.sub(r"_(\w)", lambda m: m.group(1).upper(), key)
            assert ev.detail[camel] == payload[key]
    assert "hookEventName" not in ev.detail and "hookName" not in ev.detail


def test_the_event_comes_from_the_payload_when_the_registration_does_not_name_it() -> None:
    pascal = load(FIXTURES / "pascal" / "09-Stop.json")
    assert copilot_payload_to_event(pascal).event == "Stop"
    permission = load(FIXTURES / "basic" / "05-permissionRequest.json")
    assert copilot_payload_to_event(permission).event == "PermissionRequest"
    own = load(FIXTURES / "basic" / "04-preToolUse.json")
    with pytest.raises(ValueError, match="/hooks/copilot/<event>"):
        copilot_payload_to_event(own)
    assert copilot_payload_to_event(own, "futureEvent").event == "futureEvent"


def test_answers_are_copilots_own() -> None:
    deny, note = decision_to_copilot("PreToolUse", Decision("deny", "no force pushes"))
    assert deny == {"permissionDecision": "deny", "permissionDecisionReason": "no force pushes"}
    assert note is None
    rewrite, _ = decision_to_copilot(
        "PreToolUse", Decision("modify", replacement={"command": "ls", "description": "d"})
    )
    assert rewrite == {
        "permissionDecision": "allow",
        "modifiedArgs": {"command": "ls", "description": "d"},
    }
    # A patch goes back as the patch string apply_patch takes (an object would be sent to
    # it as JSON text, as the `modify` capture shows).
    patch, _ = decision_to_copilot(
        "PreToolUse",
        Decision("modify", replacement={"patch": PATCH, "file_paths": ["hello.txt"]}),
    )
    assert patch == {"permissionDecision": "allow", "modifiedArgs": PATCH}
    # pass is no decision at all: Copilot's own permission checks still apply.
    assert decision_to_copilot("PreToolUse", Decision("pass")) == ({}, None)
    context, _ = decision_to_copilot("PreToolUse", Decision("pass", additional_context="c"))
    assert context == {"additionalContext": "c"}
    refused, _ = decision_to_copilot("PermissionRequest", Decision("deny", "down"))
    assert refused == {"behavior": "deny", "message": "down"}
    blocked, _ = decision_to_copilot("UserPromptSubmit", Decision("deny", "no secrets"))
    assert blocked == {"decision": "block", "reason": "no secrets"}
    rewritten, note = decision_to_copilot("UserPromptSubmit", Decision("modify", replacement="p"))
    assert rewritten == {"modifiedPrompt": "p"} and note is None
    keep_going, _ = decision_to_copilot("Stop", Decision("continue", "tests still fail"))
    assert keep_going == {"decision": "block", "reason": "tests still fail"}
    for event in ("SessionStart", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit"):
        answer, _ = decision_to_copilot(event, Decision("pass", additional_context="ctx"))
        assert answer == {"additionalContext": "ctx"}
    for event in ("SessionEnd", "ErrorOccurred", "PreCompact", "SubagentStop"):
        assert decision_to_copilot(event, Decision("pass")) == ({}, None)


def test_what_copilot_cannot_express_gets_the_safer_answer_and_an_audit_note() -> None:
    subagent, note = decision_to_copilot("SubagentStart", Decision("deny", "no subagents"))
    assert "no subagents" in subagent["additionalContext"]
    assert note and "not expressible" in note
    not_an_object, note = decision_to_copilot(
        "PreToolUse", Decision("modify", replacement="rm -rf /")
    )
    assert not_an_object["permissionDecision"] == "deny" and note
    not_a_prompt, note = decision_to_copilot(
        "UserPromptSubmit", Decision("modify", replacement={"a": 1})
    )
    assert not_a_prompt["decision"] == "block" and note
    dropped, note = decision_to_copilot("SessionEnd", Decision("pass", additional_context="x"))
    assert dropped == {} and note and "dropped" in note
    strange, note = decision_to_copilot("PreToolUse", Decision("maybe"))  # type: ignore[arg-type]
    assert strange["permissionDecision"] == "deny" and note


def test_every_answer_format_is_the_same_for_pascalcase_registrations() -> None:
    # Copilot reads its flat format on PascalCase registrations too (checked against the
    # binary: a hookSpecificOutput.additionalContext would be ignored there).
    deny, _ = decision_to_copilot("PreToolUse", Decision("deny", "r"))
    assert "hookSpecificOutput" not in deny


def test_fail_closed_gates_the_gate_events() -> None:
    runtime = RUNTIMES["copilot"]
    assert runtime.agent == "copilot-cli"
    assert {"PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop"} <= runtime.gate_events
    assert "PostToolUse" not in runtime.gate_events


def test_each_payload_is_recorded_on_copilots_session(client: TestClient) -> None:
    for family, route in (("basic", "/hooks/copilot/{}"), ("pascal", "/hooks/copilot")):
        paths = sorted((FIXTURES / family).glob("*.json"))
        for path in paths:
            url = route.format(registration(path)) if "{}" in route else route
            if family == "pascal" and "hook_event_name" not in load(path):
                url = f"/hooks/copilot/{registration(path)}"  # permissionRequest's payload
            answered = client.post(url, json=load(path))
            assert answered.status_code == 200, answered.text
            assert answered.json() == {}
        native = load(paths[0]).get("sessionId") or load(paths[0])["session_id"]
        session_id = agent_session_uuid(f"copilot-cli:{native}")
        position = answered.headers["x-tachograph-position"]
        session = client.get(f"/api/sessions/{session_id}", params={"minPosition": position})
        assert session.json()["agent"] == "copilot-cli"
        assert session.json()["agentSessionId"] == native
        items = client.get(f"/api/sessions/{session_id}/hooks").json()["items"]
        assert [r["event"] for r in items] == [NORMALISED[registration(p)] for p in paths]


def test_a_body_that_names_no_event_is_refused(client: TestClient) -> None:
    payload = load(FIXTURES / "basic" / "04-preToolUse.json")
    missing = client.post("/hooks/copilot", json=payload)
    assert missing.status_code == 422 and "/hooks/copilot/<event>" in missing.json()["message"]
    assert client.post("/hooks/copilot/preToolUse", content=b"{").status_code == 400


USER_FILE = {"version": 1, "hooks": {"preToolUse": [{"type": "command", "bash": "./guard.sh"}]}}


def test_install_writes_its_own_file_beside_the_users_and_uninstall_deletes_only_it(
    tmp_path: Path,
) -> None:
    hooks_dir = tmp_path / ".copilot" / "hooks"
    hooks_dir.mkdir(parents=True)
    (hooks_dir / "mine.json").write_text(json.dumps(USER_FILE))
    path = install_copilot_hooks(tmp_path, http=False, url=URL, fail_closed=False)
    path = install_copilot_hooks(tmp_path, http=False, url=URL + "/", fail_closed=True)  # again
    assert path == hooks_dir / "tachograph.json"
    settings = json.loads(path.read_text())
    assert settings["version"] == 1 and list(settings["hooks"]) == list(REGISTERED_EVENTS)
    (pre,) = settings["hooks"]["preToolUse"]
    assert pre["type"] == "command" and pre["timeoutSec"] == 30
    assert pre["bash"].startswith(f"TACHOGRAPH_URL={URL} ")
    assert pre["bash"].endswith(" copilot preToolUse --fail-closed")
    assert settings["hooks"]["postToolUse"][0]["bash"].endswith(" copilot postToolUse")
    assert not (hooks_dir / ".gitignore").exists()  # not inside a git work tree
    uninstall_copilot_hooks(tmp_path)
    assert sorted(p.name for p in hooks_dir.iterdir()) == ["mine.json"]
    assert json.loads((hooks_dir / "mine.json").read_text()) == USER_FILE
    uninstall_copilot_hooks(tmp_path)  # nothing left to remove: fine


def test_http_install_sends_the_agent_token_never_the_admin_key(tmp_path: Path) -> None:
    path = install_copilot_hooks(tmp_path, http=True, url=URL, fail_closed=False)
    hooks = json.loads(path.read_text())["hooks"]
    (pre,) = hooks["preToolUse"]
    assert pre["type"] == "http" and pre["url"] == f"{URL}/hooks/copilot/preToolUse"
    assert pre["headers"]["x-tachograph-key"] == "$TACHOGRAPH_AGENT_TOKEN"
    assert set(pre["allowedEnvVars"]) == {
        "TACHOGRAPH_AGENT_TOKEN",
        "TACHOGRAPH_SESSION_ID",
        "TACHOGRAPH_WORKSPACE",
    }
    assert "TACHOGRAPH_API_KEY" not in path.read_text()
    # --fail-closed: the gate events stay command hooks (an HTTP hook cannot fail closed).
    path = install_copilot_hooks(tmp_path, http=True, url=URL, fail_closed=True)
    hooks = json.loads(path.read_text())["hooks"]
    assert hooks["preToolUse"][0]["bash"].endswith(" copilot preToolUse --fail-closed")
    assert hooks["agentStop"][0]["bash"].endswith(" copilot agentStop --fail-closed")
    assert hooks["postToolUse"][0]["type"] == "http"
    note = install_note(http=True, url=URL)
    assert note and "COPILOT_HOOK_ALLOW_LOCALHOST=1" in note
    assert install_note(http=True, url="https://tachograph.example") is None
    assert install_note(http=False, url=URL) is None
    warning = install_note(http=True, url="http://tachograph.internal:8000")
    assert warning and "https://" in warning


def test_a_foreign_tachograph_json_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / ".copilot" / "hooks" / "tachograph.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(USER_FILE))
    with pytest.raises(HookFileError, match="nothing was changed"):
        install_copilot_hooks(tmp_path, http=False, url=URL, fail_closed=False)
    assert json.loads(path.read_text()) == USER_FILE
    uninstall_copilot_hooks(tmp_path)
    assert json.loads(path.read_text()) == USER_FILE


def test_inside_a_git_work_tree_the_hook_file_ignores_itself(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    install_copilot_hooks(tmp_path, http=False, url=URL, fail_closed=False)
    ignore = tmp_path / ".copilot" / "hooks" / ".gitignore"
    assert ignore.read_text().splitlines() == ["tachograph.json", ".gitignore"]
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""
    uninstall_copilot_hooks(tmp_path)
    assert not (tmp_path / ".copilot" / "hooks" / ".gitignore").exists()


def test_the_cli_installs_and_uninstalls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["hook", "install", "copilot", str(tmp_path), "--http", "--url", URL]) == 0
    out = capsys.readouterr().out
    assert "COPILOT_HOOK_ALLOW_LOCALHOST=1" in out and "tachograph.json" in out
    assert cli_main(["hook", "uninstall", "copilot", str(tmp_path)]) == 0
    assert not (tmp_path / ".copilot" / "hooks" / "tachograph.json").exists()
