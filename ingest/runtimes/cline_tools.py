"""Cline's tools under Claude Code's names and input fields, and back (§6.5).

Cline 3.0.65 offers `run_commands` (`{"commands": [...]}`), `editor` (`{path, new_text,
old_text?, insert_line?}`), `read_files`, `search_codebase`, `fetch_web_content`,
`apply_patch`, `ask_question` and `spawn_agent`. Tachograph records the shell as `Bash`
with `{"command": ...}` (several commands one per line: Cline runs them one after
another, as a shell runs a script's lines) and the editor as `Write` (a file written
whole) or `Edit` (`old_string` -> `new_string`), so policy rules, approvals and activity
search treat a call the same whoever ran it. The native name and input stay in
`detail.nativeToolName` / `detail.nativeToolInput`.

A handler rewrites a call in the shape it was shown (Claude Code's); `native_input`
turns that back into Cline's input, which `overrideInput` must carry whole.

Stdlib only: the command-hook client imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from ingest.runtimes.patches import PATCH_TOOL, patch_input, patch_of

SHELL: Final = "run_commands"
EDITOR: Final = "editor"
# Cline's tools whose input is kept as it is, under Claude Code's name for them.
RENAMED: Final[Mapping[str, str]] = {
    "read_files": "Read",
    "search_codebase": "Grep",
    "fetch_web_content": "WebFetch",
    "ask_question": "AskUserQuestion",
    "spawn_agent": "Task",
}


def recorded_tool(name: str, native: Any) -> tuple[str, Any]:
    """(the tool's name, its input) as Tachograph records a Cline call."""
    if not isinstance(native, dict):
        return RENAMED.get(name, name), native
    if name == SHELL:
        commands = native.get("commands")
        if isinstance(commands, list) and all(isinstance(c, str) for c in commands):
            return "Bash", {"command": "\n".join(commands)}
        if isinstance(commands, str):
            return "Bash", {"command": commands}
    if name == EDITOR and isinstance(native.get("path"), str):
        return _editor_call(native)
    if name == PATCH_TOOL:
        patch = patch_of(native)
        if patch is not None:
            return PATCH_TOOL, patch_input(patch)
    return RENAMED.get(name, name), native


def _editor_call(native: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    path, new_text = native["path"], native.get("new_text")
    if isinstance(native.get("old_text"), str):
        return "Edit", {"file_path": path, "old_string": native["old_text"], "new_string": new_text}
    if native.get("insert_line") is not None:
        return "Edit", {
            "file_path": path,
            "insert_line": native["insert_line"],
            "new_string": new_text,
        }
    return "Write", {"file_path": path, "content": new_text}


def native_input(replacement: object) -> object:
    """A rewritten input in Cline's fields (a replacement already in them is kept)."""
    if not isinstance(replacement, dict):
        return replacement
    if isinstance(replacement.get("command"), str) and "commands" not in replacement:
        return {"commands": [replacement["command"]]}
    path = replacement.get("file_path")
    if not isinstance(path, str) or "path" in replacement:
        if isinstance(replacement.get("patch"), str):
            return {"input": replacement["patch"]}
        return replacement
    if "content" in replacement:
        return {"path": path, "new_text": replacement["content"]}
    native: dict[str, Any] = {"path": path, "new_text": replacement.get("new_string")}
    if "old_string" in replacement:
        native["old_text"] = replacement["old_string"]
    if "insert_line" in replacement:
        native["insert_line"] = replacement["insert_line"]
    return native
