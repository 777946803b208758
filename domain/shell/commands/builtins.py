"""Shell builtins: directories, declarations, aliases, traps, `source`, `watch`, patches."""

from __future__ import annotations

import re

from domain.shell.allowlist import (
    COMMAND_REDEFINITION,
    EXEC_CHANGING_ENV,
    PROCESS_CONTROL,
    UNRESOLVED_PATH_EXPANSION,
)
from domain.shell.base import ShellBase
from domain.shell.patches import patch_paths
from domain.shell.paths import (
    JOB,
    UNKNOWN,
)
from domain.shell.state import (
    ASSIGNMENT,
    STDIN_NAMES,
    Arg,
    Call,
    piped_file,
    skip_options,
)
from domain.shell.tables import (
    WATCH_VALUES,
)
from domain.shell.verdict import (
    Denial,
    refused,
    unseen,
)


class Builtins(ShellBase):
    """Shell builtins that change the walk's state or run text."""

    def _cd(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        state = call.state
        i = call.first_operand()
        if i >= len(call.args):
            if call.name == "pushd":
                return None
            denial = self.scope.check("~", state.cwd, call.shown)
            if denial:
                return denial
            state.oldpwd, state.cwd = state.cwd, self.scope.resolve("~", state.cwd)
            return None
        target = call.args[i]
        if target.value == "-":
            new = state.oldpwd or state.cwd
        elif target.dynamic:
            return refused(
                UNRESOLVED_PATH_EXPANSION,
                call.shown,
                "it changes to a directory only known at run time",
            )
        else:
            denial = self.scope.check(target.value, state.cwd, target.raw)
            if denial:
                return denial
            new = self.scope.resolve(target.value, state.cwd)
        if call.name == "pushd":
            state.stack.append(state.cwd)
        state.oldpwd, state.cwd = state.cwd, new
        return None

    def _popd(self, call: Call) -> Denial | None:
        state = call.state
        if state.stack:
            state.oldpwd, state.cwd = state.cwd, state.stack.pop()
        return None

    def _declare(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(re.fullmatch(r"[-+]\w*n\w*", v) for v in call.values):
            return refused(
                EXEC_CHANGING_ENV, call.shown, "a name reference can set any variable, unseen"
            )
        if any(re.fullmatch(r"[-+]\w*i\w*", v) for v in call.values):
            return unseen(call.shown, "an integer variable evaluates what it is given")
        for arg in call.args:
            subscript = re.match(r"[A-Za-z_]\w*(\[.*\])", arg.value, re.DOTALL)
            denial = (
                self._subscript(subscript.group(1), call.state, call.shown) if subscript else None
            )
            if denial:
                return denial
            if ASSIGNMENT.match(arg.value) and not arg.value.startswith("-"):
                denial = self._assignment(arg, call.state, call.depth)
                if denial:
                    return denial
                self._assign(arg, call.state)
        return None

    def _alias(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        for arg in call.args:
            if "=" in arg.value:
                name, text = arg.value.split("=", 1)
                denial = self._define(name, call.state, function=False) or self._nested_script(
                    call, Arg(text, arg.raw, arg.dynamic)
                )
                if denial:
                    return denial
        return None

    def _sets_variables(self, call: Call) -> Denial | None:
        """``read``, ``mapfile``, ``let``, ``getopts``, ``printf -v``: the names they set."""
        call.data.update(range(len(call.args)))
        values = call.values
        if call.name in ("mapfile", "readarray") and any(v.startswith("-C") for v in values):
            return unseen(call.shown, "its callback runs code for each line read")
        if call.name == "printf":  # only `-v NAME`: the rest is format and data
            if values[:1] == ["-v"]:
                values = values[1:2]
            else:
                values = [values[0][2:]] if values and values[0].startswith("-v") else []
        for value in values:
            name = re.fullmatch(r"([A-Za-z_]\w*)(\[.*\])?(?:\+?=.*)?", value, re.DOTALL)
            if call.name == "let":
                denial = self._arithmetic(value, call.state, call.shown)
            elif name:
                denial = self._subscript(name.group(2) or "", call.state, call.shown)
            else:
                continue
            if name:
                denial = denial or self._env_name(name.group(1), call.shown, dynamic=True)
                call.state.variables[name.group(1)] = UNKNOWN
            if denial:
                return denial
        return None

    def _kill(self, call: Call) -> Denial | None:
        """Signals only to jobs of the agent's own shell: ``kill %1``, ``kill -TERM $!``."""
        call.data.update(range(len(call.args)))
        values = call.values
        if values[:1] in (["-l"], ["-L"]):
            return None
        i = 0  # past the signal: `-9`, `-TERM`, `-s TERM`, `-n 9`, then `--`
        if values[:1] in (["-s"], ["-n"]):
            i = 2
        elif values and values[0].startswith("-") and values[0] != "--":
            i = 1
        if values[i : i + 1] == ["--"]:
            i += 1
        targets = values[i:]
        dynamic = any(a.dynamic and a.value != JOB for a in call.args)
        if targets and not dynamic and all(v.startswith("%") or v == JOB for v in targets):
            return None
        return refused(
            PROCESS_CONTROL,
            call.shown,
            "a self-update cycle may signal only the jobs its own shell started "
            "(`kill %1`, `kill $!`)",
        )

    def _hash(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(re.fullmatch(r"-\w*p\w*", v) for v in call.values):
            return refused(
                COMMAND_REDEFINITION, call.shown, "`hash -p` makes a name run another program"
            )
        return None

    def _enable(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(v not in ("-a", "-p", "-s") for v in call.values):
            return refused(
                COMMAND_REDEFINITION, call.shown, "`enable` loads or turns off shell builtins"
            )
        return None

    def _trap(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if call.args and call.args[0].value not in ("-l", "-p", "-", ""):
            return self._nested_script(call, call.args[0])
        return None

    def _source(self, call: Call) -> Denial | None:
        if call.args and call.args[0].value in STDIN_NAMES:
            return self._stdin_program(call, shell=True)
        return piped_file(call, call.args[0].value if call.args else "")

    def _watch(self, call: Call) -> Denial | None:
        i = skip_options(call.args, WATCH_VALUES)
        if any(a.value in ("-x", "--exec") for a in call.args[:i]):
            return self._nested(call, i)
        call.data.update(range(i, len(call.args)))
        rest = call.args[i:]
        if not rest:
            return None
        joined = Arg(" ".join(a.value for a in rest), " ".join(a.raw for a in rest))
        return self._nested_script(
            call, Arg(joined.value, joined.raw, any(a.dynamic for a in rest))
        )

    def _apply_patch(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        text = call.args[0] if call.args else call.stdin
        if text is None:
            return None
        if text.dynamic:
            return unseen(call.shown, "it applies a patch computed at run time")
        return patch_paths(self.scope, text.value, call.state.cwd)
