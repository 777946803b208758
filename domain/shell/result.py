"""The public result of the shell analysis: what one tool call would do, as plain values.

``analyse_tool_call`` (domain/shell/analysis.py) fills a ``Facts`` while it walks a tool
call and freezes it into a ``ToolCallAnalysis``. Nothing here judges; a consumer (the
self-update rules, a reviewer, a report) decides what the facts mean. What the analysis
could not follow is listed in ``not_understood`` rather than guessed at, so a consumer
that needs certainty treats a non-empty list as "unknown".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from domain.shell.paths import UNKNOWN, host_of, is_loopback
from domain.shell.state import Arg
from domain.shell.verdict import CANNOT_SEE, Denial

PLACEHOLDERS = re.compile("[\x01-\x05]")


@dataclass(frozen=True)
class CommandRun:
    """One simple command: the program's name and its argv (``argv[0]`` as written).

    Words only known at run time appear as written (``$X``); wrappers (``timeout``,
    ``env``, ``nice``...) appear as commands of their own, followed by what they run.
    """

    program: str
    argv: tuple[str, ...]
    cwd: str


@dataclass(frozen=True)
class Endpoint:
    """A network target a command or tool names, and the host it resolves to ("" if none)."""

    target: str
    host: str
    loopback: bool


@dataclass(frozen=True)
class GitOperation:
    """A git subcommand and the remote or URL it names (None: none named, git's default)."""

    subcommand: str
    remote: str | None


@dataclass(frozen=True)
class ToolCallAnalysis:
    """What one tool call would do. Paths are absolute (resolved against the call's cwd)
    unless they start with ``~`` or a variable that names another directory."""

    tool: str
    commands: tuple[CommandRun, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()
    git: tuple[GitOperation, ...] = ()
    not_understood: tuple[str, ...] = ()

    @property
    def understood(self) -> bool:
        return not self.not_understood


def command_run(args: list[Arg], cwd: str) -> CommandRun:
    """An argv as the walk expanded it; a word only known at run time stays as written."""
    argv = tuple(a.raw if a.dynamic or PLACEHOLDERS.search(a.value) else a.value for a in args)
    head = argv[0]
    return CommandRun(head.rsplit("/", 1)[-1] if "/" in head else head, argv, cwd)


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass
class Facts:
    """The analysis being collected, in the order the shell would meet each fact."""

    commands: list[CommandRun] = field(default_factory=list)
    reads: list[str] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    git: list[GitOperation] = field(default_factory=list)
    not_understood: list[str] = field(default_factory=list)

    def path(self, path: str, *, write: bool) -> None:
        (self.writes if write else self.reads).append(path)

    def endpoint(self, target: str) -> None:
        host = "" if UNKNOWN in target else host_of(target)
        shown = target.replace(UNKNOWN, "?")
        self.endpoints.append(Endpoint(shown, host, bool(host) and is_loopback(host)))

    def unknown(self, reason: str) -> None:
        self.not_understood.append(reason)

    def refusal(self, denial: Denial) -> None:
        """A judge's refusal met while analysing: a fact only if it means "cannot see"."""
        if denial.rule in CANNOT_SEE:
            self.not_understood.append(denial.reason)

    def freeze(self, tool: str) -> ToolCallAnalysis:
        return ToolCallAnalysis(
            tool=tool,
            commands=tuple(self.commands),
            reads=_unique(self.reads),
            writes=_unique(self.writes),
            endpoints=tuple(dict.fromkeys(self.endpoints)),
            git=tuple(dict.fromkeys(self.git)),
            not_understood=_unique(self.not_understood),
        )
