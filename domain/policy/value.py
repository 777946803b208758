"""The one value a policy expression sees for a call (docs/policy.md lists its fields).

Only the fields some rule reads are built: the shell analysis behind `paths` and
`command` is the costly part, and most rules never touch it.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from domain.lifecycle import LifecycleEvent
from domain.shell.analysis import analyse_tool_call
from domain.shell.programs import is_shell_script
from domain.shell.result import ToolCallAnalysis, Unclear

NAMES: Final = (
    "event",
    "runtime",
    "tool",
    "workspace",
    "cwd",
    "session",
    "input",
    "paths",
    "command",
    "prompt",
    "usage",
)

# Each runtime's own tool names, as Claude Code names the same tool, so one rule covers
# a shell or a file write whoever runs it (runtimes not listed already use these names).
_TOOLS: Final = {
    **dict.fromkeys(
        (
            "bash",
            "shell",
            "run_shell_command",
            "exec_command",
            "shell_command",
            "local_shell",
            "container.exec",
            "execute",
            "write_bash",
        ),
        "Bash",
    ),
    **dict.fromkeys(("write", "write_file", "create", "create_file"), "Write"),
    **dict.fromkeys(
        ("edit", "replace", "multiedit", "str_replace", "apply_patch", "applypatch"), "Edit"
    ),
    **dict.fromkeys(("read", "read_file", "view", "read_many_files"), "Read"),
    **dict.fromkeys(("ls", "list_directory", "list_dir"), "LS"),
    **dict.fromkeys(("grep", "search_file_content", "grep_files"), "Grep"),
    "glob": "Glob",
    **dict.fromkeys(("webfetch", "web_fetch", "fetch"), "WebFetch"),
    **dict.fromkeys(("websearch", "web_search", "google_web_search"), "WebSearch"),
    "notebookedit": "NotebookEdit",
    "task": "Task",
}


def normalised_tool(name: str | None) -> str:
    """The tool as rules name it: Claude Code's name, or the name as sent (MCP tools
    keep theirs, `mcp__server__tool`)."""
    if not name:
        return ""
    return _TOOLS.get(name.lower(), name)


@dataclass(frozen=True)
class CallContext:
    """What the value needs beyond the event: where the call's session lives."""

    session_id: str
    workspace: str
    agent: str | None = None
    title: str | None = None
    # The session's and workspace's spend (issue: budgets); None: not known here.
    usage: Mapping[str, Any] | None = None


def call_value(ev: LifecycleEvent, context: CallContext, names: frozenset[str]) -> dict[str, Any]:
    """The fields of `names` for this call; the others are left out."""
    value: dict[str, Any] = {}
    analysis: ToolCallAnalysis | None = None
    for name in names:
        if name in ("paths", "command"):
            if analysis is None:
                analysis = _analysis(ev)
            value[name] = _paths(analysis) if name == "paths" else command_value(analysis)
        else:
            build = _BUILDERS.get(name)
            if build is not None:
                value[name] = build(ev, context)
    return value


def command_value(analysis: ToolCallAnalysis) -> dict[str, Any]:
    """The shell analysis as rules read it (`command.*`)."""
    return {
        "commands": [{"program": c.program, "args": list(c.args)} for c in analysis.commands],
        "reads": list(analysis.reads),
        "writes": list(analysis.writes),
        "hosts": list(analysis.hosts),
        "git": [{"op": g.op, "remote": g.remote or "", "force": g.force} for g in analysis.git],
        "understood": analysis.understood
        and analysis.cwd != _NO_CWD
        and not any(_PATTERN_DIRECTORY.search(use.path) for use in analysis.paths)
        and not any(action.kind in _PROGRAM_CHANGING for action in analysis.actions),
    }


# Facts that make the programs named perhaps not the ones run (`PATH=/tmp/x git push`,
# `LD_PRELOAD=…`, a function or alias named like a program): not understood.
_PROGRAM_CHANGING: Final = frozenset({"exec-changing-env", "command-redefinition"})


# A wildcard in a directory of a path (`~/.ss?/id_rsa`, `/root/*/id_rsa`): which
# directories it goes through is known only at run time, so no rule on a name can
# see it. (One in the last part, `~/.ss*`, is listed as written: docs/policy.md.)
_PATTERN_DIRECTORY: Final = re.compile(r"[*?\[][^/]*/")


# Analysed from here when the runtime sent no absolute cwd: nothing relative can then be
# resolved, so the call is reported as not understood.
_NO_CWD: Final = "/nonexistent-cwd"


def _analysis(ev: LifecycleEvent) -> ToolCallAnalysis:
    cwd = ev.cwd if ev.cwd and ev.cwd.startswith("/") else _NO_CWD
    if not ev.tool_name:
        return ToolCallAnalysis(tool="", cwd=cwd)
    try:
        analysis = analyse_tool_call(ev.tool_name, ev.tool_input, cwd)
        script = _written_script(ev, analysis)
        if script is None:
            return analysis
        return _with_script(analysis, analyse_tool_call("Bash", {"command": script[1]}, script[0]))
    except Exception as exc:  # noqa: BLE001 - an input the walk cannot take is "not understood"
        return ToolCallAnalysis(
            tool=ev.tool_name, cwd=cwd, not_understood=(Unclear("unknown-tool", str(exc)),)
        )


def _written_script(ev: LifecycleEvent, analysis: ToolCallAnalysis) -> tuple[str, str] | None:
    """(the directory it is written to, its text) when the call writes a shell script
    whole; a script the agent writes and then runs (`bash a.sh`) is judged when written,
    since running it shows only its name."""
    tool_input = ev.tool_input
    if normalised_tool(ev.tool_name) != "Write" or not isinstance(tool_input, Mapping):
        return None
    content = tool_input.get("content")
    absolute = [path for path in analysis.writes if path.startswith("/")]
    if not isinstance(content, str) or len(absolute) != 1:
        return None
    if not is_shell_script(absolute[0], content):
        return None
    return posixpath.dirname(absolute[0]), content


def _with_script(written: ToolCallAnalysis, script: ToolCallAnalysis) -> ToolCallAnalysis:
    """The write's own facts and what its script would do when run, as a script the
    shell writes (`cat > a.sh <<EOF`) is walked (domain/shell/walker.py)."""

    def both(first: tuple[Any, ...], second: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(dict.fromkeys(first + second))

    return replace(
        written,
        commands=both(written.commands, script.commands),
        reads=both(written.reads, script.reads),
        writes=both(written.writes, script.writes),
        paths=both(written.paths, script.paths),
        endpoints=both(written.endpoints, script.endpoints),
        git=both(written.git, script.git),
        actions=both(written.actions, script.actions),
        not_understood=both(written.not_understood, script.not_understood),
    )


def _paths(analysis: ToolCallAnalysis) -> list[str]:
    return list(dict.fromkeys(use.path for use in analysis.paths))


def _input(ev: LifecycleEvent, _: CallContext) -> Any:
    tool_input = ev.tool_input
    if isinstance(tool_input, Mapping):
        return tool_input
    return {} if tool_input is None else {"value": tool_input}


def _cwd(ev: LifecycleEvent, _: CallContext) -> str:
    """The directory the runtime said the call runs in, without a trailing slash, so
    `p.startsWith(cwd + "/")` reads "under it"; "" when it sent no absolute one."""
    cwd = ev.cwd or ""
    if not cwd.startswith("/"):
        return ""
    return cwd.rstrip("/") or "/"


def _session(_: LifecycleEvent, context: CallContext) -> dict[str, Any]:
    return {"id": context.session_id, "agent": context.agent or "", "title": context.title or ""}


_BUILDERS: Final[dict[str, Callable[[LifecycleEvent, CallContext], Any]]] = {
    "event": lambda ev, _: ev.event,
    "runtime": lambda ev, _: ev.agent or "",
    "tool": lambda ev, _: normalised_tool(ev.tool_name),
    "workspace": lambda _, context: context.workspace,
    "cwd": _cwd,
    "session": _session,
    "input": _input,
    "prompt": lambda ev, _: ev.prompt or "",
    # The spend figures as the usage read model gives them (docs/policy.md); empty
    # until it knows any, so a budget rule guards with `has(...)`.
    "usage": lambda _, context: dict(context.usage or {"session": {}, "workspace": {}}),
}


def sample_value() -> dict[str, Any]:
    """A call with every field present and one item in every list: an expression that
    reads a name this value lacks names something no call has."""
    return {
        "event": "PreToolUse",
        "runtime": "claude-code",
        "tool": "Bash",
        "workspace": "default",
        "cwd": "/",
        "session": {"id": "", "agent": "claude-code", "title": ""},
        "input": {"command": "true"},
        "paths": ["/"],
        "command": {
            "commands": [{"program": "true", "args": [""]}],
            "reads": ["/"],
            "writes": ["/"],
            "hosts": [""],
            "git": [{"op": "push", "remote": "", "force": False}],
            "understood": True,
        },
        "prompt": "",
        "usage": {"session": {}, "workspace": {}},
    }
