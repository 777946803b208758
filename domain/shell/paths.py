"""Path and address handling shared by the analysis and its consumers: placeholders for
values only known at run time, normalising, brace expansion, the parts of an argument
that may be a path, and the host a URL or ``host:path`` target names. Pure and lexical.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath
import re
from collections.abc import Iterator
from urllib.parse import urlsplit

from domain.shell.allowlist import (
    words,
)

# --- paths -------------------------------------------------------------------------------

# Placeholders inside expanded shell words: a value only known at run time, a
# directory known to be outside the clone ($TMPDIR, $XDG_CONFIG_HOME, ...), one of
# the paths a loop or `find -exec` goes through (each already read as a path), and the
# PID of a job the agent's shell started (`$!`). Control characters, so no real command
# text can forge them (input containing them is not understood; \x05 is kept unused).
UNKNOWN = "\x01"
ELSEWHERE = "\x02"
CHECKED = "\x03"
JOB = "\x04"
FORGEABLE = re.compile("[\x00-\x05]")
GLOB = re.compile(r"[*?\[]")
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
GLUED_PATH = re.compile(r"^(?:/[^/\s]|~|\.\./)")
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`|,;)]+")
DEVICES = words(
    "/dev/null /dev/zero /dev/random /dev/urandom /dev/stdin /dev/stdout /dev/stderr /dev/tty"
)
SYSTEM_BIN = words(
    "/bin /sbin /usr/bin /usr/sbin /usr/local/bin /usr/local/sbin /opt/homebrew/bin"
    " /opt/homebrew/sbin"
)


def normalize(path: str) -> str:
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def brace_expand(word: str, budget: int = 64) -> list[str] | None:
    """The words a shell brace expansion makes of ``word`` (None: more than ``budget``)."""
    start = 0
    while True:
        opening = word.find("{", start)
        if opening < 0:
            return [word]
        depth, commas, closing = 0, [], -1
        for j in range(opening, len(word)):
            if word[j] == "{":
                depth += 1
            elif word[j] == "}":
                depth -= 1
                if depth == 0:
                    closing = j
                    break
            elif word[j] == "," and depth == 1:
                commas.append(j)
        if closing < 0:
            return [word]
        if not commas:
            start = opening + 1
            continue
        bounds = [opening, *commas, closing]
        out: list[str] = []
        for a, b in zip(bounds, bounds[1:], strict=False):
            expanded = brace_expand(word[:opening] + word[a + 1 : b] + word[closing + 1 :])
            if expanded is None or len(out) + len(expanded) > budget:
                return None
            out.extend(expanded)
        return out


def parent_glob(part: str) -> bool:
    """A pattern component that can match ``..`` (a leading dot is matched explicitly)."""
    return part.startswith(".") and bool(GLOB.search(part)) and fnmatch.fnmatchcase("..", part)


def host_of(target: str) -> str:
    """The host a URL, ``host[:port][/path]`` or ``[user@]host:path`` target names."""
    text = target.strip()
    if "://" not in text:
        if text.startswith(":"):
            return "localhost"  # httpie's `:8000/path` shorthand
        text = "//" + text
    try:
        return urlsplit(text).hostname or ""
    except ValueError:
        return ""


def is_loopback(host: str) -> bool:
    name = host.lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def remote_url(text: str) -> str | None:
    """The first URL (or VCS address) in ``text`` whose host is not loopback."""
    url: str
    for url in URL_IN_TEXT.findall(text):
        if not url.lower().startswith("file:") and not is_loopback(host_of(url)):
            return url
    lowered = text.lower()
    if lowered.startswith(("github:", "gitlab:", "bitbucket:", "gist:")):
        return text
    match = re.match(r"^(?:git\+)?[A-Za-z0-9._-]+@([^/:]+):", text)
    if match and not is_loopback(match.group(1)):
        return text
    return None


def is_system_program(value: str) -> bool:
    return value.startswith("/") and posixpath.dirname(normalize(value)) in SYSTEM_BIN


def path_candidates(value: str) -> Iterator[str]:
    """The parts of one argument that may be paths: itself, ``opt=PATH``, ``-IPATH``, ``@PATH``."""
    yield value
    if value.startswith("-"):
        if "=" in value:
            yield value.split("=", 1)[1]
        elif not value.startswith("--") and len(value) > 2 and GLUED_PATH.match(value[2:]):
            yield value[2:]
    elif "=" in value and re.match(r"^[A-Za-z_][\w.-]*=", value):
        yield value.split("=", 1)[1]
    if "@" in value:
        after = value.split("@", 1)[1]
        if after.startswith(("/", "~", "..", ELSEWHERE)):
            yield after
