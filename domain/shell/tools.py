"""The tool dispatch: which part of a tool call's input is a command, a path, a patch or
a URL, for each agent runtime's tool names (Claude Code, Codex, Gemini CLI, Copilot CLI).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterator, Mapping

from domain.shell.allowlist import (
    words,
)
from domain.shell.patches import looks_like_patch, patch_paths, tool_path
from domain.shell.paths import (
    FORGEABLE,
    URL,
    URL_IN_TEXT,
    host_of,
    is_loopback,
)
from domain.shell.result import Facts
from domain.shell.state import (
    Arg,
    PathRules,
    State,
)
from domain.shell.tables import (
    UNRESTRICTED,
)
from domain.shell.verdict import (
    NETWORK,
    OUTSIDE_CLONE,
    Denial,
    network_denial,
    quoted,
    refused,
    unseen,
)
from domain.shell.walker import Shell

# Kinds of what the analysis could not follow that are not refusals' rules.
UNKNOWN_TOOL = "unknown-tool"  # a tool of which only the path-like values are read
UNKNOWN_PATH = "unknown-path"  # a file the tool writes without naming it
UNSEEN_HOSTS = "unseen-hosts"  # hosts the tool chooses, or names no URL

# --- tools -----------------------------------------------------------------------------

_SHELL_TOOLS = words(
    "bash shell run_shell_command exec_command shell_command local_shell container.exec write_bash"
)
_PATCH_TOOLS = frozenset({"apply_patch", "applypatch"})
_FETCH_TOOLS = frozenset({"webfetch", "web_fetch", "fetch"})
_SEARCH_TOOLS = frozenset({"websearch", "web_search", "google_web_search"})
_GLOB_TOOLS = frozenset({"glob"})
# Tools that only read the paths they are given; every other tool may write them.
_READ_TOOLS = words(
    "read notebookread glob grep ls read_file read_many_files list_directory"
    " search_file_content view list_dir grep_files view_image"
)
_PATH_KEYS = (
    "file_path",
    "notebook_path",
    "path",
    "paths",
    "absolute_path",
    "dir_path",
    "directory",
    "cwd",
    "workdir",
    "working_directory",
    "target_file",
    "filename",
    "file",
    "files",
    "old_path",
    "new_path",
)
_WORKDIR_KEYS = ("workdir", "cwd", "directory", "dir_path", "working_directory")
_GLOB_KEYS = ("include", "glob")
# Tools whose other input fields are content or prose, not paths.
_KNOWN_TOOLS = (
    _SHELL_TOOLS
    | _PATCH_TOOLS
    | _FETCH_TOOLS
    | _SEARCH_TOOLS
    | frozenset(
        {
            "read",
            "write",
            "edit",
            "multiedit",
            "notebookedit",
            "notebookread",
            "glob",
            "grep",
            "ls",
            "todowrite",
            "todoread",
            "task",
            "agent",
            "exitplanmode",
            "bashoutput",
            "killshell",
            "killbash",
            "skill",
            "slashcommand",
            "askuserquestion",
            "read_file",
            "write_file",
            "replace",
            "read_many_files",
            "list_directory",
            "search_file_content",
            "write_todos",
            "view",
            "create",
            "str_replace_editor",
            "str_replace",
            "insert",
            "undo_edit",
            "update_plan",
            "view_image",
            "list_dir",
            "grep_files",
            "read_bash",
            "stop_bash",
            "list_bash",
            "report_intent",
        }
    )
)


class Tools:
    """Takes one tool call apart: its paths go to ``scope``, its shell text to the walker."""

    def __init__(self, scope: PathRules, facts: Facts) -> None:
        self.scope = scope
        self.facts = facts

    def _unknown(self, reason: str, kind: str) -> None:
        self.facts.unknown(reason, kind)

    def evaluate(self, tool_name: str, tool_input: object, cwd: str) -> Denial | None:
        base = self.scope.resolve(cwd, "/")
        name = tool_name.strip().lower()
        if name in UNRESTRICTED:
            return unseen(tool_name, UNRESTRICTED[name])
        if name in _SEARCH_TOOLS:
            self._unknown(f"{quoted(tool_name)} reaches hosts the search chooses.", UNSEEN_HOSTS)
            return refused(
                NETWORK,
                tool_name,
                "web search reaches the internet, and a self-update cycle may reach only loopback",
            )
        if name == "save_memory":
            self._unknown(
                f"{quoted(tool_name)} writes the agent's global memory file.", UNKNOWN_PATH
            )
            return refused(
                OUTSIDE_CLONE, tool_name, "it writes the agent's global memory, outside the clone"
            )
        if isinstance(tool_input, str):
            if looks_like_patch(tool_input):
                return patch_paths(self.scope, tool_input, base)
            if name in _SHELL_TOOLS:
                return self._shell(tool_input, base)
            return self._loose(tool_input, base)
        if not isinstance(tool_input, Mapping):
            if name in _SHELL_TOOLS and isinstance(tool_input, list):
                return self._argv(tool_input, base)
            return self._loose(tool_input, base)
        if name in _SHELL_TOOLS:
            return self._shell_tool(tool_input, base)
        for value in tool_input.values():
            for text in _strings(value):
                if looks_like_patch(text):
                    denial = patch_paths(self.scope, text, base)
                    if denial:
                        return denial
        if name in _FETCH_TOOLS:
            return self._fetch(tool_name, tool_input)
        for key in _PATH_KEYS:
            for value in _strings(tool_input.get(key)):
                denial = tool_path(self.scope, value, base, write=name not in _READ_TOOLS)
                if denial:
                    return denial
        root = next(iter(_strings(tool_input.get("path") or tool_input.get("dir_path"))), "")
        glob_base = self.scope.resolve(root, base) if root and not root.startswith("~") else base
        keys = _GLOB_KEYS + (("pattern",) if name in _GLOB_TOOLS else ())
        for key in keys:
            for value in _strings(tool_input.get(key)):
                denial = tool_path(self.scope, value, glob_base, write=False)
                if denial:
                    return denial
        if name not in _KNOWN_TOOLS:
            self._unknown(
                f"{quoted(tool_name)} is not a known tool; only its path-like values are read.",
                UNKNOWN_TOOL,
            )
            return self._loose(tool_input, base)
        return None

    def _shell_tool(self, tool_input: Mapping[str, object], base: str) -> Denial | None:
        for key in _WORKDIR_KEYS:
            for value in _strings(tool_input.get(key)):
                denial = tool_path(self.scope, value, base, write=False)
                if denial:
                    return denial
                base = self.scope.resolve(value, base)
        command = next(
            (tool_input[k] for k in ("command", "cmd", "input") if tool_input.get(k) is not None),
            None,
        )
        if command is None:
            return None
        if isinstance(command, str):
            return self._shell(command, base)
        if isinstance(command, list) and all(isinstance(a, str) for a in command):
            return self._argv(command, base)
        return unseen("command", "its command has an unexpected shape")

    def _shell(self, command: str, base: str) -> Denial | None:
        if FORGEABLE.search(command):
            return unseen(command, "it contains control characters")
        return Shell(self.scope, self.facts).script(command, State(base), 0)

    def _argv(self, argv: list[object], base: str) -> Denial | None:
        if not all(isinstance(a, str) for a in argv):
            return unseen("command", "its argv has an unexpected shape")
        words = [str(a) for a in argv]
        if any(FORGEABLE.search(w) for w in words):
            return unseen(shlex.join(words), "it contains control characters")
        args = [Arg(w, shlex.quote(w)) for w in words]
        return Shell(self.scope, self.facts).command(args, State(base), False, None, 0)

    def _fetch(self, tool_name: str, tool_input: Mapping[str, object]) -> Denial | None:
        urls = list(_strings(tool_input.get("url"))) + list(_strings(tool_input.get("urls")))
        if not urls:
            urls = URL_IN_TEXT.findall(" ".join(_strings(tool_input.get("prompt"))))
        if not urls:
            self._unknown(f"{quoted(tool_name)} names no URL.", UNSEEN_HOSTS)
            return refused(
                NETWORK,
                tool_name,
                "it names no loopback URL, and a self-update cycle may fetch only from loopback",
            )
        for url in urls:
            self.facts.endpoint(url)
        for url in urls:
            if not is_loopback(host_of(url)):
                return network_denial(f"{tool_name} {url}", url)
        return None

    def _loose(self, value: object, base: str, depth: int = 0) -> Denial | None:
        """An unknown tool: every string that looks like a path is judged as one."""
        if depth > 16:
            return None
        if isinstance(value, str):
            if _path_like(value):
                return tool_path(self.scope, value, base)
            return None
        items: list[object] = []
        if isinstance(value, Mapping):
            items = list(value.values())
        elif isinstance(value, list | tuple):
            items = list(value)
        for item in items:
            denial = self._loose(item, base, depth + 1)
            if denial:
                return denial
        return None


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str) and item:
                yield item


def _path_like(value: str) -> bool:
    if not value or any(c.isspace() for c in value):
        return False
    if URL.match(value):
        return value.lower().startswith("file:")
    return value.startswith((".", "~", "/", "$HOME", "${HOME}")) or "/" in value
