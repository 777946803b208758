"""What a ``sed`` script, an ``awk`` program or shell arithmetic does beyond computing.

Both languages can read and write files and run commands from inside their program
text (sed's ``r``/``w``/``e`` commands and ``s///e``/``s///w`` flags; awk's ``getline``,
``system()``, ``print > file`` and pipes), which the self-update policy cannot see by
looking at the command line. These functions read the program and name the first such
construct, or say the program could not be read: the caller refuses either way.

Shell arithmetic (``$((x))``, ``$[x]``, ``let``, ``[[ x -eq 1 ]]``, array subscripts)
evaluates a variable's value as arithmetic again, so a value such as
``a[$(git push)]`` runs a command: arithmetic may only use names whose values are
plain. Pure.
"""

from __future__ import annotations

import re

# sed commands that take no argument, or an optional number (q, Q, l, L).
_SED_PLAIN = frozenset("=dDgGhHlLnNpPqQxzF")
_SED_IO = {
    "r": "reads a file (`r`)",
    "R": "reads a file (`R`)",
    "w": "writes a file (`w`)",
    "W": "writes a file (`W`)",
    "e": "runs a command (`e`)",
}


class _Unreadable(Exception):
    pass


def sed_io(script: str) -> str | None:
    """What ``script`` does besides editing the stream (a phrase), or None."""
    try:
        return _Sed(script).run()
    except (_Unreadable, IndexError):
        return "could not be read by the self-update policy"


class _Sed:
    def __init__(self, script: str) -> None:
        self.s, self.i = script, 0

    def run(self) -> str | None:
        s = self.s
        while True:
            while self.i < len(s) and s[self.i] in " \t\n;":
                self.i += 1
            if self.i >= len(s):
                return None
            if s[self.i] == "#":
                self._to_line_end()
                continue
            self._address()
            if self.i < len(s) and s[self.i] == ",":
                self.i += 1
                self._address()
            while self.i < len(s) and s[self.i] in " \t!":
                self.i += 1
            if self.i >= len(s):
                raise _Unreadable
            command = s[self.i]
            self.i += 1
            if command in _SED_IO:
                return _SED_IO[command]
            if command in "{}":
                continue
            if command == "s":
                found = self._substitute()
                if found:
                    return found
            elif command == "y":
                delimiter = self._char()
                self._delimited(delimiter)
                self._delimited(delimiter)
            elif command in "aic":
                self._text()
            elif command in ":bTtv":
                self._to_separator()
            elif command in _SED_PLAIN:
                while self.i < len(s) and s[self.i] in " \t0123456789":
                    self.i += 1
            else:
                raise _Unreadable

    def _char(self) -> str:
        if self.i >= len(self.s) or self.s[self.i] in "\n\\":
            raise _Unreadable
        self.i += 1
        return self.s[self.i - 1]

    def _delimited(self, delimiter: str) -> None:
        """Skip a regex or replacement up to the unescaped ``delimiter``."""
        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c == "\\":
                self.i += 2
                continue
            self.i += 1
            if c == delimiter:
                return
        raise _Unreadable

    def _address(self) -> None:
        s = self.s
        if self.i >= len(s):
            return
        c = s[self.i]
        if c.isdigit():
            while self.i < len(s) and (s[self.i].isdigit() or s[self.i] == "~"):
                self.i += 1
        elif c == "$":
            self.i += 1
        elif c in "/\\":
            self.i += 1
            delimiter = "/" if c == "/" else self._char()
            self._delimited(delimiter)
            while self.i < len(s) and s[self.i] in "IM":
                self.i += 1
        elif c in "+~" and self.i > 0 and s[self.i - 1] == ",":
            self.i += 1
            while self.i < len(s) and s[self.i].isdigit():
                self.i += 1

    def _substitute(self) -> str | None:
        delimiter = self._char()
        self._delimited(delimiter)
        self._delimited(delimiter)
        s = self.s
        while self.i < len(s) and s[self.i] not in ";\n}":
            flag = s[self.i]
            if flag == "e":
                return "runs the pattern space as a command (`s///e`)"
            if flag == "w":
                return "writes a file (`s///w`)"
            if not (flag in "gpiImM " or flag.isdigit()):
                raise _Unreadable
            self.i += 1
        return None

    def _text(self) -> None:
        """The text of ``a``, ``i`` or ``c``: to the end of the line, ``\\`` continuing it."""
        s = self.s
        while self.i < len(s):
            if s[self.i] == "\\":
                self.i += 2
                continue
            if s[self.i] == "\n":
                return
            self.i += 1

    def _to_line_end(self) -> None:
        end = self.s.find("\n", self.i)
        self.i = len(self.s) if end < 0 else end

    def _to_separator(self) -> None:
        while self.i < len(self.s) and self.s[self.i] not in ";\n":
            self.i += 1


# awk: the words and operators that reach outside the text being filtered. A `|` that is
# not `||`, and a `>` after `print`/`printf` in the same statement, are redirections.
_AWK_CALLS = re.compile(r"\b(system|getline)\b|@load\b|@include\b")
_AWK_PIPE = re.compile(r"(?<!\|)\|(?!\|)")
_AWK_PRINT_TO = re.compile(r"\bprintf?\b[^;{}\n]*>")
_AWK_STRINGS = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def awk_io(program: str) -> str | None:
    """What ``program`` does besides filtering text (a phrase), or None."""
    # String literals cannot run anything. Regex literals are left in: an alternation
    # (`/a|b/`) is refused too, strict rather than guessed.
    code = _AWK_STRINGS.sub('""', program)
    call = _AWK_CALLS.search(code)
    if call:
        return f"uses `{call.group()}`"
    if _AWK_PIPE.search(code):
        return "pipes to or from a command (`|`)"
    if _AWK_PRINT_TO.search(code):
        return "prints to a file (`print >`)"
    return None


_ARITHMETIC = re.compile(r"[\w\s+\-*/%()<>=!&|^~?:,#\[\].$]*")
_PLAIN_VALUE = re.compile(r"[\w\s+\-*/%()<>=!&|^~?:,#.]*")


def is_arithmetic(text: str) -> bool:
    """Whether a ``$((...))`` substitution's text is arithmetic, not a subshell's commands."""
    return (
        text.startswith("(")
        and text.endswith(")")
        and "$(" not in text
        and _ARITHMETIC.fullmatch(text) is not None
    )


def arithmetic_names(text: str) -> list[str]:
    """The variable names an arithmetic expression reads (numbers and bases left out)."""
    return re.findall(r"(?<![\w#])[A-Za-z_]\w*", text)


def plain_value(value: str) -> bool:
    """A value arithmetic can read without evaluating code: no subscript, no expansion."""
    return _PLAIN_VALUE.fullmatch(value) is not None


# A file the shell would run as a script: by its name, or its `#!` line.
SCRIPT_SUFFIXES = (".sh", ".bash", ".zsh", ".ksh", ".dash")
_SHELL_SHEBANG = re.compile(r"#![ \t]*\S*/(?:env[ \t]+)?(?:ba|z|k|da)?sh\b")


def is_shell_script(path: str, text: str) -> bool:
    """Whether writing `text` to `path` writes a shell script."""
    return path.endswith(SCRIPT_SUFFIXES) or bool(_SHELL_SHEBANG.match(text))
