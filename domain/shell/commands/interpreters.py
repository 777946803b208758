"""Shells and language interpreters: scripts they run, code given inline or on stdin."""

from __future__ import annotations

import posixpath
import re

from domain.shell.allowlist import (
    INLINE_INTERPRETER,
)
from domain.shell.base import ShellBase
from domain.shell.state import (
    STDIN_NAMES,
    Arg,
    Call,
    piped_file,
)
from domain.shell.tables import (
    PYTHON,
)
from domain.shell.verdict import (
    PUBLISH,
    Denial,
    refused,
    unseen,
)


class Interpreters(ShellBase):
    """Shells and interpreters, and what they are given to run."""

    # -- shells and interpreters --

    def _stdin_program(self, call: Call, *, shell: bool) -> Denial | None:
        if call.piped:
            return unseen(call.shown, "it runs a program piped into it")
        if call.stdin is None:
            return None
        if call.stdin.dynamic:
            return unseen(call.shown, "it runs a program computed at run time")
        if shell:
            return self.script(call.stdin.value, call.state.fork(), call.depth + 1)
        return self._inline_code(call, call.stdin)

    def _shell(self, call: Call) -> Denial | None:
        i, command_mode, stdin_mode = 0, False, False
        while i < len(call.args):
            value = call.args[i].value
            if value == "--":
                i += 1
                break
            if value == "-":
                stdin_mode = True
                break
            if value in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
                i += 2
                continue
            if value.startswith("--"):
                i += 1
                continue
            if len(value) > 1 and value[0] in "-+":
                command_mode = command_mode or (value[0] == "-" and "c" in value[1:])
                stdin_mode = stdin_mode or (value[0] == "-" and "s" in value[1:])
                i += 1
                continue
            break
        if command_mode:
            if i >= len(call.args):
                return None
            call.data.add(i)
            return self._nested_script(call, call.args[i])
        if stdin_mode or i >= len(call.args) or call.args[i].value in STDIN_NAMES:
            return self._stdin_program(call, shell=True)
        return piped_file(call, call.args[i].value)

    def _interpreter(
        self,
        call: Call,
        code_options: frozenset[str],
        value_options: frozenset[str],
        cluster: str = "",
    ) -> Denial | None:
        """Interpreters: code given inline is opaque (bar decode-and-run payloads)."""
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            option = value.split("=", 1)[0]
            if value == "--":
                i += 1
                break
            if value == "-" or not value.startswith("-"):
                break
            if value in code_options or (
                cluster and re.fullmatch(rf"-[A-Za-z]*[{cluster}]", value)
            ):
                if i + 1 >= len(call.args):
                    return None
                call.data.add(i + 1)
                return self._inline_code(call, call.args[i + 1])
            if option in code_options and "=" in value:
                call.data.add(i)
                return self._inline_code(
                    call, Arg(value.split("=", 1)[1], value, call.args[i].dynamic)
                )
            if value == "-m" and PYTHON.match(call.name) and i + 1 < len(call.args):
                return self._python_module(call, i + 1)
            i += 2 if value in value_options else 1
        if i >= len(call.args) or call.args[i].value in STDIN_NAMES:
            return self._stdin_program(call, shell=False)
        if denial := piped_file(call, call.args[i].value):
            return denial
        if (
            PYTHON.match(call.name)
            and posixpath.basename(call.args[i].value) == "setup.py"
            and any(a.value in ("upload", "register") for a in call.args[i + 1 :])
        ):
            return refused(PUBLISH, call.shown, "a self-update cycle may not publish packages")
        return None

    def _inline_code(self, call: Call, code: Arg) -> Denial | None:
        """Code given to an interpreter inline is code the self-update policy cannot read."""
        return refused(
            INLINE_INTERPRETER,
            call.shown,
            f"`{call.name}` would run code given inline, which the self-update policy does not "
            "analyse; write it to a file in the clone and run that",
        )

    def _python(self, call: Call) -> Denial | None:
        return self._interpreter(
            call, frozenset({"-c"}), frozenset({"-W", "-X", "--check-hash-based-pycs"}), "c"
        )

    def _python_module(self, call: Call, index: int) -> Denial | None:
        module = call.args[index].value
        if module in ("pip", "pip3", "twine", "uv", "poetry", "pipx"):
            inner = Call(
                module,
                call.args[index],
                call.args[index + 1 :],
                call.state,
                False,
                None,
                call.depth,
            )
            return self._package_manager(inner)
        if module in ("timeit", "pdb", "code", "runpy", "idlelib"):
            return self._inline_code(call, call.args[index])  # they run code given inline or piped
        return None

    def _node(self, call: Call) -> Denial | None:
        return self._interpreter(
            call,
            frozenset({"-e", "--eval", "-p", "--print"}),
            frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"}),
        )

    def _perl(self, call: Call) -> Denial | None:
        return self._interpreter(call, frozenset(), frozenset({"-M", "-I", "-m"}), cluster="eE")

    def _ruby(self, call: Call) -> Denial | None:
        return self._interpreter(call, frozenset(), frozenset({"-r", "-I"}), cluster="e")

    def _php(self, call: Call) -> Denial | None:
        return self._interpreter(call, frozenset({"-r"}), frozenset({"-d", "-c"}), "r")

    def _lua(self, call: Call) -> Denial | None:
        return self._interpreter(call, frozenset({"-e"}), frozenset({"-l"}))
