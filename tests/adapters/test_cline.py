"""Cline adapter (§6.5): the captured payloads mapped (tools under Claude Code's names and
fields), the answers in Cline's format with what it cannot express said in the note, the
route, and `hook install|uninstall cline`."""

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
from cli.cline_hook_files import MARKER, own_hooks
from cli.hook_waits import installed_waits
from cli.main import main as cli_main
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from hook_client.command import FAIL_CLOSED_REASON, run_command_hook
from infra.settings import Settings
from ingest.runtimes.cline import (
    AGENT,
    INSTALLED_EVENTS,
    cline_payload_to_event,
    decision_to_cline,
    takes_learned,
)
from ingest.runtimes.cline_tools import native_input
from ingest.runtimes.runtimes import RUNTIMES, runtime_for

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cline"
ALL = sorted(FIXTURES.glob("*/*.json"))
BASIC = ["SessionStart", "PreToolUse", "PostToolUse", "PreToolUse", "PostToolUse", "Stop"]
URL = "http://127.0.0.1:9"


def fixture(scenario: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((FIXTURES / scenario / name).read_text())
    return payload


def event_of_file(path: Path) -> str:
    return path.stem.split("-", 1)[1]


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_maps_with_its_session(path: Path) -> None:
    payload = json.loads(path.read_text())
    ev = cline_payload_to_event(payload, event_of_file(path))
    assert ev.agent == AGENT
    # The run's session (Cline's rootSessionId), the same for every event of the run.
    assert ev.agent_session_id == payload["sessionContext"]["rootSessionId"]
    assert ev.detail["taskId"] == payload["taskId"]
    assert ev.cwd == payload["workspaceInfo"]["rootPath"]
    assert ev.subagent_id is None  # the root agent
    # The file's name and Cline's own hook name agree.
    assert cline_payload_to_event(payload).event == ev.event
    assert len(ALL) == 6 + 4 + 3 + 4


def test_a_run_maps_to_the_normalised_events_with_claude_codes_tools() -> None:
    paths = sorted((FIXTURES / "basic").glob("*.json"))
    events = [cline_payload_to_event(json.loads(p.read_text()), event_of_file(p)) for p in paths]
    assert [ev.event for ev in events] == BASIC
    shell, _, edit, written, stop = events[1:]
    assert (shell.tool_name, shell.detail["nativeToolName"]) == ("Bash", "run_commands")
    assert shell.tool_input == {"command": "echo hi > f.txt; echo shell-done"}
    assert shell.detail["nativeToolInput"] == {"commands": ["echo hi > f.txt; echo shell-done"]}
    assert shell.tool_call_id == "call_mock003cdc6c3b" and shell.event_id
    assert "preToolUse" not in shell.detail  # the restatement of the call is not kept
    assert (edit.tool_name, edit.detail["nativeToolName"]) == ("Write", "editor")
    assert edit.tool_input == {
        "file_path": "<WORK>/cline/work/basic/proj/hello.txt",
        "content": "hello from editor\n",
    }
    assert written.tool_response["success"] is True and written.duration_ms == 5
    assert stop.last_assistant_message == "All done: ran a shell command and wrote hello.txt."
    end = cline_payload_to_event(fixture("deny_json", "03-SessionShutdown.json"), "SessionShutdown")
    assert end.event == "SessionEnd"
    with pytest.raises(ValueError, match="needs its event"):
        cline_payload_to_event({"taskId": "t"})
    assert runtime_for("cline") is RUNTIMES["cline"]
    # Learned content goes with the first iteration's tool results, the first place the
    # model reads an answer: not at TaskStart (detached), not on later iterations.
    assert [takes_learned(ev) for ev in events] == [False, False, True, False, False, False]


def test_failures_resumes_prompts_and_spawned_agents() -> None:
    base = fixture("basic", "03-PostToolUse.json")
    failed = {**base, "tool_result": {**base["tool_result"], "error": "exit 1"}}
    ev = cline_payload_to_event(failed, "PostToolUse")
    assert (ev.event, ev.error) == ("PostToolUseFailure", "exit 1")
    start = fixture("basic", "01-TaskStart.json")
    resumed = cline_payload_to_event(start, "TaskResume")
    assert (resumed.event, resumed.detail["source"]) == ("SessionStart", "resume")
    prompt = {**start, "hookName": "prompt_submit", "userPromptSubmit": {"prompt": "fix it"}}
    assert cline_payload_to_event(prompt, "UserPromptSubmit").prompt == "fix it"
    cancel = cline_payload_to_event({**start, "reason": "user abort"}, "TaskCancel")
    assert (cancel.event, cancel.error, cancel.is_interrupt) == ("StopFailure", "user abort", True)
    error = {**start, "error": {"name": "Error", "message": "401", "stack": "…"}}
    assert cline_payload_to_event(error, "TaskError").error == "401"
    child = {**start, "agent_id": "agent_2", "parent_agent_id": "agent_1"}
    spawned = cline_payload_to_event(child, "TaskStart")
    assert spawned.subagent_id == "agent_2"
    assert spawned.agent_session_id == start["sessionContext"]["rootSessionId"]


ABORTS = (
    "Cline cannot refuse one call: answered cancel=true, which keeps the call from running "
    "and aborts the whole run; the model does not see the reason"
)


@pytest.mark.parametrize(
    ("event", "decision", "answer", "note"),
    [
        ("PreToolUse", Decision("pass"), {}, None),
        (
            "PreToolUse",
            Decision("deny", "no", additional_context="ctx"),
            {"cancel": True, "errorMessage": "no"},
            f"{ABORTS}; additionalContext dropped: Cline does not read it on PreToolUse",
        ),
        (
            "PreToolUse",
            Decision("modify", replacement={"command": "ls"}),
            {"cancel": False, "overrideInput": {"commands": ["ls"]}},
            None,
        ),
        (
            "PreToolUse",
            Decision("pass", additional_context="ctx"),
            {"contextModification": "ctx"},
            None,
        ),
        (
            "PostToolUse",
            Decision("pass", additional_context="ctx"),
            {"contextModification": "ctx"},
            None,
        ),
        (
            "SessionStart",
            Decision("pass", additional_context="ctx"),
            {},
            "additionalContext dropped: Cline does not read it on SessionStart",
        ),
        (
            "UserPromptSubmit",
            Decision("deny", "no"),
            {},
            "UserPromptSubmit deny is not applied by Cline (it does not read this answer)",
        ),
    ],
)
def test_decisions_render_in_clines_format(
    event: str, decision: Decision, answer: dict[str, Any], note: str | None
) -> None:
    assert decision_to_cline(event, decision) == (answer, note)


def test_a_rewrite_goes_back_into_clines_fields() -> None:
    assert native_input({"file_path": "a", "content": "x"}) == {"path": "a", "new_text": "x"}
    edit = {"file_path": "a", "old_string": "x", "new_string": "y"}
    assert native_input(edit) == {"path": "a", "old_text": "x", "new_text": "y"}
    assert native_input({"commands": ["ls"]}) == {"commands": ["ls"]}
    assert native_input({"patch": "*** Begin Patch"}) == {"input": "*** Begin Patch"}


@pytest.fixture
def cline_client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


def test_the_route_records_a_whole_run(cline_client: TestClient) -> None:
    position = "0"
    for path in sorted((FIXTURES / "basic").glob("*.json")):
        route = f"/hooks/cline/{event_of_file(path)}"
        response = cline_client.post(route, json=json.loads(path.read_text()))
        assert response.status_code == 200, response.text
        assert response.json() == {}
        position = response.headers.get("x-tachograph-position", position)
    native = fixture("basic", "01-TaskStart.json")["sessionContext"]["rootSessionId"]
    session_id = str(agent_session_uuid(f"cline:{native}"))
    params = {"minPosition": position}
    hooks = cline_client.get(f"/api/sessions/{session_id}/hooks", params=params).json()
    assert [r["event"] for r in hooks["items"]] == BASIC
    body = cline_client.get(f"/api/sessions/{session_id}", params=params).json()
    assert (body["agent"], body["agentSessionId"]) == ("cline", native)


def test_the_command_hook_fails_closed_in_clines_format(tmp_path: Path) -> None:
    env = {"TACHOGRAPH_URL": URL, "TACHOGRAPH_HOOK_LOG": str(tmp_path / "l")}
    out = io.StringIO()
    payload = json.dumps(fixture("basic", "02-PreToolUse.json"))
    run_command_hook(
        "cline", "PreToolUse", stdin=io.StringIO(payload), stdout=out, env=env, fail_closed=True
    )
    assert json.loads(out.getvalue()) == {"cancel": True, "errorMessage": FAIL_CLOSED_REASON}
    out = io.StringIO()
    run_command_hook(
        "cline", "TaskStart", stdin=io.StringIO(payload), stdout=out, env=env, fail_closed=True
    )
    assert out.getvalue() == ""  # not a gate: nothing to deny


def test_install_writes_an_executable_per_event_beside_the_users_own(tmp_path: Path) -> None:
    hooks = tmp_path / ".cline" / "hooks"
    hooks.mkdir(parents=True)
    mine = hooks / "PreToolUse"
    mine.write_text("#!/bin/sh\necho '{}'\n")
    argv = ["hook", "install", "cline", str(tmp_path), "--url", URL, "--fail-closed"]
    assert cli_main(argv) == 0
    assert mine.read_text() == "#!/bin/sh\necho '{}'\n"  # never touched
    found = {event: path for event, path, _ in own_hooks(tmp_path)}
    assert set(found) == set(INSTALLED_EVENTS)
    assert found["PreToolUse"].name == "PreToolUse.sh"  # the user's name was taken
    assert found["TaskStart"].name == "TaskStart"
    lines = found["PreToolUse"].read_text().splitlines()
    assert lines[:2] == ["#!/bin/sh", MARKER]
    assert shlex.split(lines[2])[-3:] == ["cline", "PreToolUse", "--fail-closed"]
    assert found["PreToolUse"].stat().st_mode & 0o111
    [wait] = installed_waits(tmp_path)  # the held event, waiting less than Cline's 120 s
    assert wait.event == "PreToolUse" and 0 < wait.waits_s <= 110
    # A re-install replaces Tachograph's files in place; uninstall removes only them.
    assert cli_main(argv[:-1]) == 0
    assert "--fail-closed" not in found["PreToolUse"].read_text()
    assert cli_main(["hook", "uninstall", "cline", str(tmp_path)]) == 0
    assert sorted(p.name for p in hooks.iterdir()) == ["PreToolUse"]


def test_install_refuses_when_both_names_are_the_users(tmp_path: Path) -> None:
    hooks = tmp_path / ".cline" / "hooks"
    hooks.mkdir(parents=True)
    for name in ("TaskStart", "TaskStart.sh"):
        (hooks / name).write_text("#!/bin/sh\n")
    assert cli_main(["hook", "install", "cline", str(tmp_path), "--url", URL]) == 1
    assert sorted(p.name for p in hooks.iterdir()) == ["TaskStart", "TaskStart.sh"]
