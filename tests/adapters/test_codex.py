"""Codex adapter (§6.5): the real 0.169.0 payloads mapped, answers rendered, hooks installed.

The payloads in tests/fixtures/codex/ are what the real binary wrote to its hooks
(tests/fixtures/SOURCES.md); each is posted to `POST /hooks/codex` and read back.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cli.hook_files import HookFileError
from cli.main import main as cli_main
from cli.runtime_hooks import CODEX, install_nested, uninstall_nested
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from ingest.runtimes.codex import codex_payload_to_event, decision_to_codex

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "codex"
PAYLOADS = sorted(FIXTURES.glob("*/*.json"))
URL = "http://127.0.0.1:8000"


def load(path: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(path.read_text())
    return payload


def test_the_captures_cover_every_scenario() -> None:
    assert {p.parent.name for p in PAYLOADS} == {
        "basic",
        "deny_json",
        "fail401",
        "modify",
        "perm_allow",
    }


@pytest.mark.parametrize("path", PAYLOADS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_payload_maps_field_by_field(path: Path) -> None:
    payload = load(path)
    ev = codex_payload_to_event(payload)
    assert ev.event == payload["hook_event_name"]
    assert ev.agent == "codex"
    assert ev.agent_session_id == payload["session_id"]
    assert ev.turn_id == payload.get("turn_id")
    assert ev.cwd == payload["cwd"]
    assert ev.model == payload.get("model")
    assert ev.permission_mode == payload.get("permission_mode")
    assert ev.tool_name == payload.get("tool_name")
    assert ev.tool_call_id == payload.get("tool_use_id")
    assert ev.prompt == payload.get("prompt")
    assert ev.last_assistant_message == payload.get("last_assistant_message")
    assert ev.tool_response == payload.get("tool_response")
    if payload.get("tool_name") == "apply_patch":
        patch = payload["tool_input"]["command"]
        assert ev.tool_input == {"patch": patch, "file_paths": ["hello.txt"]}
    else:
        assert ev.tool_input == payload.get("tool_input")
    # Everything else is kept for handlers, camelCased, never dropped.
    for key in ("transcript_path", "source", "reason", "stop_hook_active"):
        if key in payload:
            camel = "".join(w if i == 0 else w.title() for i, w in enumerate(key.split("_")))
            assert ev.detail[camel] == payload[key]
    # Only a tool event is named uniquely, by its tool_use_id.
    if ev.tool_call_id and ev.event in ("PreToolUse", "PostToolUse"):
        assert ev.event_id == f"codex:{ev.agent_session_id}:{ev.event}:{ev.tool_call_id}"
    else:
        assert ev.event_id is None


def test_answers_are_codexs_own() -> None:
    deny, _ = decision_to_codex("PreToolUse", Decision("deny", "no force pushes"))
    assert deny == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no force pushes",
        }
    }
    rewrite, _ = decision_to_codex(
        "PreToolUse", Decision("modify", replacement={"command": "git push"})
    )
    assert rewrite["hookSpecificOutput"]["updatedInput"] == {"command": "git push"}
    # A patch comes back in the field Codex reads it from.
    patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch"
    rewrite, _ = decision_to_codex(
        "PreToolUse", Decision("modify", replacement={"patch": patch, "file_paths": ["b.txt"]})
    )
    assert rewrite["hookSpecificOutput"]["updatedInput"] == {"command": patch}
    keep_going, _ = decision_to_codex("Stop", Decision("continue", "tests still fail"))
    assert keep_going == {"decision": "block", "reason": "tests still fail"}
    assert decision_to_codex("PostToolUse", Decision("pass")) == ({}, None)
    refused, _ = decision_to_codex("PermissionRequest", Decision("deny", "down"))
    assert refused == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "down"},
        }
    }


def test_each_payload_is_recorded_on_codexs_session(client: TestClient) -> None:
    for path in sorted((FIXTURES / "basic").glob("*.json")):
        payload = load(path)
        answered = client.post("/hooks/codex", json=payload)
        assert answered.status_code == 200, answered.text
        assert answered.json() == {}
    native = load(FIXTURES / "basic" / "01-SessionStart.json")["session_id"]
    session_id = agent_session_uuid(f"codex:{native}")
    position = answered.headers["x-tachograph-position"]
    session = client.get(f"/api/sessions/{session_id}", params={"minPosition": position})
    assert session.json()["agent"] == "codex" and session.json()["agentSessionId"] == native
    events = [r["event"] for r in client.get(f"/api/sessions/{session_id}/hooks").json()["items"]]
    assert events == [load(p)["hook_event_name"] for p in sorted((FIXTURES / "basic").glob("*"))]


def test_the_event_route_names_the_event_and_bad_bodies_are_refused(
    client: TestClient,
) -> None:
    payload = load(FIXTURES / "basic" / "07-Stop.json")
    del payload["hook_event_name"]
    assert client.post("/hooks/codex/Stop", json=payload).status_code == 200
    missing = client.post("/hooks/codex", json=payload)
    assert missing.status_code == 422 and "hook_event_name" in missing.json()["message"]
    assert client.post("/hooks/codex", content=b"{").status_code == 400
    assert client.post("/hooks/cursor", json=payload).status_code == 422
    assert client.post("/hooks/codex/not-an-event", json=payload).status_code == 422


USER_HOOKS: dict[str, Any] = {
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}]
    },
}


def test_install_merges_beside_user_hooks_and_uninstall_removes_only_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / ".codex" / "hooks.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_HOOKS))
    install_nested(CODEX, tmp_path, url=URL, fail_closed=False)
    install_nested(CODEX, tmp_path, url=URL + "/", fail_closed=True)  # again: replaced, not added
    hooks = json.loads(path.read_text())["hooks"]
    assert set(hooks) == set(CODEX.events)
    pre = hooks["PreToolUse"]
    assert pre[0] == USER_HOOKS["hooks"]["PreToolUse"][0]
    (own,) = [h for group in pre[1:] for h in group["hooks"]]
    assert own["command"].startswith(f"TACHOGRAPH_URL={URL} ")
    assert " -S " in own["command"] and "hook_client/command.py" in own["command"]
    assert own["command"].endswith(" codex PreToolUse --fail-closed")
    stop = hooks["SessionEnd"][0]["hooks"][0]["command"]
    assert stop.endswith(" codex SessionEnd")  # only gate events fail closed
    assert not (path.parent / ".gitignore").exists()  # not inside a git work tree
    uninstall_nested(CODEX, tmp_path)
    assert json.loads(path.read_text()) == USER_HOOKS


def test_inside_a_git_work_tree_the_hook_file_ignores_itself(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    install_nested(CODEX, tmp_path, url=URL, fail_closed=False)
    ignore = tmp_path / ".codex" / ".gitignore"
    assert ignore.read_text().splitlines() == ["hooks.json", ".gitignore"]
    status = subprocess.run(
        ["git", "-C", str(tmp_path), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""


def test_a_broken_hook_file_is_left_untouched(tmp_path: Path) -> None:
    path = tmp_path / ".codex" / "hooks.json"
    path.parent.mkdir()
    path.write_text('{"hooks": [')
    with pytest.raises(HookFileError, match="nothing was changed"):
        install_nested(CODEX, tmp_path, url=URL, fail_closed=False)
    assert path.read_text() == '{"hooks": ['


def test_the_cli_installs_and_refuses_http_for_a_command_hook_runtime(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["hook", "install", "codex", str(tmp_path), "--url", URL]) == 0
    assert (tmp_path / ".codex" / "hooks.json").exists()
    assert cli_main(["hook", "install", "codex", str(tmp_path), "--http"]) == 1
    assert "command hooks only" in capsys.readouterr().err
    assert cli_main(["hook", "uninstall", "codex", str(tmp_path)]) == 0
    assert json.loads((tmp_path / ".codex" / "hooks.json").read_text()) == {}
