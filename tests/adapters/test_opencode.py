"""OpenCode and Kilo adapter (§6.5): the captured plugin hooks mapped (tools and their
fields under Claude Code's names), the answers Tachograph's plugin applies with what
OpenCode cannot do said in the note, the routes, and `hook install|uninstall opencode|kilo`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from api.app import create_app
from cli.hook_waits import installed_plugin_settings, installed_waits
from cli.main import main as cli_main
from cli.opencode_plugin import KILO, OPENCODE, PluginRuntime, sdk_start_up_wait
from domain.hook_dispatch import Decision
from domain.lifecycle import agent_session_uuid
from infra.settings import Settings
from ingest.runtimes.claude_code import HookPayloadError
from ingest.runtimes.opencode import decision_to_opencode, opencode_payload_to_event
from ingest.runtimes.runtimes import RUNTIMES

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURES = sorted((FIXTURES / "opencode" / "basic").glob("*.json")) + sorted(
    (FIXTURES / "kilo" / "basic").glob("*.json")
)
RECORDED = [
    "SessionStart",
    "UserPromptSubmit",
    "PreToolUse",
    "PostToolUse",
    "PreToolUse",
    "PostToolUse",
    "Stop",
]


def body(path: Path) -> dict[str, Any]:
    """A capture as the plugin posts it: bus events under the `event` hook."""
    capture = json.loads(path.read_text())
    hook = "event" if capture["hook"].startswith("event.") else capture["hook"]
    return {"hook": hook, "input": capture["input"], "output": capture["output"]}


def captured(runtime: str, name: str) -> dict[str, Any]:
    return body(FIXTURES / runtime / "basic" / name)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parents[1].name}/{p.name}")
def test_every_capture_maps_under_its_agent_and_native_session(path: Path) -> None:
    runtime = path.parents[1].name
    ev = RUNTIMES[runtime].to_event(body(path), None)
    assert ev is not None
    assert ev.agent == runtime
    assert ev.agent_session_id is not None and ev.agent_session_id.startswith("ses_")


def test_a_shell_call_is_a_bash_call_named_by_the_models_id() -> None:
    ev = opencode_payload_to_event(captured("opencode", "071-tool.execute.before.json"))
    assert ev is not None
    assert (ev.event, ev.tool_name, ev.tool_call_id) == (
        "PreToolUse",
        "Bash",
        "call_mock00f989ac9a",
    )
    assert ev.tool_input == {
        "command": "echo hi > f.txt; echo shell-done",
        "description": "Write hi to f.txt",
    }
    assert ev.detail["nativeToolName"] == "bash"
    assert ev.event_id == f"opencode:{ev.agent_session_id}:PreToolUse:call_mock00f989ac9a"
    post = opencode_payload_to_event(captured("opencode", "073-tool.execute.after.json"))
    assert post is not None and (post.event, post.tool_call_id) == ("PostToolUse", ev.tool_call_id)
    assert post.tool_response["output"] == "shell-done\n"


def test_a_file_write_is_a_write_call_in_claude_codes_fields() -> None:
    ev = opencode_payload_to_event(captured("opencode", "085-tool.execute.before.json"))
    assert ev is not None and ev.tool_name == "Write"
    assert ev.tool_input == {
        "file_path": "<WORK>/opencode/work/basic/proj/hello.txt",
        "content": "hello from write\n",
    }
    other = opencode_payload_to_event(
        {
            "hook": "tool.execute.before",
            "input": {"tool": "lsp_hover", "sessionID": "s"},
            "output": {"args": {"filePath": "a"}},
        }
    )
    assert other is not None and other.tool_name == "lsp_hover"
    assert "nativeToolName" not in other.detail


def test_the_prompt_the_session_and_its_end() -> None:
    start = opencode_payload_to_event(captured("opencode", "003-event.session.created.json"))
    assert start is not None and start.event == "SessionStart"
    assert start.cwd == "<WORK>/opencode/work/basic/proj"
    prompt = opencode_payload_to_event(captured("opencode", "005-chat.message.json"))
    assert prompt is not None and prompt.event == "UserPromptSubmit"
    assert prompt.prompt == '"Run a shell command, then write hello.txt."'
    assert (prompt.model, prompt.turn_id) == ("mock/mock-model", "msg_23c6931dc001AbHpam4TVE69LE")
    idle = {**captured("opencode", "106-event.session.idle.json"), "lastAssistantMessage": "Done."}
    stop = opencode_payload_to_event(idle)
    assert stop is not None and (stop.event, stop.last_assistant_message) == ("Stop", "Done.")


def test_events_not_recorded_and_bad_bodies() -> None:
    status = {
        "hook": "event",
        "input": {"type": "session.status", "properties": {"sessionID": "s"}},
    }
    assert opencode_payload_to_event(status) is None
    assert opencode_payload_to_event({"hook": "chat.params", "input": {}}) is None
    with pytest.raises(ValueError, match="JSON object"):
        opencode_payload_to_event([1])
    with pytest.raises(ValueError, match="non-empty hook"):
        opencode_payload_to_event({"input": {}})


@pytest.mark.parametrize(
    ("event", "decision", "answer", "note"),
    [
        ("PreToolUse", Decision("pass"), {}, None),
        ("PreToolUse", Decision("deny", "no rm"), {"deny": "no rm"}, None),
        (
            "PreToolUse",
            Decision("deny", "no", additional_context="ctx"),
            {"deny": "no\n\nctx"},
            None,
        ),
        (
            "PreToolUse",
            Decision("modify", replacement={"file_path": "b", "old_string": "x"}),
            {"args": {"filePath": "b", "oldString": "x"}},
            None,
        ),
        ("PostToolUse", Decision("pass", additional_context="ctx"), {"context": "ctx"}, None),
        ("SessionStart", Decision("pass", additional_context="rules"), {"context": "rules"}, None),
        ("UserPromptSubmit", Decision("deny", "frozen"), {"deny": "frozen"}, None),
        (
            "Stop",
            Decision("continue", "run the tests"),
            {},
            "Stop has no decision control in OpenCode; continue answered as pass",
        ),
    ],
)
def test_decisions_render_as_the_plugin_applies_them(
    event: str, decision: Decision, answer: dict[str, Any], note: str | None
) -> None:
    assert decision_to_opencode(event, decision) == (answer, note)


def test_a_prompt_rewrite_it_cannot_apply_is_a_refusal_naming_the_replacement() -> None:
    answer, note = decision_to_opencode("UserPromptSubmit", Decision("modify", replacement="hi"))
    assert answer["deny"].endswith("Replacement prompt:\nhi")
    assert note and "not applied by OpenCode" in note


# --- the routes --------------------------------------------------------------------------


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        yield client


@pytest.mark.parametrize("runtime", ["opencode", "kilo"])
def test_the_route_records_a_whole_run(client: TestClient, runtime: str) -> None:
    position = "0"
    paths = sorted((FIXTURES / runtime / "basic").glob("*.json"))
    for path in paths:
        response = client.post(f"/hooks/{runtime}", json=body(path))
        assert response.status_code == 200, response.text
        assert response.json() == {}
        position = response.headers.get("x-tachograph-position", position)
    native = body(paths[0])["input"]["properties"]["sessionID"]
    session_id = str(agent_session_uuid(f"{runtime}:{native}"))
    params = {"minPosition": position}
    hooks = client.get(f"/api/sessions/{session_id}/hooks", params=params).json()["items"]
    assert [r["event"] for r in hooks] == RECORDED
    detail = client.get(f"/api/sessions/{session_id}", params=params).json()
    assert (detail["agent"], detail["agentSessionId"]) == (runtime, native)
    timeline = client.get(f"/api/sessions/{session_id}/timeline", params=params).json()
    assert [c["tool"] for turn in timeline["items"] for c in turn["calls"]] == ["Bash", "Write"]
    # A status event of the bus is answered but not recorded.
    status = {
        "hook": "event",
        "input": {"type": "session.status", "properties": {"sessionID": native}},
    }
    assert client.post(f"/hooks/{runtime}", json=status).json() == {}
    assert client.post(f"/hooks/{runtime}", json={"input": {}}).status_code == 422


# --- hook install / uninstall ----------------------------------------------------------

URL = "http://127.0.0.1:9"


@pytest.mark.parametrize("spec", [OPENCODE, KILO], ids=lambda s: s.runtime)
def test_the_cli_writes_its_plugin_beside_the_users_and_removes_only_its_own(
    tmp_path: Path, spec: PluginRuntime, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / spec.config_dir
    (config / "plugin").mkdir(parents=True)
    mine = config / "plugin" / "mine.js"
    mine.write_text("export const Mine = async () => ({})\n")
    install = ["hook", "install", spec.runtime, str(tmp_path), "--url", URL + "/", "--fail-closed"]
    assert cli_main(install) == 0
    assert f"{spec.sdk} is not installed" in capsys.readouterr().out
    assert cli_main(install) == 0  # twice: one plugin, one lock entry
    plugin = spec.path(tmp_path)
    settings = installed_plugin_settings(plugin)
    assert settings is not None
    assert settings["url"] == f"{URL}/hooks/{spec.runtime}" and settings["failClosed"] is True
    # No server answered: a held call is waited for as long as a rule may hold it.
    [wait] = installed_waits(tmp_path)
    assert (wait.runtime, wait.event, wait.waits_s) == (spec.runtime, "tool.execute.before", 615)
    imports = [line for line in plugin.read_text().splitlines() if line.startswith("import ")]
    assert imports and all('from "node:' in line for line in imports)  # no package to install
    # OpenCode skips its SDK install: node_modules exists and the lock lists the SDK.
    lock = json.loads((config / "package-lock.json").read_text())
    assert lock["packages"][""]["dependencies"] == {spec.sdk: "*"}
    assert (config / "node_modules").is_dir()
    assert sdk_start_up_wait(spec, config) is None  # what doctor checks
    assert cli_main(["hook", "install", spec.runtime, str(tmp_path), "--http"]) == 1
    assert cli_main(["hook", "uninstall", spec.runtime, str(tmp_path)]) == 0
    assert not plugin.exists() and mine.exists()
    assert not (config / "package-lock.json").exists() and not (config / "node_modules").exists()
    found = sdk_start_up_wait(spec, config)
    assert found and found.startswith(f"{spec.sdk} is neither installed nor recorded")


def test_an_installed_sdk_and_a_foreign_file_are_left_alone(tmp_path: Path) -> None:
    config = tmp_path / OPENCODE.config_dir
    sdk = config / "node_modules" / "@opencode-ai" / "plugin"
    sdk.mkdir(parents=True)
    (sdk / "package.json").write_text("{}")
    assert cli_main(["hook", "install", "opencode", str(tmp_path), "--url", URL]) == 0
    assert not (config / "package-lock.json").exists()
    OPENCODE.path(tmp_path).write_text("// someone else's\n")
    assert cli_main(["hook", "install", "opencode", str(tmp_path), "--url", URL]) == 1
    assert OPENCODE.path(tmp_path).read_text() == "// someone else's\n"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_HOOKS = st.sampled_from(["event", "chat.message", "tool.execute.before", "tool.execute.after"])


@given(
    hook=_HOOKS,
    given_=st.dictionaries(
        st.sampled_from(["sessionID", "tool", "callID", "args", "type", "properties"]), _JSON
    ),
    produced=st.dictionaries(st.sampled_from(["args", "parts", "message"]), _JSON),
)
@examples(max_examples=200, deadline=None)
def test_any_body_the_plugin_might_post_maps_or_is_refused(
    hook: str, given_: dict[str, Any], produced: dict[str, Any]
) -> None:
    """Whatever a hook hands the plugin, the adapter maps it or refuses it cleanly, never fails."""
    try:
        ev = opencode_payload_to_event({"hook": hook, "input": given_, "output": produced})
    except HookPayloadError:
        return
    if ev is not None:
        assert ev.agent == "opencode"
        assert ev.tool_input is None or isinstance(ev.tool_input, dict)
