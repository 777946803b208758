"""The public result of the shell analysis: what one tool call would do, as plain values.

``analyse_tool_call`` (domain/shell/analysis.py) fills a ``Facts`` while it walks a tool
call and freezes it into a ``ToolCallAnalysis``. Nothing here judges; a consumer (the
self-update rules, a reviewer, a report) decides what the facts mean. What the analysis
could not follow is listed in ``not_understood`` rather than guessed at, so a consumer
that needs certainty treats a non-empty list as "unknown".

Every fact carries ``order``: when the shell would meet it, counted over the whole call
(commands and facts share the count), so a consumer can tell which command a fact
belongs to (the last command before it) and which of two facts comes first. ``order``
is not part of a fact's equality: the same fact met twice is listed once, where first met.

The names a policy language needs map directly: ``commands`` (each ``program`` and
``args``), ``reads``, ``writes``, ``hosts``, ``git`` (each ``op``, ``remote``, ``force``),
``privileged`` and ``understood``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from domain.shell.paths import UNKNOWN, host_of, is_loopback
from domain.shell.state import Arg
from domain.shell.verdict import CANNOT_SEE, Denial

PLACEHOLDERS = re.compile("[\x01-\x05]")
# Kinds of ``Action``: what a command does that is neither a path, an endpoint nor a git
# operation. They are named like the self-update rules that care about them.
PRIVILEGED = "sudo"  # changes user or gains privileges (sudo, su, doas, privileged containers)
PUBLISH = "publish"  # publishes, deploys, releases, or controls services
EVAL = "eval"  # evaluates text as shell code (followed when the text is literal)


@dataclass(frozen=True)
class CommandRun:
    """One simple command: the program's name and its argv (``argv[0]`` as written).

    Words only known at run time appear as written (``$X``); wrappers (``timeout``,
    ``env``, ``nice``, ``sudo``...) appear as commands of their own, followed by what
    they run.
    """

    program: str
    argv: tuple[str, ...]
    cwd: str
    order: int = field(default=-1, compare=False)

    @property
    def args(self) -> tuple[str, ...]:
        return self.argv[1:]


@dataclass(frozen=True)
class PathUse:
    """A path read or written; ``loop``: written through a ``for`` loop's variable."""

    path: str
    write: bool
    loop: bool = False
    order: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class Endpoint:
    """A network target a command or tool names, and the host it resolves to ("" if none)."""

    target: str
    host: str
    loopback: bool
    order: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class GitOperation:
    """A git subcommand (``op``), the remote or URL it names (None: none named, git's
    default), and whether it forces (``push --force``, ``-f``, ``--force-with-lease``,
    a ``+refspec``)."""

    op: str
    remote: str | None
    force: bool = False
    order: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class Action:
    """Something a command does that a rule may care about, beyond its paths, endpoints
    and git operations. ``kind``: ``sudo`` (changes user, gains privileges), ``publish``
    (publishes, deploys, releases, controls services), ``eval`` (evaluates text as code),
    ``network`` (reaches hosts it does not name), ``git-remote``, ``git-config``,
    ``credentials`` (key and secret tools, git configuration that can hold them),
    ``process-control``, ``exec-changing-env``, ``command-redefinition`` or
    ``outside-clone`` (a file outside it names no path for, such as a package manager's
    user configuration). ``reason`` says what, in one sentence."""

    kind: str
    reason: str
    order: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class Unclear:
    """Something the analysis could not follow: ``kind`` names what could not be seen
    (``unrestricted-shell``, ``dynamic-command-word``, ``unanalysed-wrapper``,
    ``inline-interpreter``, ``unresolved-path-expansion``, ``awk-sed-io``,
    ``unknown-command``, or ``unknown-tool``: a tool of which only path-like values are
    read), ``reason`` what, in one sentence."""

    kind: str
    reason: str
    order: int = field(default=-1, compare=False)


@dataclass(frozen=True)
class ToolCallAnalysis:
    """What one tool call would do, run from ``cwd``. Paths are absolute (resolved against
    the call's cwd) unless they start with ``~`` or a variable that names another
    directory. ``reads`` and ``writes`` list ``paths`` without their order."""

    tool: str
    cwd: str = "/"
    commands: tuple[CommandRun, ...] = ()
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    paths: tuple[PathUse, ...] = ()
    endpoints: tuple[Endpoint, ...] = ()
    git: tuple[GitOperation, ...] = ()
    actions: tuple[Action, ...] = ()
    not_understood: tuple[Unclear, ...] = ()

    @property
    def understood(self) -> bool:
        return not self.not_understood

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(e.host for e in self.endpoints if e.host))

    @property
    def privileged(self) -> bool:
        return any(action.kind == PRIVILEGED for action in self.actions)


def command_run(args: list[Arg], cwd: str, order: int) -> CommandRun:
    """An argv as the walk expanded it; a word only known at run time stays as written."""
    argv = tuple(a.raw if a.dynamic or PLACEHOLDERS.search(a.value) else a.value for a in args)
    head = argv[0]
    return CommandRun(head.rsplit("/", 1)[-1] if "/" in head else head, argv, cwd, order)


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass
class Facts:
    """The analysis being collected, in the order the shell would meet each fact."""

    commands: list[CommandRun] = field(default_factory=list)
    paths: list[PathUse] = field(default_factory=list)
    endpoints: list[Endpoint] = field(default_factory=list)
    git: list[GitOperation] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    not_understood: list[Unclear] = field(default_factory=list)
    count: int = 0

    def _next(self) -> int:
        self.count += 1
        return self.count - 1

    def command(self, args: list[Arg], cwd: str) -> None:
        self.commands.append(command_run(args, cwd, self._next()))

    def path(self, path: str, *, write: bool, loop: bool = False) -> None:
        self.paths.append(PathUse(path, write, loop, self._next()))

    def endpoint(self, target: str) -> None:
        host = "" if UNKNOWN in target else host_of(target)
        shown = target.replace(UNKNOWN, "?")
        loopback = bool(host) and is_loopback(host)
        self.endpoints.append(Endpoint(shown, host, loopback, self._next()))

    def operation(self, op: str, remote: str | None, *, force: bool) -> None:
        self.git.append(GitOperation(op, remote, force, self._next()))

    def action(self, kind: str, reason: str) -> None:
        self.actions.append(Action(kind, reason, self._next()))

    def unknown(self, reason: str, kind: str) -> None:
        self.not_understood.append(Unclear(kind, reason, self._next()))

    def refusal(self, denial: Denial) -> None:
        """A judge's refusal met while analysing: what the command does, or could not be seen."""
        if denial.rule in CANNOT_SEE:
            self.not_understood.append(Unclear(denial.rule, denial.reason, self._next()))
        else:
            self.actions.append(Action(denial.rule, denial.reason, self._next()))

    def freeze(self, tool: str, cwd: str) -> ToolCallAnalysis:
        return ToolCallAnalysis(
            tool=tool,
            cwd=cwd,
            commands=tuple(self.commands),
            reads=_unique([p.path for p in self.paths if not p.write]),
            writes=_unique([p.path for p in self.paths if p.write]),
            paths=tuple(dict.fromkeys(self.paths)),
            endpoints=tuple(dict.fromkeys(self.endpoints)),
            git=tuple(dict.fromkeys(self.git)),
            actions=tuple(dict.fromkeys(self.actions)),
            not_understood=tuple(dict.fromkeys(self.not_understood)),
        )
