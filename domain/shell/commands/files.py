"""Commands over files, data and patterns: `test`, grep-like tools, sed/awk, `find`."""

from __future__ import annotations

import posixpath
import re

from domain.shell.allowlist import (
    AWK_SED_IO,
    READERS,
    UNANALYSED_WRAPPER,
)
from domain.shell.base import ShellBase
from domain.shell.paths import (
    CHECKED,
    UNKNOWN,
)
from domain.shell.programs import (
    awk_io,
    sed_io,
)
from domain.shell.state import (
    Arg,
    Call,
    piped_file,
)
from domain.shell.tables import (
    ARITHMETIC_TESTS,
    DELIMITER_OPTIONS,
    FILE_TESTS,
    FIND_EXEC,
    FIND_PATTERNS,
    PATTERN_ALIASES,
    PATTERN_TOOLS,
)
from domain.shell.verdict import (
    Denial,
    refused,
)


class FileCommands(ShellBase):
    """Commands whose arguments are files, data and patterns."""

    # -- command families --

    def _data(self, call: Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        return None

    def _delimited(self, call: Call) -> Denial | None:
        options = DELIMITER_OPTIONS[call.name]
        for i, arg in enumerate(call.args):
            if arg.value in options:
                call.data.add(i + 1)
            elif any(arg.value.startswith(o) for o in options if not o.startswith("--")):
                call.data.add(i)
        return None

    def _test(self, call: Call) -> Denial | None:
        for i, arg in enumerate(call.args):
            if not (i > 0 and call.args[i - 1].value in FILE_TESTS):
                call.data.add(i)
            before = call.args[i - 1].value if i > 0 else ""
            after = call.args[i + 1].value if i + 1 < len(call.args) else ""
            if before == "-v":
                denial = self._subscript(arg.value, call.state, call.shown)
            elif call.name == "[[" and {before, after} & ARITHMETIC_TESTS:
                denial = self._arithmetic(arg.value, call.state, call.shown)
            else:
                denial = None
            if denial:
                return denial
        return None

    def _pattern_tool(self, call: Call) -> Denial | None:
        """grep, sed, awk, jq: the pattern, script or filter is not a path."""
        family = PATTERN_ALIASES.get(call.name, call.name)
        replacing, files, data, others = PATTERN_TOOLS[family]
        given = False
        programs: list[Arg] = []
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            option, eq, _ = value.partition("=")
            short = value[:2] if not value.startswith("--") and len(value) > 2 else ""
            if value == "--":
                i += 1
                break
            if family == "jq" and value in ("--arg", "--argjson", "--slurpfile", "--rawfile"):
                call.data.update({i + 1, i + 2} if value in ("--arg", "--argjson") else {i + 1})
                i += 3
            elif value in replacing or value in data:
                call.data.add(i + 1)
                given = given or value in replacing
                programs.extend(call.args[i + 1 : i + 2] if value in replacing else [])
                i += 2
            elif value in files or value in others:
                given = given or value in files
                i += 2
            elif (eq and (option in replacing or option in data)) or short in replacing | data:
                call.data.add(i)
                given = given or option in replacing or short in replacing
                if option in replacing or short in replacing:
                    text = value.split("=", 1)[1] if option in replacing else value[2:]
                    programs.append(Arg(text, call.args[i].raw, call.args[i].dynamic))
                i += 1
            elif value in ("--files", "--type-list") or (eq and option in files):
                given = True
                i += 1
            elif (
                cluster := re.fullmatch(r"-[nrEsuz]+([ef])(.+)", value) if family == "sed" else None
            ):
                # `-nes/a/b/`: flags, then a script (or a script file) glued on
                call.data.add(i)
                given = True
                if cluster.group(1) == "e":
                    programs.append(Arg(cluster.group(2), call.args[i].raw, call.args[i].dynamic))
                i += 1
            elif value.startswith("-") and value != "-":
                i += 1
            else:
                break
        if not given and i < len(call.args):
            call.data.add(i)  # the pattern, script or filter
            programs.append(call.args[i])
        if any(re.match(r"--pre\b|--pager\b", v) for v in call.values):
            return refused(
                UNANALYSED_WRAPPER, call.shown, f"`{call.name}` would run a command on each file"
            )
        if family == "sed":
            call.writes = any(re.match(r"-[nrEsuz]*i|--in-place", v) for v in call.values)
        if family in ("sed", "awk"):
            return self._sed_awk(call, family, programs)
        return None

    def _sed_awk(self, call: Call, family: str, programs: list[Arg]) -> Denial | None:
        """sed scripts and awk programs may filter text, not read, write or run anything."""
        pairs = zip(call.values, call.values[1:], strict=False)
        files = [b for a, b in pairs if a in ("-f", "--file")]
        if denial := piped_file(call, *files):
            return denial
        if family == "awk" and any(re.match(r"-[li]|--load|--include", v) for v in call.values):
            return refused(AWK_SED_IO, call.shown, "it loads an awk extension or library")
        for program in programs:
            if program.dynamic or UNKNOWN in program.value:
                found: str | None = "is computed at run time"
            else:
                found = (sed_io if family == "sed" else awk_io)(program.value)
            if found:
                return refused(
                    AWK_SED_IO,
                    call.shown,
                    f"its {family} program {found}; a self-update cycle's {family} may only "
                    "filter text (use redirections and file tools instead)",
                )
        return None

    def _find(self, call: Call) -> Denial | None:
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            if value in FIND_PATTERNS:
                call.data.add(i + 1)
                i += 2
            elif value == "-fprintf":
                call.data.add(i + 2)
                i += 3
            elif value in FIND_EXEC:
                end = i + 1
                while end < len(call.args) and call.args[end].value not in (";", "+"):
                    end += 1
                # `{}` is a path under start points checked as paths, fine to read; it
                # may be a protected or credential file, so nothing may write to it.
                reads = (
                    posixpath.basename(call.args[i + 1].value) in READERS if end > i + 1 else False
                )
                nested = [
                    (Arg(CHECKED if a.value == "{}" and reads else UNKNOWN, a.raw, True))
                    if "{}" in a.value
                    else a
                    for a in call.args[i + 1 : end]
                ]
                call.data.update(range(i + 1, end + 1))
                denial = self.command(nested, call.state.fork(), False, None, call.depth + 1)
                if denial:
                    return denial
                i = end + 1
            else:
                i += 1
        return None
