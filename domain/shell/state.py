"""The walk's state: expanded words, the shell's variables and directory, the command at hand."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

from domain.shell.allowlist import words
from domain.shell.verdict import Denial, unseen


@dataclass(frozen=True)
class Arg:
    """One expanded word: its value (placeholders for the unknown), as written, dynamic?"""

    value: str
    raw: str
    dynamic: bool = False
    expanded: bool = False  # made by a parameter, command or arithmetic expansion


@dataclass
class State:
    cwd: str
    variables: dict[str, str] = field(default_factory=dict)
    oldpwd: str = ""
    stack: list[str] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)  # defined, their bodies judged
    loops: dict[str, list[Arg]] = field(default_factory=dict)  # a loop variable's items

    def fork(self) -> State:
        return State(
            self.cwd,
            dict(self.variables),
            self.oldpwd,
            list(self.stack),
            set(self.functions),
            dict(self.loops),
        )


@dataclass
class Call:
    """A command about to run, its wrappers peeled off."""

    name: str
    head: Arg
    args: list[Arg]
    state: State
    piped: bool
    stdin: Arg | None
    depth: int
    data: set[int] = field(default_factory=set)  # arguments that are not paths
    writes: bool = True  # whether its paths may be written (READERS only read)

    @property
    def shown(self) -> str:
        return " ".join(a.raw for a in [self.head, *self.args])

    @property
    def values(self) -> list[str]:
        return [a.value for a in self.args]

    def first_operand(self, value_options: frozenset[str] = frozenset()) -> int:
        """Index of the first argument that is not an option (len(args) if none)."""
        i = 0
        while i < len(self.args):
            value = self.args[i].value
            if value == "--":
                return i + 1
            if not value.startswith("-") or value == "-":
                return i
            i += 2 if value in value_options else 1
        return i


MAX_DEPTH = 8
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
ELSEWHERE_VARIABLES = words(
    "TMPDIR TMP TEMP XDG_CONFIG_HOME XDG_DATA_HOME XDG_CACHE_HOME XDG_STATE_HOME"
    " XDG_RUNTIME_DIR GNUPGHOME OLDPWD"
)
# Variables whose value is a command some program will run.
_COMMAND_VARIABLES = words(
    "GIT_SSH_COMMAND GIT_SSH GIT_PAGER PAGER MANPAGER GIT_EDITOR GIT_SEQUENCE_EDITOR EDITOR"
    " VISUAL GIT_EXTERNAL_DIFF GIT_ASKPASS SSH_ASKPASS SUDO_ASKPASS GIT_PROXY_COMMAND"
    " PROMPT_COMMAND LESSOPEN LESSCLOSE BROWSER"
)
_SOURCE_VARIABLE = re.compile(r"INDEX_URL|INDEX|FIND_LINKS|REGISTRY|PROXY|MIRROR|REPOSITORY")
STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})


def skip_options(args: list[Arg], value_options: frozenset[str]) -> int:
    i = 0
    while i < len(args):
        value = args[i].value
        if value == "--":
            return i + 1
        if not value.startswith("-") or value == "-":
            return i
        i += 2 if value in value_options else 1
    return i


class PathRules(Protocol):
    """Where the walker hands each path it meets (domain/shell/analysis.py records them)."""

    @property
    def clone(self) -> str | None: ...

    def resolve(self, value: str, cwd: str) -> str: ...

    def check(self, value: str, cwd: str, shown: str, *, write: bool = False) -> Denial | None: ...


def piped_file(call: Call, *programs: str) -> Denial | None:
    """A program read from a pipe or process substitution (``bash <(...)``): unseen."""
    for program in programs:
        if program in STDIN_NAMES or program.startswith(("/dev/fd/", "/proc/")):
            return unseen(call.shown, "it runs a program from a pipe or process substitution")
    return None
