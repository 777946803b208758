"""git: global options, subcommands, remotes, configuration, nested commands."""

from __future__ import annotations

import re

from domain.shell.allowlist import (
    DYNAMIC_COMMAND_WORD,
    EXEC_CHANGING_ENV,
    GIT_SUBCOMMANDS,
    UNANALYSED_WRAPPER,
    UNKNOWN_COMMAND,
)
from domain.shell.base import ShellBase
from domain.shell.paths import (
    ELSEWHERE,
    UNKNOWN,
    host_of,
    is_loopback,
)
from domain.shell.state import (
    Arg,
    Call,
)
from domain.shell.tables import (
    GIT_FETCH_VALUES,
    GIT_GLOBAL_VALUES,
    GIT_MESSAGE_OPTIONS,
    GIT_REMOTE_COMMANDS,
    GIT_SAFE_KEYS,
    GIT_SENSITIVE,
    GIT_WRITES,
)
from domain.shell.verdict import (
    CREDENTIALS,
    GIT_CONFIG,
    GIT_REMOTE,
    NETWORK,
    Denial,
    network_denial,
    refused,
    unseen,
)

# Subcommands that name a remote or repository as their first operand.
_REMOTE_OPERAND = frozenset({"push", "fetch", "pull", "clone", "ls-remote", "archive"})


def git_operation(sub: str, rest: list[Arg]) -> tuple[str | None, bool]:
    """The remote a git subcommand names (``git remote add NAME URL``: the URL), and
    whether it forces (``push --force``/``-f``/``--force-with-lease``, a ``+refspec``)."""
    operands = [a.raw if a.dynamic else a.value for a in rest if not a.value.startswith("-")]
    remote: str | None = None
    if sub in _REMOTE_OPERAND and operands:
        remote = operands[0]
    elif sub == "remote" and len(operands) >= 2:
        remote = (
            operands[2] if operands[0] in ("add", "set-url") and len(operands) > 2 else operands[1]
        )
    elif sub == "submodule" and "add" in operands:
        following = operands[operands.index("add") + 1 :]
        remote = following[0] if following else None
    force = sub == "push" and (
        any(re.match(r"--force(?:$|=|-with-lease|-if-includes)|-[a-zA-Z]*f", a.value) for a in rest)
        or any(o.startswith("+") for o in operands[1:])
    )
    return remote, force


def safe_git_key(key: str) -> bool:
    return key in GIT_SAFE_KEYS or key.startswith(("color.", "advice."))


def repository_kind(operand: str) -> str:
    """How git reads a repository operand: "url", "exec" (ext::), "path" or "name"."""
    lowered = operand.lower()
    if lowered.startswith(("ext::", "fd::")):
        return "exec"
    if lowered.startswith("file:"):
        return "path"
    if "://" in operand or re.match(r"^[A-Za-z][\w+.-]*::", operand):
        return "url"
    if re.match(r"^(?:[^@/:]+@)?[^/:]+:", operand) and not operand.startswith(("/", ".", "~")):
        return "url"
    if operand.startswith(("/", ".", "~", ELSEWHERE)) or "/" in operand or operand == ".":
        return "path"
    return "name"


class GitCommands(ShellBase):
    """git: its subcommands, remotes and configuration."""

    # -- git and friends --

    def _git(self, call: Call) -> Denial | None:
        values, pairs, i = call.values, [], 0
        while i < len(values):
            value = values[i]
            if call.args[i].dynamic or UNKNOWN in value:
                return refused(
                    DYNAMIC_COMMAND_WORD,
                    call.shown,
                    "an expansion comes before its git subcommand, so only the shell knows "
                    "what git runs; write the subcommand and its options out",
                )
            if value.startswith("--exec-path="):
                return refused(
                    EXEC_CHANGING_ENV, call.shown, "it makes git run programs from elsewhere"
                )
            if value == "--config-env" or value.startswith("--config-env="):
                return refused(
                    GIT_CONFIG, call.shown, "it injects git configuration from the environment"
                )
            if value == "-c" and i + 1 < len(values):
                pairs.append(values[i + 1])
            if value in GIT_GLOBAL_VALUES:
                i += 2
            elif value.startswith("-"):
                i += 1
            else:
                break
        sub = values[i] if i < len(values) else ""
        call.data.add(i)  # the subcommand's name, not a path
        rest = call.args[i + 1 :]
        base = i + 1
        remote, force = git_operation(sub, rest)
        self.facts.operation(sub, remote, force=force)
        if sub in GIT_REMOTE_COMMANDS or (
            sub == "lfs" and rest and rest[0].value in ("push", "pull", "fetch")
        ):
            return refused(
                GIT_REMOTE,
                call.shown,
                "a self-update cycle works in its own clone and may not push to, fetch from "
                "or change git remotes",
            )
        for pair in pairs:
            key = pair.split("=", 1)[0].lower()
            if not safe_git_key(key):
                return refused(
                    GIT_CONFIG,
                    call.shown,
                    f"`{key}` is not a git setting a self-update cycle may change",
                )
        if sub.startswith("credential"):
            return refused(
                CREDENTIALS, call.shown, "git credentials are off-limits to a self-update cycle"
            )
        if sub and sub not in GIT_SUBCOMMANDS:
            return refused(
                UNKNOWN_COMMAND,
                call.shown,
                f"`git {sub}` is not on the self-update policy's list of git commands it "
                "understands",
            )
        call.writes = sub in GIT_WRITES or any(v.startswith("--output") for v in values)
        if sub in ("clone", "fetch", "pull", "ls-remote"):
            return self._git_fetch(call, sub, base)
        if sub == "submodule":
            return self._git_submodule(call, base)
        if sub == "archive" and any(v.startswith("--remote") for v in values[base:]):
            return refused(NETWORK, call.shown, "it reads an archive from a remote")
        if sub == "config":
            return self._git_config(call, base)
        if sub == "grep":
            return self._git_grep(call, base)
        if sub == "bisect" and rest and rest[0].value == "run":
            return self._nested(call, base + 1)
        if sub in ("rebase", "difftool", "mergetool", "filter-branch"):
            for j in range(base, len(call.args)):
                option, eq, inline = call.args[j].value.partition("=")
                if option in ("-x", "--exec", "--extcmd", "--setup") or option.endswith("-filter"):
                    script = (
                        Arg(inline, call.args[j].raw, call.args[j].dynamic)
                        if eq
                        else (call.args[j + 1] if j + 1 < len(call.args) else Arg("", ""))
                    )
                    call.data.update({j, j + 1})
                    denial = self._nested_script(call, script)
                    if denial:
                        return denial
        for j in range(base, len(call.args)):
            option = call.args[j].value.split("=", 1)[0]
            if option in GIT_MESSAGE_OPTIONS:
                call.data.add(j if "=" in call.args[j].value else j + 1)
            elif re.match(r"^-[mSG].", call.args[j].value) and sub in (
                "commit",
                "tag",
                "merge",
                "stash",
                "log",
                "notes",
            ):
                call.data.add(j)
        return None

    def _git_fetch(self, call: Call, sub: str, base: int) -> Denial | None:
        operands: list[str] = []
        j = base
        while j < len(call.args):
            value = call.args[j].value
            option = value.split("=", 1)[0]
            if option in ("--upload-pack", "--receive-pack", "--exec") or (
                value == "-u" and sub == "clone"
            ):
                return unseen(call.shown, "it runs a command of its own on the remote side")
            if option in ("-c", "--config"):
                pair = (
                    value.split("=", 1)[1]
                    if option == "--config" and "=" in value
                    else (call.args[j + 1].value if j + 1 < len(call.args) else "")
                )
                if not safe_git_key(pair.split("=", 1)[0].lower()):
                    return refused(
                        GIT_CONFIG,
                        call.shown,
                        "it sets git configuration a self-update cycle may not change",
                    )
            if value == "--":
                operands.extend(a.value for a in call.args[j + 1 :])
                break
            if value in GIT_FETCH_VALUES:
                j += 2
                continue
            if not value.startswith("-"):
                operands.append(value)
            j += 1
        if not operands:
            if sub == "clone":
                return None
            return refused(
                GIT_REMOTE,
                call.shown,
                "it talks to the clone's configured remote, and a self-update cycle may not "
                "fetch from or push to git remotes",
            )
        kind = repository_kind(operands[0])
        if kind == "exec":
            return unseen(call.shown, "its transport runs a command")
        if kind == "url":
            self._endpoint(operands[0])
            if is_loopback(host_of(operands[0])):
                return None
            return network_denial(call.shown, operands[0])
        if kind == "name" and sub != "clone":
            return refused(
                GIT_REMOTE,
                call.shown,
                f"`{operands[0]}` names a git remote, and a self-update cycle may not fetch "
                "from or push to git remotes",
            )
        return None  # a local path: checked with the other arguments

    def _git_submodule(self, call: Call, base: int) -> Denial | None:
        rest = call.values[base:]
        verb = next((v for v in rest if not v.startswith("-")), "")
        if verb == "add":
            operands = [v for v in rest[rest.index("add") + 1 :] if not v.startswith("-")]
            if (
                operands
                and repository_kind(operands[0]) == "url"
                and not is_loopback(host_of(operands[0]))
            ):
                return network_denial(call.shown, operands[0])
            if operands and repository_kind(operands[0]) == "exec":
                return unseen(call.shown, "its transport runs a command")
        if verb in ("update", "sync") and "--no-fetch" not in rest:
            return refused(GIT_REMOTE, call.shown, "it fetches submodules from their remotes")
        if verb == "foreach":
            start = base + rest.index("foreach") + 1
            scripts = [a for a in call.args[start:] if a.value != "--recursive"]
            call.data.update(range(start, len(call.args)))
            if scripts:
                joined = Arg(
                    " ".join(a.value for a in scripts),
                    " ".join(a.raw for a in scripts),
                    any(a.dynamic for a in scripts),
                )
                return self._nested_script(call, joined)
        return None

    def _git_config(self, call: Call, base: int) -> Denial | None:
        values = call.values[base:]
        if {"--global", "--system"} & set(values):
            return refused(
                GIT_CONFIG,
                call.shown,
                "it changes the user's or the system's git configuration, outside the clone",
            )
        if {"-e", "--edit"} & set(values) or next(
            (v for v in values if not v.startswith("-")), ""
        ) == "edit":
            return refused(GIT_CONFIG, call.shown, "it opens the git configuration in an editor")
        positional: list[str] = []
        write = listing = regexp = False
        i = 0
        while i < len(values):
            value = values[i]
            if value in ("-f", "--file", "--blob", "--default", "--type", "--comment", "--value"):
                i += 2
                continue
            if value in (
                "--add",
                "--unset",
                "--unset-all",
                "--replace-all",
                "--rename-section",
                "--remove-section",
            ):
                write = True
            elif value in ("-l", "--list"):
                listing = True
            elif value in ("--get-regexp", "--get-urlmatch"):
                regexp = True
            elif not value.startswith("-"):
                positional.append(value)
            i += 1
        if positional and positional[0] in ("set", "unset", "rename-section", "remove-section"):
            write, positional = True, positional[1:]
        elif positional and positional[0] in ("get", "list"):
            listing, positional = listing or positional[0] == "list", positional[1:]
        elif len(positional) >= 2 and not regexp:
            write = True
        key = positional[0].lower() if positional else ""
        if write:
            if not safe_git_key(key):
                return refused(
                    GIT_CONFIG,
                    call.shown,
                    f"`{key or '?'}` is not a git setting a self-update cycle may change",
                )
            return None
        if (
            listing
            or GIT_SENSITIVE.search(key)
            or (regexp and not key.startswith(("user.", "core.", "color.", "alias.")))
        ):
            return refused(
                CREDENTIALS,
                call.shown,
                "git configuration can hold remote URLs and credentials, which a self-update "
                "cycle may not read",
            )
        return None

    def _git_grep(self, call: Call, base: int) -> Denial | None:
        given = False
        for j in range(base, len(call.args)):
            value = call.args[j].value
            if re.match(r"-O|--open-files-in-pager", value):
                return refused(
                    UNANALYSED_WRAPPER, call.shown, "it opens the matching files with a command"
                )
            if value in ("-e", "--and", "--or", "--not"):
                given = given or value == "-e"
                call.data.add(j + 1)
            elif value == "--":
                break
            elif not value.startswith("-") and not given:
                call.data.add(j)
                break
        return None
