"""Running one command: wrappers peeled, the family judge applied, its arguments checked as paths.

Part of the shell walker (domain/shell/walker.py); see domain/shell/base.py.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import replace

from domain.shell.allowlist import (
    DYNAMIC_COMMAND_WORD,
    KNOWN_COMMANDS,
    PROCESS_CONTROL,
    PROCESS_CONTROL_TOOLS,
    READERS,
    UNANALYSED_WRAPPER,
    UNANALYSED_WRAPPERS,
    UNKNOWN_COMMAND,
    UNRESOLVED_PATH_EXPANSION,
    running_option,
)
from domain.shell.base import ShellBase
from domain.shell.paths import (
    CHECKED,
    GLOB,
    UNKNOWN,
    brace_expand,
    is_system_program,
    path_candidates,
)
from domain.shell.result import EVAL
from domain.shell.state import (
    ASSIGNMENT,
    MAX_DEPTH,
    Arg,
    Call,
    State,
    skip_options,
)
from domain.shell.tables import (
    ALWAYS_NETWORK,
    CREDENTIAL_TOOLS,
    DEPLOY_TOOLS,
    DEPLOY_VERBS,
    ENV_VALUES,
    PRIVILEGE,
    PYTHON,
    SIMPLE_WRAPPERS,
    TIMEOUT_VALUES,
    UNRESTRICTED,
)
from domain.shell.verdict import (
    CREDENTIALS,
    NETWORK,
    PUBLISH,
    SUDO,
    Denial,
    refused,
    unseen,
)

# Commands that run another as a different user, and their options that take a value:
# analysing, the walk follows them into the command they run.
_RUN_AS = {
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
}


class CommandRunner(ShellBase):
    """Runs one argv: peels wrappers, applies the command's judge, checks its paths."""

    # -- commands --

    def command(
        self,
        args: list[Arg],
        state: State,
        piped: bool,
        stdin: Arg | None,
        depth: int,
    ) -> Denial | None:
        """Judge an argv: peel wrappers, apply the command's rules, check its paths."""
        if depth > MAX_DEPTH:
            return unseen(" ".join(a.raw for a in args), "commands are nested too deeply")
        while args:
            head = args[0]
            self.facts.command(args, state.cwd)
            globbed = (GLOB.search(head.value) and head.value not in ("[", "[[")) or len(
                brace_expand(head.value) or "many"
            ) > 1
            if head.dynamic or head.expanded or UNKNOWN in head.value or globbed:
                return refused(
                    DYNAMIC_COMMAND_WORD,
                    " ".join(a.raw for a in args),
                    "its command name comes from an expansion, so only the shell knows "
                    "what it runs; write the command name out",
                )
            name = posixpath.basename(head.value) if "/" in head.value else head.value
            if "/" in head.value:
                self._note(self._executable(head, state))
            if name in PRIVILEGE:
                shown = " ".join(a.raw for a in args)
                why = "a self-update cycle may not change user or gain privileges"
                self._note(refused(SUDO, shown, why))
                if name not in _RUN_AS:
                    return None
                args = args[1 + skip_options(args[1:], _RUN_AS[name]) :]
                continue
            if name in UNANALYSED_WRAPPERS:
                return refused(
                    UNANALYSED_WRAPPER,
                    " ".join(a.raw for a in args),
                    f"`{name}` runs commands the self-update policy does not follow; run the "
                    "command itself (for files, `find ... -exec CMD {} +`)",
                )
            unwrapped = self._unwrap(name, args[1:], state, depth)
            if unwrapped is None:
                break
            if isinstance(unwrapped, Denial):
                return unwrapped
            own, args = unwrapped
            for arg in own:
                self._note(self._arg_path(arg, state))
        if not args:
            return None
        call = Call(name, args[0], args[1:], state, piped, stdin, depth)
        call.writes = name not in READERS
        if name == "eval" and not any(a.dynamic for a in call.args):
            # `eval` of literal words runs exactly that text, so follow it; that it
            # evaluates text is a fact of its own (the self-update rules refuse it).
            self.facts.action(EVAL, unseen(call.shown, UNRESTRICTED[name]).reason)
            return self.script(" ".join(call.values), state, depth + 1)
        if name in UNRESTRICTED:
            return unseen(call.shown, UNRESTRICTED[name])
        if name in CREDENTIAL_TOOLS:
            return refused(
                CREDENTIALS,
                call.shown,
                "key and secret tools are off-limits to a self-update cycle",
            )
        if name in ALWAYS_NETWORK:
            return refused(
                NETWORK,
                call.shown,
                "a self-update cycle may reach only loopback and this tool talks to remote hosts",
            )
        if name in DEPLOY_TOOLS or (
            name in DEPLOY_VERBS
            and call.first_operand() < len(call.args)
            and call.args[call.first_operand()].value in DEPLOY_VERBS[name]
        ):
            return refused(
                PUBLISH,
                call.shown,
                "a self-update cycle may not publish, deploy, release or change services",
            )
        if name in PROCESS_CONTROL_TOOLS:
            return refused(
                PROCESS_CONTROL,
                call.shown,
                "a self-update cycle may signal only the jobs its own shell started "
                "(`kill %1`, `kill $!`)",
            )
        if option := running_option(name, call.values):
            return refused(
                UNANALYSED_WRAPPER, call.shown, f"`{option}` runs a command or reads a file list"
            )
        if name == "date" and any(re.match(r"-s|--set", v) for v in call.values):
            return refused(SUDO, call.shown, "it sets the system clock")
        judge = self.judges.get(name)
        if judge is None and PYTHON.match(name):
            judge = "_python"
        if judge is not None:
            verdict: Denial | None = getattr(self, judge)(call)
            if verdict:
                # Analysing, the walk goes on after the command, but not into arguments
                # whose roles (data, paths) its judge left unsettled when it refused.
                return verdict
        elif not (
            name in KNOWN_COMMANDS
            or name in state.functions
            or ("/" in call.head.value and not is_system_program(call.head.value))
        ):
            return refused(
                UNKNOWN_COMMAND,
                call.shown,
                f"`{name}` is not on the self-update policy's list of commands it understands",
            )

        for index, arg in enumerate(call.args):
            if index not in call.data:
                self._note(self._arg_path(arg, state, write=call.writes))
        return None

    def _nested(self, call: Call, start: int) -> Denial | None:
        """Judge the arguments from ``start`` on as a command of their own."""
        call.data.update(range(start, len(call.args)))
        return self.command(call.args[start:], call.state.fork(), False, None, call.depth + 1)

    def _nested_script(self, call: Call, script: Arg) -> Denial | None:
        if script.dynamic:
            return unseen(call.shown, "it runs command text computed at run time")
        return self.script(script.value, call.state.fork(), call.depth + 1)

    def _executable(self, head: Arg, state: State) -> Denial | None:
        if is_system_program(head.value):
            return None
        return self.scope.check(head.value, state.cwd, head.raw)

    def _arg_path(self, arg: Arg, state: State, *, write: bool = False) -> Denial | None:
        if arg.value == CHECKED:
            # One of the paths a loop or `find -exec` goes through, each read already.
            return self._loop_write(arg, state) if write else None
        if arg.dynamic or re.search("[\x01\x03-\x05]", arg.value):
            return refused(
                UNRESOLVED_PATH_EXPANSION,
                arg.raw,
                "it names a path only known at run time, which the self-update policy cannot "
                "check; write the path out",
            )
        for candidate in path_candidates(arg.value):
            denial = self.scope.check(candidate, state.cwd, arg.raw, write=write)
            if denial:
                return denial
        if write and re.match(r"-[^-]..", arg.value):  # `-oCLAUDE.md`: a glued output file
            return self.scope.check(arg.value[2:], state.cwd, arg.raw, write=True)
        return None

    def _loop_write(self, arg: Arg, state: State) -> Denial | None:
        """A write through a loop's variable (``> $f``): a write to each of its items."""
        name = re.fullmatch(r'"?\$\{?([A-Za-z_]\w*)\}?"?', arg.raw)
        items = state.loops.get(name.group(1)) if name else None
        if items is None:
            return refused(
                UNRESOLVED_PATH_EXPANSION, arg.raw, "it names a path only known at run time"
            )
        start = len(self.facts.paths)
        for item in items:
            for candidate in path_candidates(item.value):
                self.scope.check(candidate, state.cwd, item.raw, write=True)
        self.facts.paths[start:] = [replace(p, loop=True) for p in self.facts.paths[start:]]
        return None

    def _unwrap(
        self, name: str, rest: list[Arg], state: State, depth: int
    ) -> tuple[list[Arg], list[Arg]] | Denial | None:
        """For a wrapper: (its own arguments, the command it runs); None if not one."""
        if name in SIMPLE_WRAPPERS:
            i = skip_options(rest, SIMPLE_WRAPPERS[name])
            return rest[:i], rest[i:]
        if name == "timeout":
            i = skip_options(rest, TIMEOUT_VALUES)
            return rest[: i + 1], rest[i + 1 :]
        if name == "busybox":
            return [], rest
        if name == "env":
            i = 0
            own: list[Arg] = []
            while i < len(rest):
                value = rest[i].value
                if value in ("-S", "--split-string") or value.startswith(("-S", "--split-string=")):
                    if value in ("-S", "--split-string"):
                        if i + 1 >= len(rest):
                            return own, []
                        script, after = rest[i + 1], i + 2
                    else:
                        text = value.split("=", 1)[1] if value.startswith("--") else value[2:]
                        script, after = Arg(text, rest[i].raw, rest[i].dynamic), i + 1
                    if script.dynamic:
                        return unseen(script.raw, "`env -S` splits text computed at run time")
                    tail = " ".join(shlex.quote(a.value) for a in rest[after:])
                    denial = self.script(f"{script.value} {tail}", state.fork(), depth + 1)
                    return denial or (own, [])
                if value == "--":
                    i += 1
                    break
                if value.split("=", 1)[0] in ("-C", "--chdir") or value.startswith("-C"):
                    return refused(
                        UNANALYSED_WRAPPER,
                        " ".join(a.raw for a in rest),
                        "`env -C` runs its command from another directory, which the "
                        "self-update policy does not follow",
                    )
                if value in ENV_VALUES:
                    own.extend(rest[i : i + 2])
                    i += 2
                elif value.startswith("-") and value != "-":
                    own.append(rest[i])
                    i += 1
                elif ASSIGNMENT.match(value):
                    # What the variable does is a fact; the command env runs is still
                    # walked (`env GIT_TRACE=1 git push --force` pushes).
                    self._note(self._assignment(rest[i], state, depth))
                    i += 1
                else:
                    break
            return own, rest[i:]
        return None
