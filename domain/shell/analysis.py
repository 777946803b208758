"""``analyse_tool_call``: what one tool call would do, as a ``ToolCallAnalysis``.

The same walk the self-update rules judge with (domain/shell/tools.py and
domain/shell/walker.py), run with a ``PathRules`` that records every path instead of
judging it and a ``Facts`` that keeps what the walk meets: each simple command and its
argv (through ``bash -c``, ``eval`` of literals, substitutions, pipelines, heredocs,
wrappers), the paths read and written (resolved against ``cwd``), the network endpoints,
the git operations and their remotes, and what it could not follow. Refusals that are
rules about what may run (``git push``, ``sudo``...) are not facts and are not reported;
the commands they concern are. Pure.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from domain.shell.paths import DEVICES, ELSEWHERE, URL, brace_expand, normalize
from domain.shell.result import Facts, ToolCallAnalysis
from domain.shell.tools import Tools
from domain.shell.verdict import UNRESTRICTED_SHELL, Denial, quoted

# Placeholders for values only known at run time (``$TMPDIR``'s stands for a directory).
RUN_TIME = re.compile("[\x01\x03-\x05]")


class _Recorder:
    """``PathRules`` that judges nothing and writes every path down."""

    def __init__(self, facts: Facts, toplevel: str | None) -> None:
        self.facts = facts
        self.clone = toplevel

    def resolve(self, value: str, cwd: str) -> str:
        if value.startswith(("/", "~")):
            # `~` is the home directory whatever the cwd: `cd ~ && cat .ssh/id_rsa`
            # reads `~/.ssh/id_rsa`, never `<cwd>/~/.ssh/id_rsa`.
            return normalize(value)
        return normalize(f"{cwd}/{value}")

    def check(self, value: str, cwd: str, shown: str, *, write: bool = False) -> Denial | None:
        if not value or value.startswith("-"):
            return None  # an option or stdin; a path glued to one (`--out=x`) comes on its own
        if RUN_TIME.search(value):
            return None  # a value only known at run time (`X=$(cmd)`), not a path it names
        if URL.match(value):
            if not value.lower().startswith("file:"):
                return None  # a network address, not a path
            value = urlsplit(value).path or "/"
        elif value.lower().startswith("file:"):
            value = value[5:] or "/"
        candidates = brace_expand(value)
        if candidates is None:
            self.facts.unknown(
                f"{quoted(shown)} expands to too many paths to list.", UNRESTRICTED_SHELL
            )
            return None
        for candidate in candidates:
            if candidate.startswith(ELSEWHERE):
                self.facts.path(shown, write=write)  # `$TMPDIR/x`: as written
            elif candidate.startswith("~"):
                self.facts.path(candidate, write=write)
            else:
                path = self.resolve(candidate, cwd)
                if path not in DEVICES and not path.startswith("/dev/fd/"):
                    self.facts.path(path, write=write)
        return None


def analyse_tool_call(
    tool_name: str, tool_input: object, cwd: str, *, toplevel: str | None = None
) -> ToolCallAnalysis:
    """What a tool call would do, run from ``cwd`` (the hook payload's absolute cwd).

    ``tool_input`` is the input as the agent sent it: a JSON object, a patch string, or
    an argv list for Codex's shell. ``toplevel``, when known, is the top directory of the
    git work tree (what ``$(git rev-parse --show-toplevel)`` prints). An input the
    analysis cannot take apart is reported in ``not_understood``, never guessed at.
    """
    if not cwd.startswith("/"):
        raise ValueError(f"cwd must be an absolute path, not {cwd!r}")
    facts = Facts()
    try:
        denial = Tools(_Recorder(facts, toplevel), facts).evaluate(tool_name, tool_input, cwd)
    except Exception:  # an input that breaks the walk is not understood, whatever it is
        facts.unknown(f"The {quoted(tool_name)} call could not be analysed.", UNRESTRICTED_SHELL)
    else:
        if denial is not None:
            facts.refusal(denial)
    return facts.freeze(tool_name, cwd)
