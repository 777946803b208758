"""Gemini CLI adapter (§6.5): every captured payload mapped field by field, the answers in
Gemini CLI's format, the route, and `tachograph hook install|uninstall gemini <dir>`."""

from __future__ import annotations

import copy
import io
import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from cli.hook_files import HookFileError
from cli.main import main as cli_main
from cli.runtime_hooks import GEMINI as GEMINI_FILE
from cli.runtime_hooks import GEMINI_HOOK_ENV, install_nested, nested_spec, uninstall_nested
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from hook_client.command import FAIL_CLOSED_REASON, run_command_hook
from infra.settings import Settings, SettingsError
from ingest.runtimes.gemini_cli import (
    AGENT,
    MODEL_EVENTS_STORE,
    decision_to_gemini,
    gemini_payload_to_event,
)
from ingest.runtimes.runtimes import GEMINI, GEMINI_STORING_MODEL_EVENTS, RUNTIMES, runtime_for
from tests.adapters.event_fields import wire_fields

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "gemini"
SCENARIOS = ("basic", "deny_json", "modify", "fail401")
ALL = sorted(p for s in SCENARIOS for p in (FIXTURES / s).glob("*.json"))
MODEL_CALL = {"BeforeModel", "AfterModel", "BeforeToolSelection"}
URL = "http://127.0.0.1:8000"


def load(path: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(path.read_text())
    return payload


def fixture(scenario: str, name: str) -> dict[str, Any]:
    return load(FIXTURES / scenario / name)


def base_detail(payload: dict[str, Any]) -> dict[str, Any]:
    return {"transcriptPath": payload["transcript_path"], "timestamp": payload["timestamp"]}


def test_the_captures_are_all_there() -> None:
    assert len(ALL) == 20 + 18 + 19 + 5
    assert {load(p)["hook_event_name"] for p in ALL} == {
        "SessionStart",
        "BeforeAgent",
        "PreCompress",
        "BeforeModel",
        "BeforeToolSelection",
        "AfterModel",
        "BeforeTool",
        "AfterTool",
        "AfterAgent",
        "SessionEnd",
    }


def expected_fields(payload: dict[str, Any]) -> dict[str, Any] | None:
    """What every captured payload must become, written out per event."""
    native = payload["hook_event_name"]
    common = {"agent": AGENT, "agentSessionId": payload["session_id"]}
    detail = base_detail(payload)
    cwd = {"cwd": payload["cwd"]}
    if native in MODEL_CALL or native == "PreCompress":
        return None  # model-call events: not recorded by default
    if native == "SessionStart":
        return {"event": "SessionStart", **common, "detail": {**detail, **cwd, "source": "startup"}}
    if native == "BeforeAgent":
        return {
            "event": "UserPromptSubmit",
            **common,
            "prompt": payload["prompt"],
            "detail": {**detail, **cwd},
        }
    if native == "BeforeTool":
        return {
            "event": "PreToolUse",
            **common,
            "toolName": payload["tool_name"],
            "toolInput": payload["tool_input"],
            "detail": {**detail, **cwd},
        }
    if native == "AfterTool":
        return {
            "event": "PostToolUse",
            **common,
            "toolName": payload["tool_name"],
            "toolInput": payload["tool_input"],
            "toolResponse": payload["tool_response"],
            "detail": {**detail, **cwd},
        }
    if native == "AfterAgent":
        return {
            "event": "Stop",
            **common,
            "prompt": payload["prompt"],
            "lastAssistantMessage": payload["prompt_response"],
            "detail": {**detail, **cwd, "stopHookActive": False},
        }
    if native == "SessionEnd":
        return {"event": "SessionEnd", **common, "detail": {**detail, **cwd, "reason": "exit"}}
    raise AssertionError(native)


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_maps_field_by_field(path: Path) -> None:
    payload = load(path)
    ev = gemini_payload_to_event(payload)
    expected = expected_fields(payload)
    if expected is None:
        assert ev is None
        return
    assert ev is not None
    assert wire_fields(ev) == expected
    # No id of any kind: Gemini CLI sends none, and nothing in a payload is unique.
    assert ev.event_id is None and ev.tool_call_id is None and ev.turn_id is None


def test_the_event_named_by_the_registration_wins_and_normalised_names_pass() -> None:
    payload = fixture("basic", "07-BeforeTool.json")
    ev = gemini_payload_to_event({**payload, "hook_event_name": "Whatever"}, "BeforeTool")
    assert ev is not None and ev.event == "PreToolUse"
    assert gemini_payload_to_event(payload, "PreToolUse").event == "PreToolUse"  # type: ignore[union-attr]
    unknown = gemini_payload_to_event({**payload, "hook_event_name": "BeforeTeaBreak"})
    assert unknown is not None and unknown.event == "BeforeTeaBreak"  # observational


def test_identical_payloads_are_two_events_never_one() -> None:
    payload = fixture("basic", "07-BeforeTool.json")
    first, second = gemini_payload_to_event(payload), gemini_payload_to_event(payload)
    assert first == second and first is not None and first.event_id is None


def test_a_prompt_keeps_only_the_users_words_not_the_session_start_context() -> None:
    # Gemini CLI 0.61 in -p mode puts a SessionStart hook's context before the prompt.
    [name] = [p.name for p in (FIXTURES / "basic").glob("*-BeforeAgent.json")]
    payload = fixture("basic", name)
    wrapped = {
        **payload,
        "prompt": "<hook_context>Follow the style guide.\nLine two.</hook_context>\n\n"
        + payload["prompt"],
    }
    ev = gemini_payload_to_event(wrapped)
    assert ev is not None and ev.prompt == payload["prompt"]
    only_context = {**payload, "prompt": "<hook_context>x</hook_context>"}
    kept = gemini_payload_to_event(only_context)
    assert kept is not None and kept.prompt == "<hook_context>x</hook_context>"


def test_a_failed_tool_is_a_post_tool_use_failure() -> None:
    payload = fixture("basic", "08-AfterTool.json")
    failed = {
        **payload,
        "tool_response": {
            "llmContent": "Error: exit 3",
            "returnDisplay": "exit 3",
            "error": {"message": "Command exited with code 3", "type": "execution_failed"},
        },
    }
    ev = gemini_payload_to_event(failed)
    assert ev is not None
    assert (ev.event, ev.error) == ("PostToolUseFailure", "Command exited with code 3")


def test_model_events_are_stored_only_when_configured() -> None:
    before_model = fixture("basic", "04-BeforeModel.json")
    after_model = fixture("basic", "18-AfterModel.json")
    auto = fixture("basic", "03-PreCompress.json")
    for payload in (
        before_model,
        after_model,
        auto,
        fixture("basic", "05-BeforeToolSelection.json"),
    ):
        assert gemini_payload_to_event(payload) is None
        assert GEMINI.to_event(payload, None) is None
    stored = gemini_payload_to_event(before_model, model_events=MODEL_EVENTS_STORE)
    assert stored is not None
    assert (stored.event, stored.model) == ("BeforeModel", "gemini-2.5-pro")
    assert "llmRequest" not in stored.detail  # the whole request is never carried along
    answered = GEMINI_STORING_MODEL_EVENTS.to_event(after_model, "AfterModel")
    assert answered is not None and "llmResponse" not in answered.detail
    compact = GEMINI_STORING_MODEL_EVENTS.to_event(auto, "PreCompress")
    assert compact is not None and compact.event == "PreCompact"
    # A manual /compress does compact: always recorded.
    manual = gemini_payload_to_event({**auto, "trigger": "manual"})
    assert manual is not None and manual.event == "PreCompact"
    assert manual.detail["trigger"] == "manual"


def test_the_server_picks_the_adapter_from_its_settings() -> None:
    assert runtime_for("gemini") is GEMINI is RUNTIMES["gemini"]
    assert runtime_for("gemini", gemini_model_events="store") is GEMINI_STORING_MODEL_EVENTS
    assert runtime_for("codex", gemini_model_events="store") is RUNTIMES["codex"]
    assert Settings.from_env({}).gemini_model_events == "drop"
    assert Settings.from_env({"TACHOGRAPH_GEMINI_MODEL_EVENTS": "Store"}).gemini_model_events == (
        "store"
    )
    with pytest.raises(SettingsError, match="TACHOGRAPH_GEMINI_MODEL_EVENTS"):
        Settings.from_env({"TACHOGRAPH_GEMINI_MODEL_EVENTS": "all"})


def test_payloads_that_are_not_gemini_hooks_are_refused() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        gemini_payload_to_event([1])
    with pytest.raises(ValueError, match="hook_event_name"):
        gemini_payload_to_event({"session_id": "s"})


# --- answers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "decision", "answer", "note"),
    [
        ("PreToolUse", Decision("pass"), {}, None),
        (
            "PreToolUse",
            Decision("deny", "no rm"),
            {"decision": "deny", "reason": "no rm"},
            None,
        ),
        (
            "PreToolUse",
            Decision("modify", replacement={"command": "ls", "description": "list"}),
            {
                "hookSpecificOutput": {
                    "hookEventName": "BeforeTool",
                    "tool_input": {"command": "ls", "description": "list"},
                }
            },
            None,
        ),
        (
            "PreToolUse",
            Decision("modify", replacement="ls"),
            {"decision": "deny", "reason": "Denied by Tachograph policy."},
            "PreToolUse modify without a JSON object replacement answered as deny",
        ),
        (
            "UserPromptSubmit",
            Decision("deny", "off topic"),
            {"decision": "deny", "reason": "off topic"},
            None,
        ),
        (
            "Stop",
            Decision("continue", "run the tests first"),
            {"decision": "block", "reason": "run the tests first"},
            None,
        ),
        (
            "Stop",
            Decision("deny", "policy-handler failed (closed)"),
            {"decision": "block", "reason": "policy-handler failed (closed)"},
            None,
        ),
        (
            "SessionStart",
            Decision("pass", additional_context="repo rules"),
            {
                "hookSpecificOutput": {
                    "hookEventName": "SessionStart",
                    "additionalContext": "repo rules",
                }
            },
            None,
        ),
        (
            "UserPromptSubmit",
            Decision("pass", additional_context="ctx"),
            {"hookSpecificOutput": {"hookEventName": "BeforeAgent", "additionalContext": "ctx"}},
            None,
        ),
        (
            "PostToolUse",
            Decision("pass", additional_context="ctx"),
            {"hookSpecificOutput": {"hookEventName": "AfterTool", "additionalContext": "ctx"}},
            None,
        ),
        (
            "PreToolUse",
            Decision("deny", "no", additional_context="ctx"),
            {"decision": "deny", "reason": "no\n\nctx"},
            None,
        ),
        (
            "PreToolUse",
            Decision("pass", additional_context="ctx"),
            {},
            "additionalContext dropped: Gemini CLI does not read it on PreToolUse",
        ),
        (
            "Notification",
            Decision("deny", "x"),
            {},
            "Notification has no decision control in Gemini CLI; deny answered as pass",
        ),
        (
            "PreToolUse",
            Decision("sideways"),  # type: ignore[arg-type]
            {"decision": "deny", "reason": "Denied by Tachograph policy."},
            "unknown outcome 'sideways' treated as deny",
        ),
    ],
)
def test_decisions_render_in_gemini_format(
    event: str, decision: Decision, answer: dict[str, Any], note: str | None
) -> None:
    assert decision_to_gemini(event, decision) == (answer, note)


def test_a_prompt_rewrite_is_denied_with_the_replacement_in_the_reason() -> None:
    answer, note = decision_to_gemini(
        "UserPromptSubmit", Decision("modify", "why", None, "be nice")
    )
    assert answer["decision"] == "deny"
    assert answer["reason"].startswith("why\n\n") and answer["reason"].endswith("be nice")
    assert note is not None and "not expressible" in note


# --- the route --------------------------------------------------------------------------


@pytest.fixture
def gemini_client(request: pytest.FixtureRequest, settings: Settings) -> Iterator[TestClient]:
    configured = settings.with_(gemini_model_events=getattr(request, "param", "drop"))
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def post_all(client: TestClient, scenario: str) -> str:
    position = "0"
    for path in sorted((FIXTURES / scenario).glob("*.json")):
        payload = load(path)
        native = payload["hook_event_name"]
        response = client.post(f"/hooks/gemini/{native}", json=payload)
        assert response.status_code == 200, response.text
        assert response.json() == {}
        position = response.headers.get("x-tachograph-position", position)
    return position


def hook_events(client: TestClient, session_id: str, position: str) -> list[str]:
    answer = client.get(f"/api/sessions/{session_id}/hooks", params={"minPosition": position})
    assert answer.json()["sortedBy"] == "position"
    return [r["event"] for r in answer.json()["items"]]


def test_the_route_records_a_whole_run_without_the_model_events(gemini_client: TestClient) -> None:
    position = post_all(gemini_client, "basic")
    native = fixture("basic", "01-SessionStart.json")["session_id"]
    session_id = str(agent_session_uuid(f"gemini-cli:{native}"))
    assert hook_events(gemini_client, session_id, position) == [
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SessionEnd",
    ]
    session = gemini_client.get(f"/api/sessions/{session_id}", params={"minPosition": position})
    body = session.json()
    assert (body["agent"], body["agentSessionId"]) == ("gemini-cli", native)
    assert body["title"] == "Run a shell command, then write hello.txt."
    assert body["summary"] == "All done: ran a shell command and wrote hello.txt."
    assert body["status"] == "ended"


@pytest.mark.parametrize("gemini_client", ["store"], indirect=True)
def test_the_route_stores_model_events_when_configured(gemini_client: TestClient) -> None:
    position = post_all(gemini_client, "fail401")
    native = fixture("fail401", "01-SessionStart.json")["session_id"]
    session_id = str(agent_session_uuid(f"gemini-cli:{native}"))
    assert hook_events(gemini_client, session_id, position) == [
        "SessionStart",
        "UserPromptSubmit",
        "PreCompact",
        "BeforeModel",
        "BeforeToolSelection",
    ]


# --- the command hook -------------------------------------------------------------------


def test_the_command_hook_fails_closed_in_gemini_format(tmp_path: Path) -> None:
    env = {
        "TACHOGRAPH_URL": "http://127.0.0.1:9",
        "TACHOGRAPH_HOOK_LOG": str(tmp_path / "hooks.log"),
    }

    def relay(name: str, event: str) -> str:
        out = io.StringIO()
        payload = json.dumps(fixture("basic", name))
        run_command_hook(
            "gemini", event, stdin=io.StringIO(payload), stdout=out, env=env, fail_closed=True
        )
        return out.getvalue()

    assert json.loads(relay("07-BeforeTool.json", "BeforeTool")) == {
        "decision": "deny",
        "reason": FAIL_CLOSED_REASON,
    }
    assert json.loads(relay("02-BeforeAgent.json", "BeforeAgent"))["decision"] == "deny"
    assert json.loads(relay("19-AfterAgent.json", "AfterAgent"))["decision"] == "block"
    assert relay("08-AfterTool.json", "AfterTool") == ""  # observational: open
    assert relay("04-BeforeModel.json", "BeforeModel") == ""
    assert len((tmp_path / "hooks.log").read_text().splitlines()) == 5


# --- install / uninstall ----------------------------------------------------------------

USER_SETTINGS: dict[str, Any] = {
    "security": {
        "auth": {"selectedType": "gemini-api-key"},
        "environmentVariableRedaction": {"enabled": True, "allowed": ["MY_VAR"]},
    },
    "general": {"enableAutoUpdate": False},
    "hooks": {
        "BeforeTool": [
            {
                "matcher": "run_shell_command",
                "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5000}],
            }
        ],
        "AfterModel": [{"hooks": [{"type": "command", "command": "log-model"}]}],
    },
}


def settings_file(home: Path) -> Path:
    return home / ".gemini" / "settings.json"


def own_commands(settings: dict[str, Any]) -> dict[str, list[str]]:
    return {
        event: [
            h["command"]
            for g in groups
            for h in g["hooks"]
            if "hook_client/command.py gemini " in h["command"]
        ]
        for event, groups in settings.get("hooks", {}).items()
    }


def test_install_merges_beside_the_users_hooks_and_settings(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS))
    install_nested(GEMINI_FILE, tmp_path, url=URL + "/", fail_closed=True)
    once = json.loads(path.read_text())
    install_nested(GEMINI_FILE, tmp_path, url=URL, fail_closed=True)
    settings = json.loads(path.read_text())
    assert settings == once  # never duplicated
    assert settings["security"]["auth"] == {"selectedType": "gemini-api-key"}
    assert settings["general"] == {"enableAutoUpdate": False}
    redaction = settings["security"]["environmentVariableRedaction"]
    assert redaction == {"enabled": True, "allowed": ["MY_VAR", *GEMINI_HOOK_ENV]}
    assert "TACHOGRAPH_API_KEY" not in redaction["allowed"]  # never the admin key
    commands = own_commands(settings)
    assert set(commands) == {
        "SessionStart",
        "BeforeAgent",
        "BeforeTool",
        "AfterTool",
        "AfterAgent",
        "Notification",
        "SessionEnd",
        "AfterModel",  # the user's own only
    }
    assert commands["AfterModel"] == []
    for event in ("BeforeTool", "BeforeAgent", "AfterAgent"):
        (command,) = commands[event]
        words = shlex.split(command)
        assert words[0] == f"TACHOGRAPH_URL={URL}"
        # This installation's Python, without site, running the client file by path.
        assert Path(words[1]).is_absolute() and words[2] == "-S"
        assert words[3].endswith("hook_client/command.py") and Path(words[3]).is_absolute()
        assert words[4:] == ["gemini", event, "--fail-closed"]
    assert shlex.split(commands["AfterTool"][0])[4:] == ["gemini", "AfterTool"]
    user_before_tool = settings["hooks"]["BeforeTool"][0]
    assert user_before_tool == USER_SETTINGS["hooks"]["BeforeTool"][0]
    ours = settings["hooks"]["BeforeTool"][1]
    assert ours["matcher"] == "*" and ours["hooks"][0]["timeout"] == 30_000  # milliseconds
    assert not (path.parent / ".gitignore").exists()  # not in a git work tree

    uninstall_nested(GEMINI_FILE, tmp_path)
    assert json.loads(path.read_text()) == USER_SETTINGS  # exactly its own removed


def test_uninstall_of_a_fresh_install_leaves_an_empty_object(tmp_path: Path) -> None:
    path = install_nested(GEMINI_FILE, tmp_path, url=URL, fail_closed=False)
    assert "--fail-closed" not in path.read_text()
    uninstall_nested(GEMINI_FILE, tmp_path)
    assert json.loads(path.read_text()) == {}
    uninstall_nested(GEMINI_FILE, tmp_path)  # twice: nothing to do
    assert json.loads(path.read_text()) == {}


def test_model_events_are_registered_only_when_they_are_stored(tmp_path: Path) -> None:
    spec = nested_spec("gemini", {"TACHOGRAPH_GEMINI_MODEL_EVENTS": "store"})
    install_nested(spec, tmp_path, url=URL, fail_closed=False)
    commands = own_commands(json.loads(settings_file(tmp_path).read_text()))
    assert {"PreCompress", "BeforeModel", "AfterModel", "BeforeToolSelection"} <= set(commands)
    install_nested(nested_spec("gemini", {}), tmp_path, url=URL, fail_closed=False)
    commands = own_commands(json.loads(settings_file(tmp_path).read_text()))
    assert not {"PreCompress", "BeforeModel", "AfterModel", "BeforeToolSelection"} & set(commands)


def test_install_in_a_git_work_tree_writes_a_self_ignoring_gitignore(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    path = install_nested(GEMINI_FILE, repo, url=URL, fail_closed=False)
    ignore = path.parent / ".gitignore"
    assert ignore.read_text().splitlines() == ["settings.json", ".gitignore"]
    install_nested(GEMINI_FILE, repo, url=URL, fail_closed=False)
    assert ignore.read_text().splitlines() == ["settings.json", ".gitignore"]
    status = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert status.stdout == ""


def test_a_malformed_file_is_left_untouched(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir()
    for text in ("{not json", json.dumps({"hooks": []}), json.dumps({"hooks": {"BeforeTool": {}}})):
        path.write_text(text)
        with pytest.raises(HookFileError):
            install_nested(GEMINI_FILE, tmp_path, url=URL, fail_closed=False)
        assert path.read_text() == text
    odd = {"security": {"environmentVariableRedaction": "on"}}
    path.write_text(json.dumps(odd))
    install_nested(GEMINI_FILE, tmp_path, url=URL, fail_closed=False)  # left as it is
    assert json.loads(path.read_text())["security"] == odd["security"]


def test_the_cli_installs_and_uninstalls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["hook", "install", "gemini", str(tmp_path), "--url", URL]) == 0
    settings = json.loads(settings_file(tmp_path).read_text())
    assert "SessionStart" in own_commands(settings)
    assert cli_main(["hook", "install", "gemini", str(tmp_path), "--http"]) == 1
    before = copy.deepcopy(settings)
    assert json.loads(settings_file(tmp_path).read_text()) == before
    assert cli_main(["hook", "uninstall", "gemini", str(tmp_path)]) == 0
    assert json.loads(settings_file(tmp_path).read_text()) == {}
    assert "command hooks only" in capsys.readouterr().err
