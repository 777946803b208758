"""`apply_patch`, the file-change tool of Codex and Copilot CLI, as a file-change call.

Both send the patch itself (Codex in `tool_input.command`, Copilot as the whole argument
string). Tachograph records it as `{"patch": <text>, "file_paths": [...]}`, so a policy
handler, the timeline and the search see which files a call changes. Stdlib only.
"""

from __future__ import annotations

import re
from typing import Any, Final

PATCH_TOOL: Final = "apply_patch"
# The patch format's file headers (`*** Add File: a.txt`, `*** Update File: …`, a rename's
# `*** Move to: …`).
_FILE_HEADER: Final = re.compile(
    r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$"
)


def patch_of(tool_input: object) -> str | None:
    """The patch text of an apply_patch input (a string, or Codex's `{"command": …}`)."""
    if isinstance(tool_input, str):
        return tool_input
    if isinstance(tool_input, dict):
        for key in ("command", "patch", "input"):
            value = tool_input.get(key)
            if isinstance(value, str):
                return value
    return None


def patch_input(patch: str) -> dict[str, Any]:
    """The recorded input of an apply_patch call: the patch and the files it names."""
    paths: list[str] = []
    for line in patch.splitlines():
        match = _FILE_HEADER.match(line.rstrip("\r"))
        if match is not None:
            path = (match.group(1) or match.group(2)).strip()
            if path and path not in paths:
                paths.append(path)
    return {"patch": patch, "file_paths": paths}
