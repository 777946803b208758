"""A refusal (``Denial``), the rule names, and the one-sentence reasons the walk gives.

The walker's judges answer a ``Denial`` or None; the same refusals, for the kinds of
rule that mean "cannot see", are what the analysis reports as not understood.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from domain.shell.allowlist import (
    ALLOWLIST_RULES,
    AWK_SED_IO,
    DYNAMIC_COMMAND_WORD,
    INLINE_INTERPRETER,
    UNANALYSED_WRAPPER,
    UNKNOWN_COMMAND,
    UNRESOLVED_PATH_EXPANSION,
)
from domain.shell.paths import (
    UNKNOWN,
    host_of,
)

OUTSIDE_CLONE = "outside-clone"
PROTECTED_PATH = "protected-path"
CREDENTIALS = "credentials"
GIT_REMOTE = "git-remote"
GIT_CONFIG = "git-config"
PUBLISH = "publish"
NETWORK = "network"
SUDO = "sudo"
UNRESTRICTED_SHELL = "unrestricted-shell"
RULES = (
    frozenset(
        {
            OUTSIDE_CLONE,
            PROTECTED_PATH,
            CREDENTIALS,
            GIT_REMOTE,
            GIT_CONFIG,
            PUBLISH,
            NETWORK,
            SUDO,
            UNRESTRICTED_SHELL,
        }
    )
    | ALLOWLIST_RULES
)

# The refusals that mean the walk could not follow what would run or which path it names
# (as opposed to a rule about what may run): the analysis reports these as not understood.
CANNOT_SEE = frozenset(
    {
        UNRESTRICTED_SHELL,
        DYNAMIC_COMMAND_WORD,
        UNANALYSED_WRAPPER,
        INLINE_INTERPRETER,
        UNRESOLVED_PATH_EXPANSION,
        AWK_SED_IO,
        UNKNOWN_COMMAND,
    }
)


@dataclass(frozen=True)
class Denial:
    """A refused tool call: the rule that fired and one sentence naming what was refused."""

    rule: str
    reason: str


def quoted(text: str, limit: int = 100) -> str:
    """Text quoted for a reason sentence: one line, bounded, in backticks."""
    flat = " ".join(re.sub("[\x01-\x05]", "?", text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return f"`{flat.replace('`', chr(39))}`"


def network_denial(subject: str, target: str) -> Denial:
    host = host_of(target) if UNKNOWN not in target else ""
    where = f"not {host}" if host else f"and {quoted(target)} is not a loopback address"
    return Denial(
        NETWORK,
        f"{quoted(subject)} is refused: a self-update cycle may reach only loopback "
        f"(127.0.0.1, localhost, ::1), {where}.",
    )


def refused(rule: str, subject: str, why: str) -> Denial:
    return Denial(rule, f"{quoted(subject)} is refused: {why}.")


def unseen(subject: str, why: str) -> Denial:
    return refused(UNRESTRICTED_SHELL, subject, f"{why}, which the self-update policy cannot check")
