"""`tachograph hook install|uninstall claude <dir>`: merging into settings.local.json (§6.5)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli.claude_settings import (
    ClaudeSettingsError,
    install_claude_hooks,
    is_own_entry,
    uninstall_claude_hooks,
)
from cli.main import main as cli_main
from cli.runtime_hooks import hook_command
from ingest.runtimes.claude_code import FAIL_CLOSED_EVENTS, INSTALLED_EVENTS, NORMALISED_EVENTS

URL = "http://127.0.0.1:8000"

USER_SETTINGS: dict[str, Any] = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]},
        ],
        "Stop": [
            {
                "hooks": [
                    {"type": "command", "command": "say done"},
                    {"type": "http", "url": "https://hooks.example.com/stop"},
                ]
            }
        ],
        "PermissionRequest": [{"matcher": "", "hooks": []}],
    },
    "env": {"FOO": "1"},
}


def previous_release_entry(event: str, url: str = URL) -> dict[str, Any]:
    """A handler exactly as the release before agent tokens wrote it with `--http`."""
    if event == "SessionStart":
        return {
            "type": "command",
            "command": f"TACHOGRAPH_URL={url} tachograph hook claude {event}",
        }
    return {
        "type": "http",
        "url": url + "/hooks/claude",
        "headers": {
            "x-tachograph-key": "$TACHOGRAPH_API_KEY",
            "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
            "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
        },
        "allowedEnvVars": ["TACHOGRAPH_API_KEY", "TACHOGRAPH_SESSION_ID", "TACHOGRAPH_WORKSPACE"],
    }


def with_previous_release_hooks(user_settings: dict[str, Any]) -> dict[str, Any]:
    """User settings plus a previous release's `hook install claude --http`."""
    settings = copy.deepcopy(user_settings)
    hooks = settings.setdefault("hooks", {})
    for event in NORMALISED_EVENTS:
        hooks.setdefault(event, []).append(
            {"matcher": "*", "hooks": [previous_release_entry(event)]}
        )
    return settings


def settings_file(project: Path) -> Path:
    return project / ".claude" / "settings.local.json"


def write_settings(project: Path, settings: object) -> Path:
    path = settings_file(project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=4), encoding="utf-8")
    return path


def read_settings(project: Path) -> dict[str, Any]:
    data = json.loads(settings_file(project).read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def own_handlers(settings: dict[str, Any], event: str) -> list[dict[str, Any]]:
    return [
        handler
        for group in settings["hooks"].get(event, [])
        for handler in group["hooks"]
        if is_own_entry(handler)
    ]


def test_install_creates_the_file_with_one_pinned_command_hook_per_event(tmp_path: Path) -> None:
    path = install_claude_hooks(tmp_path, http=False, url=URL)

    assert path == settings_file(tmp_path)
    settings = read_settings(tmp_path)
    assert list(settings) == ["hooks"]
    # The normalised events, then those Claude Code fires beyond them (observational).
    assert list(settings["hooks"]) == list(INSTALLED_EVENTS)
    assert {"PermissionRequest", "PostToolBatch", "MessageDisplay"} <= set(INSTALLED_EVENTS)
    for event in INSTALLED_EVENTS:
        command = hook_command("claude", event, url=URL, fail_closed=False)
        assert settings["hooks"][event] == [
            {"matcher": "*", "hooks": [{"type": "command", "command": command}]}
        ]
        # The URL is pinned and the client runs as a file under this Python with -S.
        assert command.startswith(f"TACHOGRAPH_URL={URL} ")
        assert " -S " in command and command.endswith(f"hook_client/command.py claude {event}")


def test_cli_install_pins_the_url_given_over_the_agents_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TACHOGRAPH_URL", "http://127.0.0.1:9999")

    assert cli_main(["hook", "install", "claude", str(tmp_path), "--url", "http://h:8001/"]) == 0

    [handler] = own_handlers(read_settings(tmp_path), "PreToolUse")
    assert handler["command"].startswith("TACHOGRAPH_URL=http://h:8001 ")


@pytest.mark.parametrize("http", [False, True])
def test_fail_closed_install_makes_the_gates_fail_closed_commands(
    tmp_path: Path, http: bool
) -> None:
    args = ["hook", "install", "claude", str(tmp_path), "--fail-closed"]
    assert cli_main(args + (["--http"] if http else [])) == 0

    settings = read_settings(tmp_path)
    assert {"PreToolUse", "PermissionRequest", "UserPromptSubmit"} <= FAIL_CLOSED_EVENTS
    for event in INSTALLED_EVENTS:
        [handler] = own_handlers(settings, event)
        if event in FAIL_CLOSED_EVENTS:
            # An HTTP hook fails open when Tachograph is down: the gates stay commands.
            assert handler["type"] == "command"
            assert handler["command"].endswith(f"claude {event} --fail-closed")
        elif http and event != "SessionStart":
            assert handler["type"] == "http"
        else:
            assert handler["type"] == "command"
            assert not handler["command"].endswith("--fail-closed")


def test_install_in_a_git_work_tree_ignores_the_file_and_the_ignore(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    ignore = tmp_path / ".claude" / ".gitignore"
    ignore.parent.mkdir()
    ignore.write_text("notes.md\n", encoding="utf-8")

    install_claude_hooks(tmp_path, http=False, url=URL)
    install_claude_hooks(tmp_path, http=True, url=URL)

    assert ignore.read_text(encoding="utf-8").splitlines() == [
        "notes.md",
        "settings.local.json",
        ".gitignore",
    ]


def test_http_install_posts_to_hooks_claude_with_key_and_session_headers(tmp_path: Path) -> None:
    install_claude_hooks(tmp_path, http=True, url="https://tacho.example.com:8443/")

    settings = read_settings(tmp_path)
    assert settings["hooks"]["PreToolUse"] == [
        {
            "matcher": "*",
            "hooks": [
                {
                    "type": "http",
                    "url": "https://tacho.example.com:8443/hooks/claude",
                    "headers": {
                        "x-tachograph-key": "$TACHOGRAPH_AGENT_TOKEN",
                        "x-tachograph-session-id": "$TACHOGRAPH_SESSION_ID",
                        "x-tachograph-workspace": "$TACHOGRAPH_WORKSPACE",
                    },
                    "allowedEnvVars": [
                        "TACHOGRAPH_AGENT_TOKEN",
                        "TACHOGRAPH_SESSION_ID",
                        "TACHOGRAPH_WORKSPACE",
                    ],
                }
            ],
        }
    ]
    for event in INSTALLED_EVENTS:
        if event != "SessionStart":
            assert [h["type"] for h in own_handlers(settings, event)] == ["http"]


def test_http_install_never_lets_claude_code_read_the_admin_key(tmp_path: Path) -> None:
    # Agents hold a narrow agent token; the bootstrap admin key must stay out of their reach.
    install_claude_hooks(tmp_path, http=True, url=URL)

    assert "TACHOGRAPH_API_KEY" not in settings_file(tmp_path).read_text(encoding="utf-8")
    settings = read_settings(tmp_path)
    http_handlers = [
        h for event in INSTALLED_EVENTS for h in own_handlers(settings, event) if "url" in h
    ]
    assert len(http_handlers) == len(INSTALLED_EVENTS) - 1
    for handler in http_handlers:
        assert handler["headers"]["x-tachograph-key"] == "$TACHOGRAPH_AGENT_TOKEN"
        assert "TACHOGRAPH_AGENT_TOKEN" in handler["allowedEnvVars"]


def test_cli_http_install_writes_agent_token_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TACHOGRAPH_URL", "http://127.0.0.1:8123")

    assert cli_main(["hook", "install", "claude", str(tmp_path), "--http"]) == 0

    assert str(settings_file(tmp_path)) in capsys.readouterr().out
    [handler] = own_handlers(read_settings(tmp_path), "Stop")
    assert handler["url"] == "http://127.0.0.1:8123/hooks/claude"
    assert handler["headers"]["x-tachograph-key"] == "$TACHOGRAPH_AGENT_TOKEN"
    assert handler["allowedEnvVars"] == [
        "TACHOGRAPH_AGENT_TOKEN",
        "TACHOGRAPH_SESSION_ID",
        "TACHOGRAPH_WORKSPACE",
    ]


@pytest.mark.parametrize("http", [True, False])
def test_reinstall_over_a_previous_release_install_replaces_it(tmp_path: Path, http: bool) -> None:
    write_settings(tmp_path, with_previous_release_hooks(USER_SETTINGS))

    install_claude_hooks(tmp_path, http=http, url=URL)

    text = settings_file(tmp_path).read_text(encoding="utf-8")
    assert "TACHOGRAPH_API_KEY" not in text
    for event in INSTALLED_EVENTS:
        assert len(own_handlers(read_settings(tmp_path), event)) == 1
    fresh = tmp_path / "fresh"
    write_settings(fresh, USER_SETTINGS)
    assert text == install_claude_hooks(fresh, http=http, url=URL).read_text(encoding="utf-8")


def test_uninstall_removes_a_previous_release_install_exactly(tmp_path: Path) -> None:
    write_settings(tmp_path, with_previous_release_hooks(USER_SETTINGS))

    uninstall_claude_hooks(tmp_path)

    assert read_settings(tmp_path) == USER_SETTINGS


def test_http_install_keeps_session_start_on_the_command_hook_pinned_to_the_url(
    tmp_path: Path,
) -> None:
    # Claude Code silently drops http hooks on SessionStart: only command hooks run there.
    install_claude_hooks(tmp_path, http=True, url="http://10.0.0.5:9000")

    command = hook_command("claude", "SessionStart", url="http://10.0.0.5:9000", fail_closed=False)
    assert own_handlers(read_settings(tmp_path), "SessionStart") == [
        {"type": "command", "command": command}
    ]
    assert command.startswith("TACHOGRAPH_URL=http://10.0.0.5:9000 ")


def test_install_preserves_every_user_hook_and_key(tmp_path: Path) -> None:
    write_settings(tmp_path, USER_SETTINGS)

    install_claude_hooks(tmp_path, http=False, url=URL)

    settings = read_settings(tmp_path)
    assert settings["permissions"] == USER_SETTINGS["permissions"]
    assert settings["env"] == USER_SETTINGS["env"]
    assert list(settings) == ["permissions", "hooks", "env"]
    assert settings["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert settings["hooks"]["Stop"][0] == USER_SETTINGS["hooks"]["Stop"][0]
    assert (
        settings["hooks"]["PermissionRequest"][0] == USER_SETTINGS["hooks"]["PermissionRequest"][0]
    )
    assert len(settings["hooks"]["PreToolUse"]) == 2
    assert len(own_handlers(settings, "PreToolUse")) == 1


def test_install_twice_gives_the_same_file(tmp_path: Path) -> None:
    write_settings(tmp_path, USER_SETTINGS)
    install_claude_hooks(tmp_path, http=False, url=URL)
    first = settings_file(tmp_path).read_bytes()

    install_claude_hooks(tmp_path, http=False, url=URL)

    assert settings_file(tmp_path).read_bytes() == first


@pytest.mark.parametrize(("first", "second"), [(False, True), (True, False)])
def test_switching_mode_replaces_own_entries(tmp_path: Path, first: bool, second: bool) -> None:
    write_settings(tmp_path, USER_SETTINGS)
    install_claude_hooks(tmp_path, http=first, url=URL)

    install_claude_hooks(tmp_path, http=second, url=URL)

    settings = read_settings(tmp_path)
    expected = "http" if second else "command"
    for event in INSTALLED_EVENTS:
        handlers = own_handlers(settings, event)
        assert len(handlers) == 1
        if event != "SessionStart":
            assert handlers[0]["type"] == expected
    assert settings_file(tmp_path).read_bytes() == (
        install_claude_hooks(tmp_path, http=second, url=URL).read_bytes()
    )


def test_install_replaces_own_entries_hand_placed_in_user_groups(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        {
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [
                            {"type": "command", "command": "./guard.sh"},
                            {"type": "command", "command": "tachograph hook claude PreToolUse"},
                        ],
                    }
                ],
                "TaskCreated": [
                    {"hooks": [{"type": "http", "url": "http://old:8000/hooks/claude/"}]}
                ],
            }
        },
    )

    install_claude_hooks(tmp_path, http=False, url=URL)

    hooks = read_settings(tmp_path)["hooks"]
    assert hooks["PreToolUse"][0] == {
        "matcher": "Bash",
        "hooks": [{"type": "command", "command": "./guard.sh"}],
    }
    assert len(hooks["PreToolUse"]) == 2
    assert "TaskCreated" not in hooks


def test_uninstall_removes_exactly_own_entries(tmp_path: Path) -> None:
    write_settings(tmp_path, USER_SETTINGS)
    install_claude_hooks(tmp_path, http=True, url=URL)

    uninstall_claude_hooks(tmp_path)

    assert read_settings(tmp_path) == USER_SETTINGS


def test_install_then_uninstall_on_a_fresh_project_leaves_an_empty_object(
    tmp_path: Path,
) -> None:
    install_claude_hooks(tmp_path, http=False, url=URL)

    uninstall_claude_hooks(tmp_path)

    assert read_settings(tmp_path) == {}


def test_uninstall_without_own_entries_does_not_touch_the_file(tmp_path: Path) -> None:
    path = write_settings(tmp_path, USER_SETTINGS)
    before = path.read_bytes()

    uninstall_claude_hooks(tmp_path)

    assert path.read_bytes() == before


def test_uninstall_without_a_file_creates_nothing(tmp_path: Path) -> None:
    path = uninstall_claude_hooks(tmp_path)

    assert path == settings_file(tmp_path)
    assert not path.parent.exists()


def test_uninstall_keeps_user_hooks_sharing_a_group_with_ours(tmp_path: Path) -> None:
    write_settings(
        tmp_path,
        {
            "hooks": {
                "Stop": [
                    {
                        "matcher": "",
                        "hooks": [
                            {"type": "command", "command": "tachograph hook claude Stop"},
                            {"type": "command", "command": "tachograph-helper hook claude"},
                            {"type": "command", "command": "tachograph hook claudette"},
                        ],
                    }
                ]
            }
        },
    )

    uninstall_claude_hooks(tmp_path)

    assert read_settings(tmp_path) == {
        "hooks": {
            "Stop": [
                {
                    "matcher": "",
                    "hooks": [
                        {"type": "command", "command": "tachograph-helper hook claude"},
                        {"type": "command", "command": "tachograph hook claudette"},
                    ],
                }
            ]
        }
    }


@pytest.mark.parametrize("content", ['{"hooks": {', "[1, 2]", '{"hooks": []}', "\ufeff{}"])
def test_unusable_existing_file_is_a_clear_error_and_stays_untouched(
    tmp_path: Path, content: str
) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content, encoding="utf-8")

    actions: list[Callable[[], Path]] = [
        lambda: install_claude_hooks(tmp_path, http=False, url=URL),
        lambda: uninstall_claude_hooks(tmp_path),
    ]
    for action in actions:
        with pytest.raises(ClaudeSettingsError, match="nothing was changed") as caught:
            action()
        assert str(path) in str(caught.value)
        assert path.read_text(encoding="utf-8") == content
    assert [p.name for p in path.parent.iterdir()] == ["settings.local.json"]


def test_invalid_json_error_names_the_position(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text('{\n  "hooks": {,\n}', encoding="utf-8")

    with pytest.raises(ClaudeSettingsError, match=r"not valid JSON .*line 2, column 13"):
        install_claude_hooks(tmp_path, http=False, url=URL)


def test_event_list_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    path = write_settings(tmp_path, {"hooks": {"Stop": {"hooks": []}}})
    before = path.read_bytes()

    with pytest.raises(ClaudeSettingsError, match=r"hooks\.Stop must be a list"):
        install_claude_hooks(tmp_path, http=False, url=URL)
    assert path.read_bytes() == before


def test_blank_file_counts_as_empty_settings(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text("\n", encoding="utf-8")

    install_claude_hooks(tmp_path, http=False, url=URL)

    assert list(read_settings(tmp_path)["hooks"]) == list(INSTALLED_EVENTS)


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "ftp://host", "http://", "http://a b"])
def test_http_install_rejects_a_url_that_is_not_http(tmp_path: Path, url: str) -> None:
    with pytest.raises(ClaudeSettingsError, match="http:// or https://"):
        install_claude_hooks(tmp_path, http=True, url=url)
    assert not settings_file(tmp_path).exists()


def test_install_keeps_file_permissions(tmp_path: Path) -> None:
    path = write_settings(tmp_path, {})
    path.chmod(0o600)

    install_claude_hooks(tmp_path, http=False, url=URL)

    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    ("entry", "own"),
    [
        ({"type": "command", "command": "tachograph hook claude"}, True),
        ({"type": "command", "command": "tachograph hook claude PreToolUse --fail-closed"}, True),
        ({"type": "command", "command": "TACHOGRAPH_URL='http://x' tachograph hook claude"}, True),
        ({"type": "http", "url": "https://t.example.com/hooks/claude"}, True),
        ({"type": "http", "url": "https://t.example.com/hooks/claude/"}, True),
        ({"type": "command", "command": "echo tachograph hook claude"}, False),
        ({"type": "http", "url": "https://t.example.com/hooks/claude/extra"}, False),
        ({"type": "http", "url": "https://t.example.com/hooks/coder"}, False),
        ({"type": "command", "command": 3}, False),
        ("tachograph hook claude", False),
    ],
)
def test_own_entries_are_recognised_by_command_prefix_or_url(entry: object, own: bool) -> None:
    assert is_own_entry(entry) is own
