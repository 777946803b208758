"""What every part of the shell walker can count on from the others.

The walker (domain/shell/walker.py) is one class assembled from the structure walk, the
command runner (domain/shell/command.py) and one mixin per command family
(domain/shell/commands/). Each part calls the others through the names declared here, so
each module type-checks on its own; the assembled ``Shell`` supplies the bodies (an
assembly that lacks one cannot be instantiated).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from domain.shell.result import Facts
from domain.shell.state import Arg, Call, PathRules, State
from domain.shell.verdict import Denial


class ShellBase(ABC):
    scope: PathRules
    # Command name -> the name of the method that judges it (domain/shell/walker.py).
    judges: ClassVar[Mapping[str, str]]
    # The facts collected on the walk.
    facts: Facts

    def _note(self, denial: Denial | None) -> None:
        """What a judge found a command does (or could not see) becomes a fact, and the
        walk goes on, so the facts cover the whole call."""
        if denial is not None:
            self.facts.refusal(denial)

    def _endpoint(self, target: str) -> None:
        self.facts.endpoint(target)

    @abstractmethod
    def script(self, src: str, state: State, depth: int) -> Denial | None: ...

    @abstractmethod
    def command(
        self, args: list[Arg], state: State, piped: bool, stdin: Arg | None, depth: int
    ) -> Denial | None: ...

    @abstractmethod
    def _nested(self, call: Call, start: int) -> Denial | None: ...

    @abstractmethod
    def _nested_script(self, call: Call, script: Arg) -> Denial | None: ...

    @abstractmethod
    def _arg_path(self, arg: Arg, state: State, *, write: bool = False) -> Denial | None: ...

    @abstractmethod
    def _assign(self, arg: Arg, state: State) -> None: ...

    @abstractmethod
    def _assignment(self, arg: Arg, state: State, depth: int) -> Denial | None: ...

    @abstractmethod
    def _env_name(
        self, name: str, shown: str, value: str = "", *, dynamic: bool
    ) -> Denial | None: ...

    @abstractmethod
    def _arithmetic(self, text: str, state: State, shown: str) -> Denial | None: ...

    @abstractmethod
    def _subscript(self, text: str, state: State, shown: str) -> Denial | None: ...

    @abstractmethod
    def _define(self, name: str, state: State, *, function: bool = True) -> Denial | None: ...

    @abstractmethod
    def _python(self, call: Call) -> Denial | None: ...

    @abstractmethod
    def _stdin_program(self, call: Call, *, shell: bool) -> Denial | None: ...

    @abstractmethod
    def _package_manager(self, call: Call) -> Denial | None: ...

    @abstractmethod
    def _inline_code(self, call: Call, code: Arg) -> Denial | None: ...
