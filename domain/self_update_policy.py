"""Code-owned tool-call policy for self-update cycles (SPEC §8.4).

A self-update cycle is an autonomous agent run (Claude Code, Codex, Gemini CLI, Copilot
CLI) that works in a contained git clone of a workspace. Every PreToolUse event of such a
session is judged here before any managed hook handler runs, and again on every handler's
``modify`` replacement. The policy is code rather than configuration on purpose: no
``TACHOGRAPH_HOOKS`` document, hook answer or prompt can relax it. The agent improving a
workspace must not be able to reach credentials, git remotes, package registries'
publish endpoints, the operator's checkout or the server's data, and it must not be able
to talk its way past the rule that says so.

What it refuses (``Denial.rule``):

- ``outside-clone``: a file tool's path, a patch target or a shell argument outside the
  clone (absolute paths, ``..`` escapes, ``~`` and ``$HOME``), and any unknown tool whose
  input values look like such paths.
- ``protected-path``: paths at or below ``protected_roots`` (a protected root that holds
  the clone still protects everything around it), and the agents' own hook and
  permission settings inside the clone (``.claude/settings*.json``,
  ``.gemini/settings.json``, ``.codex/``, ``.copilot/``, ``.github/hooks/``,
  ``.mcp.json``): governance, not workspace content. Writes (file tools other than
  readers, redirections, commands not on ``READERS``) to whatever
  domain/protected_paths.py protects: agent instructions (``CLAUDE.md``, ``AGENTS.md``,
  ``.claude/``...), git's own files (``.git/``, ``.gitattributes``) and CI.
- ``credentials``: credential and git-internal files anywhere, inside the clone too
  (``.env``, ``.env.*``, ``.envrc``, ``.ssh``, ``.git/config``, ``.git/hooks``, ``*.pem``,
  ``*.key``, ``.netrc``, ``.npmrc``, ``.pypirc``, ``.aws``, ``.docker/config.json``,
  ``id_rsa*`` and the other SSH key names, ``.gnupg``, ``.git-credentials``, ``.kube``),
  key and secret tools (``ssh-add``, ``gpg``, ``pass``, ...), ``git credential`` and
  reads of git configuration that can hold credentials (``git config --list``,
  ``remote.*``, ``url.*``, ``http.*``, ``credential.*``).
- ``git-remote``: ``git push``, ``git remote``, fetching or pulling from a configured
  remote, and the other commands that talk to remotes (``send-email``, ``lfs push``...).
- ``git-config``: ``git config --global``/``--system``/``--edit``, and writes of keys
  (also through ``git -c`` and ``GIT_CONFIG_*``) outside a short list of harmless ones:
  many git keys run commands (``core.sshCommand``, ``core.fsmonitor``, ``alias.*``).
- ``publish``: publishing, deploying, releasing and service control (``npm publish``,
  ``twine upload``, ``docker push``, ``kubectl``, ``terraform apply``, ``gh release``,
  ``gh pr merge``, ``systemctl``, ``reboot``, ``crontab``, ...).
- ``network``: fetches from anything but loopback (``curl``, ``wget``, ``nc``, ``ssh``,
  ``scp``, remote ``rsync``, ``git clone``/``fetch``/``pull`` of a URL, web fetch and
  search tools, cloud CLIs). Package installs are a decision: installing *named*
  packages from the configured index (``pip install x``, ``npm install``) is allowed,
  because which index that is belongs to the executor's environment and whether it is
  reachable to the sandbox; naming a non-loopback URL, VCS URL, index or registry (in an
  argument, an option or a ``*_INDEX_URL``/``*_REGISTRY``/``*_PROXY`` variable) is
  refused, and so are writes of package-manager configuration.
- ``sudo``: ``sudo``, ``su``, ``doas`` and friends, privileged containers.
- ``unrestricted-shell``: code the policy cannot see: ``eval``, command text computed at
  run time (``bash -c "$X"``), piping or substituting a program into a shell or
  interpreter (``| sh``, ``bash <(...)``), arithmetic over values only known at run
  time, ``tmux``/``screen``, and anything that does not parse. Nested commands
  (``bash -c``, ``$(...)``, ``find -exec``, ``env``, ``timeout``, ``uv run`` ...) are
  evaluated recursively and report the innermost rule.
- The closed list's rules (domain/shell_allowlist.py): ``dynamic-command-word``,
  ``unanalysed-wrapper``, ``inline-interpreter``, ``unresolved-path-expansion``,
  ``awk-sed-io``, ``exec-changing-env``, ``command-redefinition``, ``process-control``
  and ``unknown-command`` for any command without a judge here that is not on
  ``KNOWN_COMMANDS``. docs/autonomy.md lists what each refuses.

Shell text is parsed by a small quote-aware lexer (POSIX quoting as ``shlex`` does it,
plus the operators, redirections, here-documents and substitutions ``shlex`` does not
know), split on ``;``, ``&&``, ``||``, ``|``, ``&``, newlines and parentheses, and each
simple command is judged after its ``NAME=value`` prefixes and wrappers are peeled off.

Its limits, stated plainly: this is a policy on the tool calls an agent *declares*, not a
sandbox. A program the agent runs (a test suite, a script it wrote, a Makefile target,
a patch or archive it applies, a package's install hook) can still do whatever its OS
permissions allow; symlinks are not followed (judging is lexical, so the result does not depend
on the file system); recursive reads of a directory (``grep -r``, ``tar``) can include
credential or protected files it holds, and so can recursive writes (``rm -rf .``);
MCP tools are opaque. That is why cycles also
run in the executor's sandbox with a scrubbed environment and a clone that holds no
secrets: this policy is the first, legible layer, which refuses the obvious and tells the
agent why in one sentence it can act on.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import posixpath
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from domain.bash_syntax import (
    Group,
    Lexer,
    ParseError,
    Parser,
    Pipeline,
    Redirect,
    Simple,
    Word,
    expansion_parts,
)
from domain.protected_paths import PROTECTED_COMPONENTS, PROTECTED_NAMES, is_protected
from domain.shell_allowlist import (
    ALLOWLIST_RULES,
    AWK_SED_IO,
    COMMAND_REDEFINITION,
    DYNAMIC_COMMAND_WORD,
    EXEC_CHANGING_ENV,
    GIT_SUBCOMMANDS,
    INLINE_INTERPRETER,
    KNOWN_COMMANDS,
    PROCESS_CONTROL,
    PROCESS_CONTROL_TOOLS,
    READERS,
    UNANALYSED_WRAPPER,
    UNANALYSED_WRAPPERS,
    UNKNOWN_COMMAND,
    UNRESOLVED_PATH_EXPANSION,
    changes_execution,
    running_option,
    words,
)
from domain.shell_commands import (
    ALWAYS_NETWORK,
    ARITHMETIC_TESTS,
    CREDENTIAL_TOOLS,
    DATA_COMMANDS,
    DELIMITER_OPTIONS,
    DEPLOY_TOOLS,
    DEPLOY_VERBS,
    ENV_VALUES,
    FETCH_REFUSED,
    FETCH_REFUSED_SHORT,
    FETCH_VALUES,
    FETCHERS,
    FILE_TESTS,
    FIND_EXEC,
    FIND_PATTERNS,
    GIT_FETCH_VALUES,
    GIT_GLOBAL_VALUES,
    GIT_MESSAGE_OPTIONS,
    GIT_REMOTE_COMMANDS,
    GIT_SAFE_KEYS,
    GIT_SENSITIVE,
    GIT_WRITES,
    KEYWORDS,
    MANAGER_VALUES,
    NAMED,
    PACKAGE_MANAGERS,
    PATTERN_ALIASES,
    PATTERN_TOOLS,
    PRIVILEGE,
    PUBLISH_SUBVERBS,
    PUBLISH_VERBS,
    PYTHON,
    RUN_VALUES,
    RUN_VERBS,
    RUNNERS,
    SHELLS,
    SIMPLE_WRAPPERS,
    SOCKET_EXEC,
    SOCKET_TOOLS,
    SOCKET_VALUES,
    TASK_RUNNERS,
    TIMEOUT_VALUES,
    UNRESTRICTED,
    WATCH_VALUES,
)
from domain.shell_programs import (
    arithmetic_names,
    awk_io,
    is_arithmetic,
    plain_value,
    sed_io,
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


@dataclass(frozen=True)
class Denial:
    """A refused tool call: the rule that fired and one sentence naming what was refused."""

    rule: str
    reason: str


def evaluate(
    tool_name: str,
    tool_input: object,
    *,
    clone_root: str,
    protected_roots: Sequence[str] = (),
    cwd: str | None = None,
) -> Denial | None:
    """Judge one PreToolUse call of a self-update session: a Denial, or None to allow.

    ``tool_input`` is the tool's input as the agent sent it: usually a JSON object, a
    string for patch tools (Copilot's ``apply_patch``), an argv list for Codex's shell.
    ``clone_root`` and ``protected_roots`` must be absolute; ``cwd`` (the hook payload's
    working directory, when known) anchors relative paths and must lie inside the clone.
    An input the policy cannot evaluate is refused, never allowed.
    """
    scope = _Scope(clone_root, protected_roots)
    try:
        return _Tools(scope).evaluate(tool_name, tool_input, cwd)
    except Exception:  # fail closed: an input that breaks the evaluator is not allowed
        return Denial(
            UNRESTRICTED_SHELL,
            f"The {_code(tool_name)} call could not be evaluated by the self-update "
            "policy, so it is refused rather than allowed.",
        )


def evaluate_command(
    command: str,
    *,
    clone_root: str,
    protected_roots: Sequence[str] = (),
    cwd: str | None = None,
) -> Denial | None:
    """Judge one shell command line as a self-update session's shell tool would run it."""
    return evaluate(
        "Bash",
        {"command": command},
        clone_root=clone_root,
        protected_roots=protected_roots,
        cwd=cwd,
    )


# --- paths -------------------------------------------------------------------------------

# Placeholders inside expanded shell words: a value only known at run time, a
# directory known to be outside the clone ($TMPDIR, $XDG_CONFIG_HOME, ...), one of
# the paths a loop or `find -exec` goes through (each already checked, as written to
# or only as read), and the PID of a job the agent's shell started (`$!`). Control
# characters, so no real command text can forge them (input containing them is refused).
_UNKNOWN = "\x01"
_ELSEWHERE = "\x02"
_CHECKED = "\x03"
_JOB = "\x04"
_READ_ONLY = "\x05"
_FORGEABLE = re.compile("[\x00-\x05]")
_GLOB = re.compile(r"[*?\[]")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s\"'<>`|,;)]+")
_DEVICES = words(
    "/dev/null /dev/zero /dev/random /dev/urandom /dev/stdin /dev/stdout /dev/stderr /dev/tty"
)
_SYSTEM_BIN = words(
    "/bin /sbin /usr/bin /usr/sbin /usr/local/bin /usr/local/sbin /opt/homebrew/bin"
    " /opt/homebrew/sbin"
)
_SECRET_FILES = words(
    ".env .envrc .ssh .aws .gnupg .netrc _netrc .npmrc .pypirc .pgpass .git-credentials .kube"
)
_KEY_PREFIXES = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")
_KEY_SUFFIXES = (".pem", ".key", ".p12", ".pfx")
# What a glob has to be able to match to count as reaching a credential file.
_SECRET_SAMPLES = (
    *sorted(_SECRET_FILES),
    ".env.local",
    *_KEY_PREFIXES,
    "id_rsa.pub",
    "server.pem",
    "server.key",
    "cert.p12",
    "cert.pfx",
)
_SECRET_PAIRS = ((".git", "config"), (".git", "hooks"), (".docker", "config.json"))
# The agents' own hook, permission and MCP settings (None: the whole directory).
_AGENT_CONFIG: tuple[tuple[str, str | None], ...] = (
    (".claude", "settings.json"),
    (".claude", "settings.local.json"),
    (".gemini", "settings.json"),
    (".github", "hooks"),
    (".codex", None),
    (".copilot", None),
)
_AGENT_FILES = frozenset({".mcp.json"})
_SPECIAL_COMPONENTS = frozenset(
    {first for first, _ in _SECRET_PAIRS} | {first for first, _ in _AGENT_CONFIG} | _AGENT_FILES
)


def _normalize(path: str) -> str:
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/") if normal.startswith("//") else normal


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _matches(component: str, name: str) -> bool:
    """A path component (perhaps a glob) that is, or can match, the given name."""
    if _GLOB.search(component):
        return component not in ("*", "**") and fnmatch.fnmatchcase(name, component)
    return component == name


def _secret_name(component: str) -> bool:
    if _GLOB.search(component):
        return component not in ("*", "**") and any(
            fnmatch.fnmatchcase(sample, component) for sample in _SECRET_SAMPLES
        )
    return (
        component in _SECRET_FILES
        or component.startswith(".env.")
        or component.startswith(_KEY_PREFIXES)
        or component.endswith(_KEY_SUFFIXES)
    )


def _brace_expand(word: str, budget: int = 64) -> list[str] | None:
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
            expanded = _brace_expand(word[:opening] + word[a + 1 : b] + word[closing + 1 :])
            if expanded is None or len(out) + len(expanded) > budget:
                return None
            out.extend(expanded)
        return out


def _code(text: str, limit: int = 100) -> str:
    """Text quoted for a reason sentence: one line, bounded, in backticks."""
    flat = " ".join(re.sub("[\x01-\x05]", "?", text).split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return f"`{flat.replace('`', chr(39))}`"


class _Scope:
    """Where a self-update cycle may read and write: its clone, minus what is off-limits."""

    def __init__(self, clone_root: str, protected_roots: Sequence[str]) -> None:
        if not clone_root.startswith("/"):
            raise ValueError(f"clone_root must be an absolute path, not {clone_root!r}")
        for root in protected_roots:
            if not root.startswith("/"):
                raise ValueError(f"protected roots must be absolute paths, not {root!r}")
        self.clone = _normalize(clone_root)
        self.protected = tuple(_normalize(root) for root in protected_roots)

    def resolve(self, value: str, cwd: str) -> str:
        return _normalize(value if value.startswith("/") else f"{cwd}/{value}")

    def check(self, value: str, cwd: str, shown: str, *, write: bool = False) -> Denial | None:
        """Judge a path as written (relative to ``cwd``, with ``~`` and ``file://``)."""
        if not value:
            return None
        if _URL.match(value):
            if not value.lower().startswith("file:"):
                return None  # other URLs are the network rule's business
            value = urlsplit(value).path or "/"
        elif value.lower().startswith("file:"):
            value = value[5:] or "/"
        candidates = _brace_expand(value)
        if candidates is None:
            return Denial(
                UNRESTRICTED_SHELL,
                f"{_code(shown)} expands to too many paths for the self-update policy to check.",
            )
        for candidate in candidates:
            if candidate.startswith(("~", _ELSEWHERE)):
                return self._outside(shown)
            if any(_parent_glob(part) for part in candidate.split("/")):
                return _refused(
                    UNRESOLVED_PATH_EXPANSION, shown, "its pattern can match `..`, out of the clone"
                )
            denial = self.judge(self.resolve(candidate, cwd), shown, write=write)
            if denial:
                return denial
        return None

    def judge(self, path: str, shown: str, *, write: bool = False) -> Denial | None:
        """Judge a normalized absolute path."""
        if path in _DEVICES or path.startswith("/dev/fd/"):
            return None
        inside = _within(path, self.clone)
        for root in self.protected:
            if _within(path, root) and not (inside and _within(self.clone, root)):
                return Denial(
                    PROTECTED_PATH,
                    f"{_code(shown)} is inside {root}, which a self-update cycle may never "
                    "read or write.",
                )
        if not inside:
            return self._outside(shown)
        return self._inside(path[len(self.clone) :], shown) or (
            _protected_write(path[len(self.clone) :], shown) if write else None
        )

    def _outside(self, shown: str) -> Denial:
        return Denial(
            OUTSIDE_CLONE,
            f"{_code(shown)} is outside the clone {self.clone}; a self-update cycle may read "
            "and write only inside its clone.",
        )

    def _inside(self, relative: str, shown: str) -> Denial | None:
        parts = [p.lower() for p in relative.split("/") if p and p != "."]
        for i, part in enumerate(parts):
            if (
                part not in _SPECIAL_COMPONENTS
                and not _GLOB.search(part)
                and not _secret_name(part)
            ):
                continue  # the common case: an ordinary name
            following = parts[i + 1] if i + 1 < len(parts) else None
            if _secret_name(part) or any(
                _matches(part, first) and following is not None and _matches(following, second)
                for first, second in _SECRET_PAIRS
            ):
                return Denial(
                    CREDENTIALS,
                    f"{_code(shown)} is a credential or git-internal file; a self-update "
                    "cycle may not read or write it, even inside its clone.",
                )
            if any(_matches(part, name) for name in _AGENT_FILES) or any(
                _matches(part, first)
                and (second is None or (following is not None and _matches(following, second)))
                for first, second in _AGENT_CONFIG
            ):
                return Denial(
                    PROTECTED_PATH,
                    f"{_code(shown)} holds an agent's hook, permission or MCP settings, which "
                    "a self-update cycle may not touch.",
                )
        return None


def _parent_glob(part: str) -> bool:
    """A pattern component that can match ``..`` (a leading dot is matched explicitly)."""
    return part.startswith(".") and bool(_GLOB.search(part)) and fnmatch.fnmatchcase("..", part)


_PROTECTED_SAMPLES = PROTECTED_COMPONENTS | PROTECTED_NAMES | {".github"}


def _protected_write(relative: str, shown: str) -> Denial | None:
    """A write to what instructs an agent, git's own files or CI (domain/protected_paths)."""
    parts = [p for p in relative.split("/") if p and p != "."]
    if is_protected("/".join(parts) or ".") or any(
        _GLOB.search(part) and any(_matches(part.lower(), name) for name in _PROTECTED_SAMPLES)
        for part in parts
    ):
        return Denial(
            PROTECTED_PATH,
            f"{_code(shown)} is an agent instruction, git or CI file; a self-update cycle "
            "may read it with a command that only reads, never write it.",
        )
    return None


# --- network ------------------------------------------------------------------------------


def _host(target: str) -> str:
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


def _loopback(host: str) -> bool:
    name = host.lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _network_denial(subject: str, target: str) -> Denial:
    host = _host(target) if _UNKNOWN not in target else ""
    where = f"not {host}" if host else f"and {_code(target)} is not a loopback address"
    return Denial(
        NETWORK,
        f"{_code(subject)} is refused: a self-update cycle may reach only loopback "
        f"(127.0.0.1, localhost, ::1), {where}.",
    )


def _remote_url(text: str) -> str | None:
    """The first URL (or VCS address) in ``text`` whose host is not loopback."""
    url: str
    for url in _URL_IN_TEXT.findall(text):
        if not url.lower().startswith("file:") and not _loopback(_host(url)):
            return url
    lowered = text.lower()
    if lowered.startswith(("github:", "gitlab:", "bitbucket:", "gist:")):
        return text
    match = re.match(r"^(?:git\+)?[A-Za-z0-9._-]+@([^/:]+):", text)
    if match and not _loopback(match.group(1)):
        return text
    return None


# --- shell evaluation ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Arg:
    """One expanded word: its value (placeholders for the unknown), as written, dynamic?"""

    value: str
    raw: str
    dynamic: bool = False
    expanded: bool = False  # made by a parameter, command or arithmetic expansion


@dataclass
class _State:
    cwd: str
    variables: dict[str, str] = field(default_factory=dict)
    oldpwd: str = ""
    stack: list[str] = field(default_factory=list)
    functions: set[str] = field(default_factory=set)  # defined, their bodies judged

    def fork(self) -> _State:
        return _State(
            self.cwd, dict(self.variables), self.oldpwd, list(self.stack), set(self.functions)
        )


@dataclass
class _Call:
    """A command about to run, its wrappers peeled off."""

    name: str
    head: _Arg
    args: list[_Arg]
    state: _State
    piped: bool
    stdin: _Arg | None
    depth: int
    data: set[int] = field(default_factory=set)  # arguments that are not paths
    writes: bool = True  # whether its paths may be written (READERS only read)

    @property
    def shown(self) -> str:
        return " ".join(a.raw for a in [self.head, *self.args])

    @property
    def values(self) -> list[str]:
        return [a.value for a in self.args]

    def first_operand(self, value_options: frozenset[str] = frozenset()) -> int:
        """Index of the first argument that is not an option (len(args) if none)."""
        i = 0
        while i < len(self.args):
            value = self.args[i].value
            if value == "--":
                return i + 1
            if not value.startswith("-") or value == "-":
                return i
            i += 2 if value in value_options else 1
        return i


_MAX_DEPTH = 8
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\+?=")
_ELSEWHERE_VARIABLES = words(
    "TMPDIR TMP TEMP XDG_CONFIG_HOME XDG_DATA_HOME XDG_CACHE_HOME XDG_STATE_HOME"
    " XDG_RUNTIME_DIR GNUPGHOME OLDPWD"
)
# Variables whose value is a command some program will run.
_COMMAND_VARIABLES = words(
    "GIT_SSH_COMMAND GIT_SSH GIT_PAGER PAGER MANPAGER GIT_EDITOR GIT_SEQUENCE_EDITOR EDITOR"
    " VISUAL GIT_EXTERNAL_DIFF GIT_ASKPASS SSH_ASKPASS SUDO_ASKPASS GIT_PROXY_COMMAND"
    " PROMPT_COMMAND LESSOPEN LESSCLOSE BROWSER"
)
_SOURCE_VARIABLE = re.compile(r"INDEX_URL|INDEX|FIND_LINKS|REGISTRY|PROXY|MIRROR|REPOSITORY")
_STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_GLUED_PATH = re.compile(r"^(?:/[^/\s]|~|\.\./)")


def _refused(rule: str, subject: str, why: str) -> Denial:
    return Denial(rule, f"{_code(subject)} is refused: {why}.")


def _unseen(subject: str, why: str) -> Denial:
    return _refused(
        UNRESTRICTED_SHELL, subject, f"{why}, which the self-update policy cannot check"
    )


class _Shell:
    """Judges shell text command by command, the way a shell would run it."""

    def __init__(self, scope: _Scope) -> None:
        self.scope = scope
        handlers: dict[str, Callable[[_Call], Denial | None]] = {
            "git": self._git,
            "rsync": self._rsync,
            "openssl": self._openssl,
            "docker": self._docker,
            "podman": self._docker,
            "gh": self._gh,
            "service": self._service,
            "find": self._find,
            "cd": self._cd,
            "pushd": self._cd,
            "popd": self._popd,
            "export": self._declare,
            "declare": self._declare,
            "typeset": self._declare,
            "readonly": self._declare,
            "local": self._declare,
            "alias": self._alias,
            "trap": self._trap,
            "source": self._source,
            ".": self._source,
            "apply_patch": self._apply_patch,
            "applypatch": self._apply_patch,
            "watch": self._watch,
            "test": self._test,
            "[": self._test,
            "[[": self._test,
            "node": self._node,
            "nodejs": self._node,
            "perl": self._perl,
            "ruby": self._ruby,
            "php": self._php,
            "lua": self._lua,
            "luajit": self._lua,
            "Rscript": self._lua,
        }
        for names, handler in (
            (FETCHERS, self._fetcher),
            (SOCKET_TOOLS, self._socket),
            (PACKAGE_MANAGERS, self._package_manager),
            (SHELLS, self._shell),
            (DATA_COMMANDS, self._data),
            (frozenset(PATTERN_TOOLS) | frozenset(PATTERN_ALIASES), self._pattern_tool),
            (frozenset(DELIMITER_OPTIONS), self._delimited),
        ):
            for name in names:
                handlers[name] = handler
        handlers.update({"kill": self._kill, "hash": self._hash, "enable": self._enable})
        for name in ("read", "mapfile", "readarray", "let", "getopts", "printf", "unset"):
            handlers[name] = self._sets_variables
        self.handlers = handlers

    # -- structure --

    def script(self, src: str, state: _State, depth: int) -> Denial | None:
        if depth > _MAX_DEPTH:
            return _unseen(src, "commands are nested too deeply")
        try:
            lexer = Lexer(src)
            lexer.run()
            tree = Parser(lexer.tokens).parse()
        except (ParseError, RecursionError) as error:
            return Denial(
                UNRESTRICTED_SHELL,
                f"The shell command {_code(src)} could not be parsed ({error}), so the "
                "self-update policy refuses it rather than guess.",
            )
        return self._pipelines(tree, state, depth)

    def _pipelines(self, pipelines: list[Pipeline], state: _State, depth: int) -> Denial | None:
        for pipeline in pipelines:
            alone = len(pipeline.commands) == 1
            for index, command in enumerate(pipeline.commands):
                own = state if alone else state.fork()  # pipeline stages run in subshells
                if isinstance(command, Group):
                    denial = self._pipelines(command.body, own.fork(), depth) or self._redirects(
                        command.redirects, own, depth
                    )
                else:
                    denial = self._simple(command, own, index > 0, depth)
                if denial:
                    return denial
        return None

    # -- expansion --

    def _expand(self, word: Word, state: _State) -> tuple[_Arg, list[str]]:
        out: list[str] = []
        subs: list[str] = []
        dynamic = False
        for part in word.parts:
            if part.kind == "lit":
                out.append(part.text)
            elif part.kind == "var":
                value = self._variable(part.text, state)
                if not part.quoted and re.search(r"\s", value):
                    value = _UNKNOWN  # split into words the policy would have to count
                dynamic = dynamic or bool(re.search("[\x01\x03-\x05]", value))
                out.append(value)
            elif part.kind == "sub" and is_arithmetic(part.text):
                out.append(_UNKNOWN)
                dynamic = True
            elif part.kind == "sub":
                subs.append(part.text)
                known = self._known_substitution(part.text, state)
                dynamic = dynamic or known is None
                out.append(_UNKNOWN if known is None else known)
            elif part.kind == "proc":
                subs.append(part.text)
                out.append("/dev/fd/63")
            else:  # ${...} with operators: judge any substitution inside, value unknown
                subs.extend(p.text for p in expansion_parts(part.text) if p.kind == "sub")
                out.append(_UNKNOWN)
                dynamic = True
        value = "".join(out)
        if not re.fullmatch(r"(?:[A-Za-z_]\w*\+?=)?[\x03-\x05]", value):
            value = re.sub("[\x03-\x05]", _UNKNOWN, value)  # a marker inside a longer word
        expanded = any(part.kind != "lit" for part in word.parts)
        return _Arg(value, word.raw, dynamic, expanded), subs

    def _variable(self, name: str, state: _State) -> str:
        if name == "!":
            return _JOB
        if name == "HOME":
            return "~"
        if name == "PWD":
            return state.cwd
        if name in state.variables:
            return state.variables[name]
        if name in _ELSEWHERE_VARIABLES:
            return _ELSEWHERE
        return _UNKNOWN

    def _known_substitution(self, src: str, state: _State) -> str | None:
        command = " ".join(src.split())
        if command == "pwd":
            return state.cwd
        if command == "git rev-parse --show-toplevel":
            return self.scope.clone
        return None

    # -- one simple command --

    def _simple(self, command: Simple, state: _State, piped: bool, depth: int) -> Denial | None:
        expanded = [self._expand(word, state) for word in command.words]
        targets = [self._expand(r.target, state) for r in command.redirects if r.target is not None]
        subs = [s for _, found in expanded + targets for s in found]
        for redirect in command.redirects:
            doc = redirect.heredoc
            if doc is not None and not doc.quoted:
                subs.extend(p.text for p in expansion_parts(doc.body) if p.kind == "sub")
        for sub in subs:  # substitutions run before the command they feed
            denial = self.script(sub, state.fork(), depth + 1)
            if denial:
                return denial
        words = command.words
        for word in words:
            for part in word.parts:  # `${NAME:=value}` and `$((NAME=1))` assign too
                arithmetic = part.kind == "sub" and is_arithmetic(part.text)
                if arithmetic:
                    names = re.findall(r"([A-Za-z_]\w*)\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)", part.text)
                else:
                    names = (
                        re.findall(r"^([A-Za-z_]\w*):?=", part.text) if part.kind == "expr" else []
                    )
                denial = next(
                    (d for n in names if (d := self._env_name(n, word.raw, dynamic=True))), None
                )
                if arithmetic:
                    denial = denial or self._arithmetic(part.text, state, word.raw)
                elif part.kind == "expr":
                    denial = denial or self._subscript(part.text, state, word.raw)
                if denial:
                    return denial
        if command.defines is not None:
            return self._define(command.defines.raw, state)
        args = [arg for arg, _ in expanded]
        i = 0
        while i < len(words):
            raw = words[i].raw
            if raw in KEYWORDS and not words[i].quoted:
                i += 1
            elif raw == "function" and not words[i].quoted:
                denial = self._define(words[i + 1].raw, state) if i + 1 < len(words) else None
                if denial:
                    return denial
                i += 2
            elif raw in ("for", "select") and not words[i].quoted:
                return self._loop(args[i + 1 :], state) or self._redirects(
                    command.redirects, state, depth
                )
            elif raw == "case" and not words[i].quoted:
                return _unseen(raw, "`case` statements are not analysed")
            else:
                break
        assignments = []
        while i < len(words) and _ASSIGNMENT.match(words[i].raw):
            assignments.append(args[i])
            i += 1
        for assignment in assignments:
            denial = self._assignment(assignment, state, depth)
            if denial:
                return denial
        if i >= len(args):
            for assignment in assignments:
                self._assign(assignment, state)
            return self._redirects(command.redirects, state, depth)
        stdin = self._stdin(command.redirects, state)
        return self.command(args[i:], state, piped, stdin, depth) or self._redirects(
            command.redirects, state, depth
        )

    def _loop(self, header: list[_Arg], state: _State) -> Denial | None:
        if not header:
            return None
        name = header[0].value
        denial = self._env_name(name, " ".join(a.raw for a in header), dynamic=True)
        if denial:
            return denial
        items = header[2:] if len(header) > 1 and header[1].value == "in" else []
        writable = True
        for arg in items:
            denial = self._arg_path(arg, state)
            if denial:
                return denial
            writable = writable and not self._arg_path(arg, state, write=True)
        # Each item was checked as a path, so the variable is one of them (not an option).
        plain = bool(items) and all(not a.value.startswith("-") for a in items)
        state.variables[name] = (_CHECKED if writable else _READ_ONLY) if plain else _UNKNOWN
        return None

    def _stdin(self, redirects: list[Redirect], state: _State) -> _Arg | None:
        stdin = None
        for redirect in redirects:
            if redirect.fd not in ("", "0"):
                continue
            doc = redirect.heredoc
            if doc is not None:
                if doc.quoted:
                    stdin = _Arg(doc.body, "<<" + doc.delimiter)
                else:
                    arg, _ = self._expand(Word(expansion_parts(doc.body), doc.body, False), state)
                    stdin = _Arg(arg.value, "<<" + doc.delimiter, arg.dynamic)
            elif redirect.op == "<<<" and redirect.target is not None:
                stdin, _ = self._expand(redirect.target, state)
        return stdin

    def _redirects(self, redirects: list[Redirect], state: _State, depth: int) -> Denial | None:
        for redirect in redirects:
            if redirect.target is None or redirect.op == "<<<":
                continue
            target, _ = self._expand(redirect.target, state)
            if redirect.op in (">&", "<&") and re.fullmatch(r"\d+-?|-", target.value):
                continue
            denial = self._arg_path(target, state, write=redirect.op not in ("<", "<&"))
            if denial:
                return denial
        return None

    def _assign(self, arg: _Arg, state: _State) -> None:
        name, _, value = arg.value.partition("=")
        name = name.rstrip("+")
        if name in ("HOME", "PWD"):
            return
        kept = not arg.dynamic or value in (_JOB, _CHECKED, _READ_ONLY) or _UNKNOWN in value
        state.variables[name] = value if kept else _UNKNOWN

    def _assignment(self, arg: _Arg, state: _State, depth: int) -> Denial | None:
        """Judge ``NAME=value``: its value as a path, a source URL or a command."""
        exact, _, value = arg.value.partition("=")
        exact = exact.rstrip("+")
        name = exact.upper()
        if name in _COMMAND_VARIABLES and value:
            if arg.dynamic:
                return _unseen(arg.raw, f"`{name}` holds a command computed at run time")
            denial = self.script(value, state.fork(), depth + 1)
            if denial:
                return denial
        if name.startswith("GIT_CONFIG") and name not in (
            "GIT_CONFIG_NOSYSTEM",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_SYSTEM",
            "GIT_CONFIG",
        ):
            return _refused(
                GIT_CONFIG, arg.raw, "it injects git configuration through the environment"
            )
        if _SOURCE_VARIABLE.search(name) or name == "GOPROXY":
            remote = _remote_url(value)
            if remote or (name == "GOPROXY" and "direct" in value.lower()):
                return _network_denial(arg.raw, remote or value)
        if "://" in value or value.lower().startswith("file:"):
            pieces = [value]
        else:
            pieces = [piece for piece in value.split(":") if piece not in _SYSTEM_BIN]
        for piece in pieces:
            denial = self.scope.check(piece, state.cwd, arg.raw)
            if denial:
                return denial
        return self._env_name(exact, arg.raw, value, dynamic=arg.dynamic)

    def _env_name(self, name: str, shown: str, value: str = "", *, dynamic: bool) -> Denial | None:
        if changes_execution(name, value, dynamic=dynamic):
            return _refused(
                EXEC_CHANGING_ENV,
                shown,
                f"`{name}` changes which program runs or what it loads, which a self-update "
                "cycle may not set",
            )
        return None

    def _arithmetic(self, text: str, state: _State, shown: str) -> Denial | None:
        """Arithmetic evaluates names' values again: they must be plain and set right here."""
        for name in arithmetic_names(text):
            value = state.variables.get(name)
            if value is None or not plain_value(value):
                return _unseen(
                    shown,
                    f"arithmetic evaluates `{name}`, whose value is only known at run time and "
                    "may hold code",
                )
        if re.search("[\x01-\x05]", text):
            return _unseen(shown, "arithmetic evaluates a value only known at run time")
        return None

    def _subscript(self, text: str, state: _State, shown: str) -> Denial | None:
        """``${!name}`` and subscripts (``a[i]``, ``${a[i]}``), which bash evaluates."""
        if text.startswith("!"):
            return _unseen(shown, "`${!...}` expands a variable named at run time")
        index = re.search(r"\[(.*)\]", text, re.DOTALL)
        if index and index.group(1) not in ("@", "*"):
            return self._arithmetic(index.group(1), state, shown)
        return None

    def _define(self, name: str, state: _State, *, function: bool = True) -> Denial | None:
        """A function or alias named ``name``: refused if it would stand for a known command."""
        if name in self.handlers or name in NAMED or PYTHON.match(name):
            return _refused(
                COMMAND_REDEFINITION,
                name,
                "it redefines a command the self-update policy judges by its name",
            )
        if function:  # its body was judged; an alias's text is substituted, so not its name
            state.functions.add(name)
        return None

    # -- commands --

    def command(
        self,
        args: list[_Arg],
        state: _State,
        piped: bool,
        stdin: _Arg | None,
        depth: int,
    ) -> Denial | None:
        """Judge an argv: peel wrappers, apply the command's rules, check its paths."""
        if depth > _MAX_DEPTH:
            return _unseen(" ".join(a.raw for a in args), "commands are nested too deeply")
        while args:
            head = args[0]
            globbed = (_GLOB.search(head.value) and head.value not in ("[", "[[")) or len(
                _brace_expand(head.value) or "many"
            ) > 1
            if head.dynamic or head.expanded or _UNKNOWN in head.value or globbed:
                return _refused(
                    DYNAMIC_COMMAND_WORD,
                    " ".join(a.raw for a in args),
                    "its command name comes from an expansion, so only the shell knows "
                    "what it runs; write the command name out",
                )
            name = posixpath.basename(head.value) if "/" in head.value else head.value
            if "/" in head.value:
                denial = self._executable(head, state)
                if denial:
                    return denial
            if name in PRIVILEGE:
                shown = " ".join(a.raw for a in args)
                return _refused(
                    SUDO, shown, "a self-update cycle may not change user or gain privileges"
                )
            if name in UNANALYSED_WRAPPERS:
                return _refused(
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
                denial = self._arg_path(arg, state)
                if denial:
                    return denial
        if not args:
            return None
        call = _Call(name, args[0], args[1:], state, piped, stdin, depth)
        call.writes = name not in READERS
        if name in UNRESTRICTED:
            return _unseen(call.shown, UNRESTRICTED[name])
        if name in CREDENTIAL_TOOLS:
            return _refused(
                CREDENTIALS,
                call.shown,
                "key and secret tools are off-limits to a self-update cycle",
            )
        if name in ALWAYS_NETWORK:
            return _refused(
                NETWORK,
                call.shown,
                "a self-update cycle may reach only loopback and this tool talks to remote hosts",
            )
        if name in DEPLOY_TOOLS or (
            name in DEPLOY_VERBS
            and call.first_operand() < len(call.args)
            and call.args[call.first_operand()].value in DEPLOY_VERBS[name]
        ):
            return _refused(
                PUBLISH,
                call.shown,
                "a self-update cycle may not publish, deploy, release or change services",
            )
        if name in PROCESS_CONTROL_TOOLS:
            return _refused(
                PROCESS_CONTROL,
                call.shown,
                "a self-update cycle may signal only the jobs its own shell started "
                "(`kill %1`, `kill $!`)",
            )
        if option := running_option(name, call.values):
            return _refused(
                UNANALYSED_WRAPPER, call.shown, f"`{option}` runs a command or reads a file list"
            )
        if name == "date" and any(re.match(r"-s|--set", v) for v in call.values):
            return _refused(SUDO, call.shown, "it sets the system clock")
        handler = self.handlers.get(name)
        if handler is None and PYTHON.match(name):
            handler = self._python
        if handler is not None:
            denial = handler(call)
            if denial:
                return denial
        elif not (
            name in KNOWN_COMMANDS
            or name in state.functions
            or ("/" in call.head.value and not _system_program(call.head.value))
        ):
            return _refused(
                UNKNOWN_COMMAND,
                call.shown,
                f"`{name}` is not on the self-update policy's list of commands it understands",
            )

        for index, arg in enumerate(call.args):
            if index not in call.data:
                denial = self._arg_path(arg, state, write=call.writes)
                if denial:
                    return denial
        return None

    def _nested(self, call: _Call, start: int) -> Denial | None:
        """Judge the arguments from ``start`` on as a command of their own."""
        call.data.update(range(start, len(call.args)))
        return self.command(call.args[start:], call.state.fork(), False, None, call.depth + 1)

    def _nested_script(self, call: _Call, script: _Arg) -> Denial | None:
        if script.dynamic:
            return _unseen(call.shown, "it runs command text computed at run time")
        return self.script(script.value, call.state.fork(), call.depth + 1)

    def _executable(self, head: _Arg, state: _State) -> Denial | None:
        if _system_program(head.value):
            return None
        return self.scope.check(head.value, state.cwd, head.raw)

    def _arg_path(self, arg: _Arg, state: _State, *, write: bool = False) -> Denial | None:
        if arg.value == _CHECKED or (arg.value == _READ_ONLY and not write):
            return None  # one of the paths a loop or `find -exec` goes through, each checked
        if arg.dynamic or re.search("[\x01\x03-\x05]", arg.value):
            return _refused(
                UNRESOLVED_PATH_EXPANSION,
                arg.raw,
                "it names a path only known at run time, which the self-update policy cannot "
                "check; write the path out",
            )
        for candidate in _candidates(arg.value):
            denial = self.scope.check(candidate, state.cwd, arg.raw, write=write)
            if denial:
                return denial
        if write and re.match(r"-[^-]..", arg.value):  # `-oCLAUDE.md`: a glued output file
            return self.scope.check(arg.value[2:], state.cwd, arg.raw, write=True)
        return None

    def _unwrap(
        self, name: str, rest: list[_Arg], state: _State, depth: int
    ) -> tuple[list[_Arg], list[_Arg]] | Denial | None:
        """For a wrapper: (its own arguments, the command it runs); None if not one."""
        if name in SIMPLE_WRAPPERS:
            i = _skip_options(rest, SIMPLE_WRAPPERS[name])
            return rest[:i], rest[i:]
        if name == "timeout":
            i = _skip_options(rest, TIMEOUT_VALUES)
            return rest[: i + 1], rest[i + 1 :]
        if name == "busybox":
            return [], rest
        if name == "env":
            i = 0
            own: list[_Arg] = []
            while i < len(rest):
                value = rest[i].value
                if value in ("-S", "--split-string") or value.startswith(("-S", "--split-string=")):
                    if value in ("-S", "--split-string"):
                        if i + 1 >= len(rest):
                            return own, []
                        script, after = rest[i + 1], i + 2
                    else:
                        text = value.split("=", 1)[1] if value.startswith("--") else value[2:]
                        script, after = _Arg(text, rest[i].raw, rest[i].dynamic), i + 1
                    if script.dynamic:
                        return _unseen(script.raw, "`env -S` splits text computed at run time")
                    tail = " ".join(shlex.quote(a.value) for a in rest[after:])
                    denial = self.script(f"{script.value} {tail}", state.fork(), depth + 1)
                    return denial or (own, [])
                if value == "--":
                    i += 1
                    break
                if value.split("=", 1)[0] in ("-C", "--chdir") or value.startswith("-C"):
                    return _refused(
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
                elif _ASSIGNMENT.match(value):
                    denial = self._assignment(rest[i], state, depth)
                    if denial:
                        return denial
                    i += 1
                else:
                    break
            return own, rest[i:]
        return None

    # -- command families --

    def _data(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        return None

    def _delimited(self, call: _Call) -> Denial | None:
        options = DELIMITER_OPTIONS[call.name]
        for i, arg in enumerate(call.args):
            if arg.value in options:
                call.data.add(i + 1)
            elif any(arg.value.startswith(o) for o in options if not o.startswith("--")):
                call.data.add(i)
        return None

    def _test(self, call: _Call) -> Denial | None:
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

    def _pattern_tool(self, call: _Call) -> Denial | None:
        """grep, sed, awk, jq: the pattern, script or filter is not a path."""
        family = PATTERN_ALIASES.get(call.name, call.name)
        replacing, files, data, others = PATTERN_TOOLS[family]
        given = False
        programs: list[_Arg] = []
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
                    programs.append(_Arg(text, call.args[i].raw, call.args[i].dynamic))
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
                    programs.append(_Arg(cluster.group(2), call.args[i].raw, call.args[i].dynamic))
                i += 1
            elif value.startswith("-") and value != "-":
                i += 1
            else:
                break
        if not given and i < len(call.args):
            call.data.add(i)  # the pattern, script or filter
            programs.append(call.args[i])
        if any(re.match(r"--pre\b|--pager\b", v) for v in call.values):
            return _refused(
                UNANALYSED_WRAPPER, call.shown, f"`{call.name}` would run a command on each file"
            )
        if family == "sed":
            call.writes = any(re.match(r"-[nrEsuz]*i|--in-place", v) for v in call.values)
        if family in ("sed", "awk"):
            return self._sed_awk(call, family, programs)
        return None

    def _sed_awk(self, call: _Call, family: str, programs: list[_Arg]) -> Denial | None:
        """sed scripts and awk programs may filter text, not read, write or run anything."""
        pairs = zip(call.values, call.values[1:], strict=False)
        files = [b for a, b in pairs if a in ("-f", "--file")]
        if denial := _piped_file(call, *files):
            return denial
        if family == "awk" and any(re.match(r"-[li]|--load|--include", v) for v in call.values):
            return _refused(AWK_SED_IO, call.shown, "it loads an awk extension or library")
        for program in programs:
            if program.dynamic or _UNKNOWN in program.value:
                found: str | None = "is computed at run time"
            else:
                found = (sed_io if family == "sed" else awk_io)(program.value)
            if found:
                return _refused(
                    AWK_SED_IO,
                    call.shown,
                    f"its {family} program {found}; a self-update cycle's {family} may only "
                    "filter text (use redirections and file tools instead)",
                )
        return None

    def _find(self, call: _Call) -> Denial | None:
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
                    (_Arg(_CHECKED if a.value == "{}" and reads else _UNKNOWN, a.raw, True))
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

    def _cd(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        state = call.state
        i = call.first_operand()
        if i >= len(call.args):
            if call.name == "pushd":
                return None
            return self.scope.check("~", state.cwd, call.shown)
        target = call.args[i]
        if target.value == "-":
            new = state.oldpwd or state.cwd
        elif target.dynamic:
            return _refused(
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

    def _popd(self, call: _Call) -> Denial | None:
        state = call.state
        if state.stack:
            state.oldpwd, state.cwd = state.cwd, state.stack.pop()
        return None

    def _declare(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(re.fullmatch(r"[-+]\w*n\w*", v) for v in call.values):
            return _refused(
                EXEC_CHANGING_ENV, call.shown, "a name reference can set any variable, unseen"
            )
        if any(re.fullmatch(r"[-+]\w*i\w*", v) for v in call.values):
            return _unseen(call.shown, "an integer variable evaluates what it is given")
        for arg in call.args:
            subscript = re.match(r"[A-Za-z_]\w*(\[.*\])", arg.value, re.DOTALL)
            denial = (
                self._subscript(subscript.group(1), call.state, call.shown) if subscript else None
            )
            if denial:
                return denial
            if _ASSIGNMENT.match(arg.value) and not arg.value.startswith("-"):
                denial = self._assignment(arg, call.state, call.depth)
                if denial:
                    return denial
                self._assign(arg, call.state)
        return None

    def _alias(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        for arg in call.args:
            if "=" in arg.value:
                name, text = arg.value.split("=", 1)
                denial = self._define(name, call.state, function=False) or self._nested_script(
                    call, _Arg(text, arg.raw, arg.dynamic)
                )
                if denial:
                    return denial
        return None

    def _sets_variables(self, call: _Call) -> Denial | None:
        """``read``, ``mapfile``, ``let``, ``getopts``, ``printf -v``: the names they set."""
        call.data.update(range(len(call.args)))
        values = call.values
        if call.name in ("mapfile", "readarray") and any(v.startswith("-C") for v in values):
            return _unseen(call.shown, "its callback runs code for each line read")
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
                call.state.variables[name.group(1)] = _UNKNOWN
            if denial:
                return denial
        return None

    def _kill(self, call: _Call) -> Denial | None:
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
        dynamic = any(a.dynamic and a.value != _JOB for a in call.args)
        if targets and not dynamic and all(v.startswith("%") or v == _JOB for v in targets):
            return None
        return _refused(
            PROCESS_CONTROL,
            call.shown,
            "a self-update cycle may signal only the jobs its own shell started "
            "(`kill %1`, `kill $!`)",
        )

    def _hash(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(re.fullmatch(r"-\w*p\w*", v) for v in call.values):
            return _refused(
                COMMAND_REDEFINITION, call.shown, "`hash -p` makes a name run another program"
            )
        return None

    def _enable(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if any(v not in ("-a", "-p", "-s") for v in call.values):
            return _refused(
                COMMAND_REDEFINITION, call.shown, "`enable` loads or turns off shell builtins"
            )
        return None

    def _trap(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        if call.args and call.args[0].value not in ("-l", "-p", "-", ""):
            return self._nested_script(call, call.args[0])
        return None

    def _source(self, call: _Call) -> Denial | None:
        if call.args and call.args[0].value in _STDIN_NAMES:
            return self._stdin_program(call, shell=True)
        return _piped_file(call, call.args[0].value if call.args else "")

    def _watch(self, call: _Call) -> Denial | None:
        i = _skip_options(call.args, WATCH_VALUES)
        if any(a.value in ("-x", "--exec") for a in call.args[:i]):
            return self._nested(call, i)
        call.data.update(range(i, len(call.args)))
        rest = call.args[i:]
        if not rest:
            return None
        joined = _Arg(" ".join(a.value for a in rest), " ".join(a.raw for a in rest))
        return self._nested_script(
            call, _Arg(joined.value, joined.raw, any(a.dynamic for a in rest))
        )

    def _apply_patch(self, call: _Call) -> Denial | None:
        call.data.update(range(len(call.args)))
        text = call.args[0] if call.args else call.stdin
        if text is None:
            return None
        if text.dynamic:
            return _unseen(call.shown, "it applies a patch computed at run time")
        return _patch_paths(self.scope, text.value, call.state.cwd)

    # -- shells and interpreters --

    def _stdin_program(self, call: _Call, *, shell: bool) -> Denial | None:
        if call.piped:
            return _unseen(call.shown, "it runs a program piped into it")
        if call.stdin is None:
            return None
        if call.stdin.dynamic:
            return _unseen(call.shown, "it runs a program computed at run time")
        if shell:
            return self.script(call.stdin.value, call.state.fork(), call.depth + 1)
        return self._code(call, call.stdin)

    def _shell(self, call: _Call) -> Denial | None:
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
        if stdin_mode or i >= len(call.args) or call.args[i].value in _STDIN_NAMES:
            return self._stdin_program(call, shell=True)
        return _piped_file(call, call.args[i].value)

    def _interpreter(
        self,
        call: _Call,
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
                return self._code(call, call.args[i + 1])
            if option in code_options and "=" in value:
                call.data.add(i)
                return self._code(call, _Arg(value.split("=", 1)[1], value, call.args[i].dynamic))
            if value == "-m" and PYTHON.match(call.name) and i + 1 < len(call.args):
                return self._python_module(call, i + 1)
            i += 2 if value in value_options else 1
        if i >= len(call.args) or call.args[i].value in _STDIN_NAMES:
            return self._stdin_program(call, shell=False)
        if denial := _piped_file(call, call.args[i].value):
            return denial
        if (
            PYTHON.match(call.name)
            and posixpath.basename(call.args[i].value) == "setup.py"
            and any(a.value in ("upload", "register") for a in call.args[i + 1 :])
        ):
            return _refused(PUBLISH, call.shown, "a self-update cycle may not publish packages")
        return None

    def _code(self, call: _Call, code: _Arg) -> Denial | None:
        """Code given to an interpreter inline is code the self-update policy cannot read."""
        return _refused(
            INLINE_INTERPRETER,
            call.shown,
            f"`{call.name}` would run code given inline, which the self-update policy does not "
            "analyse; write it to a file in the clone and run that",
        )

    def _python(self, call: _Call) -> Denial | None:
        return self._interpreter(
            call, frozenset({"-c"}), frozenset({"-W", "-X", "--check-hash-based-pycs"}), "c"
        )

    def _python_module(self, call: _Call, index: int) -> Denial | None:
        module = call.args[index].value
        if module in ("pip", "pip3", "twine", "uv", "poetry", "pipx"):
            inner = _Call(
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
            return self._code(call, call.args[index])  # they run code given inline or piped
        return None

    def _node(self, call: _Call) -> Denial | None:
        return self._interpreter(
            call,
            frozenset({"-e", "--eval", "-p", "--print"}),
            frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader"}),
        )

    def _perl(self, call: _Call) -> Denial | None:
        return self._interpreter(call, frozenset(), frozenset({"-M", "-I", "-m"}), cluster="eE")

    def _ruby(self, call: _Call) -> Denial | None:
        return self._interpreter(call, frozenset(), frozenset({"-r", "-I"}), cluster="e")

    def _php(self, call: _Call) -> Denial | None:
        return self._interpreter(call, frozenset({"-r"}), frozenset({"-d", "-c"}), "r")

    def _lua(self, call: _Call) -> Denial | None:
        return self._interpreter(call, frozenset({"-e"}), frozenset({"-l"}))

    # -- network --

    def _fetcher(self, call: _Call) -> Denial | None:
        value_options = FETCH_VALUES.get(call.name, frozenset())
        refused = FETCH_REFUSED | FETCH_REFUSED_SHORT.get(call.name, frozenset())
        targets: list[str] = []
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            option, eq, inline = value.partition("=")
            takes_next = value in value_options
            if value.startswith("-") and not value.startswith("--") and len(value) > 2:
                # A cluster (`-sSLo out`) or a short option with its value glued (`-ofile`).
                for k, letter in enumerate(value[1:], start=1):
                    if f"-{letter}" in refused:
                        option = f"-{letter}"
                        break
                    if f"-{letter}" in value_options:
                        takes_next = k == len(value) - 1
                        break
            if option in refused:
                return _refused(
                    NETWORK,
                    call.shown,
                    f"`{option}` sends {call.name} to hosts the self-update policy cannot see",
                )
            if option == "--url":
                following = call.args[i + 1].value if i + 1 < len(call.args) else ""
                targets.append(inline if eq else following)
                i += 1 if eq else 2
            elif value.startswith("--") and eq:
                i += 1
            elif takes_next:
                i += 2
            elif value.startswith("-") and value != "-":
                i += 1
            else:
                targets.append(value)
                i += 1
        if call.name in ("http", "https", "xh", "xhs") and targets:
            if re.fullmatch(r"[A-Z]+", targets[0]) and len(targets) > 1:
                targets = targets[1:]
            targets = targets[:1]  # the rest are request items
        for target in targets:
            if target.lower().startswith("file:"):
                continue  # a local file: judged as a path
            if _UNKNOWN in target or not _loopback(_host(target)):
                return _network_denial(call.shown, target)
        return None

    def _socket(self, call: _Call) -> Denial | None:
        targets: list[str] = []
        listening = False
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            if value in SOCKET_EXEC or value.startswith("-c") and call.name == "ncat":
                return _unseen(call.shown, "it runs a command on a network connection")
            if value in ("-x", "--proxy"):
                return _refused(NETWORK, call.shown, "it connects through a proxy")
            if value in ("-l", "--listen") or (
                value.startswith("-") and "l" in value[1:] and not value.startswith("--")
            ):
                listening = listening or call.name in ("nc", "ncat", "netcat")
            if value in SOCKET_VALUES and call.name not in ("dig", "host", "nslookup"):
                i += 2
                continue
            if value.startswith(("-", "+")) and value != "-":
                i += 1
                continue
            target = value[1:] if value.startswith("@") else value
            if not re.fullmatch(r"\d+([-:]\d+)?", target) and (
                call.name not in ("dig", "host", "nslookup")
                or "." in target
                or ":" in target
                or target.lower() == "localhost"
            ):
                targets.append(target)
            i += 1
        for target in targets:
            if not _loopback(_host(target) or target):
                return _network_denial(call.shown, target)
        if listening and not targets:
            return _refused(NETWORK, call.shown, "it listens on every network interface")
        return None

    def _openssl(self, call: _Call) -> Denial | None:
        if not call.args or call.args[0].value not in ("s_client", "s_server", "s_time"):
            return None
        if call.args[0].value == "s_server":
            return _refused(NETWORK, call.shown, "it listens for network connections")
        values = call.values
        for i, value in enumerate(values):
            if value == "-connect" and i + 1 < len(values):
                if not _loopback(_host(values[i + 1])):
                    return _network_denial(call.shown, values[i + 1])
                return None
        return _network_denial(call.shown, "the default host")

    def _rsync(self, call: _Call) -> Denial | None:
        for arg in call.args:
            value = arg.value
            if value in ("-e", "--rsh") or value.startswith("--rsh="):
                return _refused(
                    NETWORK, call.shown, "rsync over a remote shell reaches other hosts"
                )
            if not value.startswith("-") and (
                "::" in value or value.startswith("rsync://") or re.match(r"^[^/:]+:", value)
            ):
                return _network_denial(call.shown, value)
        return None

    def _package_manager(self, call: _Call) -> Denial | None:
        name, values = call.name, call.values
        if name in RUNNERS:
            return self._run(call, -1)
        start = call.first_operand(MANAGER_VALUES)
        verb = values[start] if start < len(values) else ""
        following = values[start + 1] if start + 1 < len(values) else ""
        if name == "go" and (
            verb == "get" or (verb in ("install", "run") and any("@" in v for v in values))
        ):
            return _refused(
                NETWORK, call.shown, "it fetches Go modules, and a self-update cycle may not"
            )
        if (name, verb) == ("deno", "eval") or (
            name in ("bun", "deno") and {"-e", "--eval", "-p", "--print"} & set(values)
        ):
            return self._code(call, call.args[0])
        if verb in PUBLISH_VERBS.get(name, ()) or following in PUBLISH_SUBVERBS.get(
            (name, verb), ()
        ):
            return _refused(
                PUBLISH, call.shown, "a self-update cycle may not publish or release packages"
            )
        if name in TASK_RUNNERS:
            scripts = values[start:]
        elif name in ("npm", "pnpm", "yarn", "bun"):
            scripts = [following] if verb in ("run", "run-script") else [verb]
        else:
            scripts = []
        if any(re.match(r"^(?:publish|deploy)(?:$|[:_-])", s) for s in scripts):
            return _refused(PUBLISH, call.shown, "a self-update cycle may not publish or deploy")
        if name in TASK_RUNNERS:
            return _piped_file(call, *values)
        if self._writes_user_config(name, verb, following, values):
            return _refused(
                OUTSIDE_CLONE,
                call.shown,
                "it writes the package manager's user configuration, outside the clone",
            )
        if (name, verb) in RUN_VERBS:
            return self._run(call, start)
        if name == "uv" and verb == "tool" and following == "run":
            return self._run(call, start + 1)
        return self._urls(call, len(values))

    def _writes_user_config(self, name: str, verb: str, following: str, values: list[str]) -> bool:
        if name in ("npm", "pnpm", "yarn", "bun") and (
            verb == "set" or verb == "config" and following in ("set", "delete", "rm", "edit")
        ):
            return True
        if name in ("pip", "pip3") and verb == "config" and following in ("set", "unset", "edit"):
            return True
        if name == "poetry" and verb == "config":
            return not {"--local", "--list"} & set(values) and len(values) > 2
        if name in ("conda", "mamba") and verb == "config":
            return not {"--show", "--get", "--describe", "--show-sources"} & set(values)
        return name == "go" and verb == "env" and bool({"-w", "-u"} & set(values))

    def _urls(self, call: _Call, end: int) -> Denial | None:
        """Refuse package sources named by URL (or VCS address) that are not loopback."""
        for arg in call.args[:end]:
            for candidate in (arg.value, arg.value.split("=", 1)[-1]):
                remote = _remote_url(candidate)
                if remote:
                    return _network_denial(call.shown, remote)
        return None

    def _run(self, call: _Call, verb_index: int) -> Denial | None:
        """``uv run CMD``, ``npx PKG``, ``bundle exec CMD``: judge the command they run."""
        rest = call.args[verb_index + 1 :]
        for j, arg in enumerate(rest):
            if arg.value in ("-c", "--call") and call.name in ("npx", "npm", "pnpm"):
                call.data.update(range(verb_index + 1, len(call.args)))
                script = rest[j + 1] if j + 1 < len(rest) else _Arg("", "")
                return self._urls(call, verb_index + 1 + j) or self._nested_script(call, script)
            if not arg.value.startswith("-"):
                break
        start = verb_index + 1 + _skip_options(rest, RUN_VALUES)
        # The sources (options and the package a runner fetches) are checked here; what
        # the command does with its own arguments is judged as that command.
        return self._urls(call, start + 1) or self._nested(call, start)

    # -- git and friends --

    def _git(self, call: _Call) -> Denial | None:
        values, pairs, i = call.values, [], 0
        while i < len(values):
            value = values[i]
            if call.args[i].dynamic or _UNKNOWN in value:
                return _refused(
                    DYNAMIC_COMMAND_WORD,
                    call.shown,
                    "an expansion comes before its git subcommand, so only the shell knows "
                    "what git runs; write the subcommand and its options out",
                )
            if value.startswith("--exec-path="):
                return _refused(
                    EXEC_CHANGING_ENV, call.shown, "it makes git run programs from elsewhere"
                )
            if value == "--config-env" or value.startswith("--config-env="):
                return _refused(
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
        rest = call.args[i + 1 :]
        base = i + 1
        if sub in GIT_REMOTE_COMMANDS or (
            sub == "lfs" and rest and rest[0].value in ("push", "pull", "fetch")
        ):
            return _refused(
                GIT_REMOTE,
                call.shown,
                "a self-update cycle works in its own clone and may not push to, fetch from "
                "or change git remotes",
            )
        for pair in pairs:
            key = pair.split("=", 1)[0].lower()
            if not _safe_git_key(key):
                return _refused(
                    GIT_CONFIG,
                    call.shown,
                    f"`{key}` is not a git setting a self-update cycle may change",
                )
        if sub.startswith("credential"):
            return _refused(
                CREDENTIALS, call.shown, "git credentials are off-limits to a self-update cycle"
            )
        if sub and sub not in GIT_SUBCOMMANDS:
            return _refused(
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
            return _refused(NETWORK, call.shown, "it reads an archive from a remote")
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
                        _Arg(inline, call.args[j].raw, call.args[j].dynamic)
                        if eq
                        else (call.args[j + 1] if j + 1 < len(call.args) else _Arg("", ""))
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

    def _git_fetch(self, call: _Call, sub: str, base: int) -> Denial | None:
        operands: list[str] = []
        j = base
        while j < len(call.args):
            value = call.args[j].value
            option = value.split("=", 1)[0]
            if option in ("--upload-pack", "--receive-pack", "--exec") or (
                value == "-u" and sub == "clone"
            ):
                return _unseen(call.shown, "it runs a command of its own on the remote side")
            if option in ("-c", "--config"):
                pair = (
                    value.split("=", 1)[1]
                    if option == "--config" and "=" in value
                    else (call.args[j + 1].value if j + 1 < len(call.args) else "")
                )
                if not _safe_git_key(pair.split("=", 1)[0].lower()):
                    return _refused(
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
            return _refused(
                GIT_REMOTE,
                call.shown,
                "it talks to the clone's configured remote, and a self-update cycle may not "
                "fetch from or push to git remotes",
            )
        kind = _repository_kind(operands[0])
        if kind == "exec":
            return _unseen(call.shown, "its transport runs a command")
        if kind == "url":
            if _loopback(_host(operands[0])):
                return None
            return _network_denial(call.shown, operands[0])
        if kind == "name" and sub != "clone":
            return _refused(
                GIT_REMOTE,
                call.shown,
                f"`{operands[0]}` names a git remote, and a self-update cycle may not fetch "
                "from or push to git remotes",
            )
        return None  # a local path: checked with the other arguments

    def _git_submodule(self, call: _Call, base: int) -> Denial | None:
        rest = call.values[base:]
        verb = next((v for v in rest if not v.startswith("-")), "")
        if verb == "add":
            operands = [v for v in rest[rest.index("add") + 1 :] if not v.startswith("-")]
            if (
                operands
                and _repository_kind(operands[0]) == "url"
                and not _loopback(_host(operands[0]))
            ):
                return _network_denial(call.shown, operands[0])
            if operands and _repository_kind(operands[0]) == "exec":
                return _unseen(call.shown, "its transport runs a command")
        if verb in ("update", "sync") and "--no-fetch" not in rest:
            return _refused(GIT_REMOTE, call.shown, "it fetches submodules from their remotes")
        if verb == "foreach":
            start = base + rest.index("foreach") + 1
            scripts = [a for a in call.args[start:] if a.value != "--recursive"]
            call.data.update(range(start, len(call.args)))
            if scripts:
                joined = _Arg(
                    " ".join(a.value for a in scripts),
                    " ".join(a.raw for a in scripts),
                    any(a.dynamic for a in scripts),
                )
                return self._nested_script(call, joined)
        return None

    def _git_config(self, call: _Call, base: int) -> Denial | None:
        values = call.values[base:]
        if {"--global", "--system"} & set(values):
            return _refused(
                GIT_CONFIG,
                call.shown,
                "it changes the user's or the system's git configuration, outside the clone",
            )
        if {"-e", "--edit"} & set(values) or next(
            (v for v in values if not v.startswith("-")), ""
        ) == "edit":
            return _refused(GIT_CONFIG, call.shown, "it opens the git configuration in an editor")
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
            if not _safe_git_key(key):
                return _refused(
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
            return _refused(
                CREDENTIALS,
                call.shown,
                "git configuration can hold remote URLs and credentials, which a self-update "
                "cycle may not read",
            )
        return None

    def _git_grep(self, call: _Call, base: int) -> Denial | None:
        given = False
        for j in range(base, len(call.args)):
            value = call.args[j].value
            if re.match(r"-O|--open-files-in-pager", value):
                return _refused(
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

    def _docker(self, call: _Call) -> Denial | None:
        values = call.values
        i = 0
        while i < len(values) and values[i].startswith("-"):
            option, eq, inline = values[i].partition("=")
            if option in ("-H", "--host"):
                host = inline if eq else (values[i + 1] if i + 1 < len(values) else "")
                if not host.startswith("unix://") and not _loopback(_host(host)):
                    return _network_denial(call.shown, host)
            i += (
                1
                if eq
                or option
                not in ("-H", "--host", "--context", "-c", "--config", "-l", "--log-level")
                else 2
            )
        verb = values[i] if i < len(values) else ""
        following = values[i + 1] if i + 1 < len(values) else ""
        if (
            verb in ("push", "login")
            or (verb in ("image", "manifest", "plugin") and following == "push")
            or (
                verb in ("build", "buildx", "compose")
                and ("--push" in values or following == "push")
            )
        ):
            return _refused(
                PUBLISH,
                call.shown,
                "a self-update cycle may not publish images or log in to registries",
            )
        if verb in ("run", "create", "exec") or (
            verb == "container" and following in ("run", "create", "exec")
        ):
            for j in range(i + 1, len(values)):
                value = values[j]
                option, eq, inline = value.partition("=")
                if (
                    value == "--privileged"
                    or option in ("--cap-add", "--device", "--security-opt")
                    or (
                        option in ("--pid", "--network", "--net", "--ipc", "--uts", "--userns")
                        and (inline if eq else values[j + 1] if j + 1 < len(values) else "")
                        == "host"
                    )
                ):
                    return _refused(SUDO, call.shown, "it gives a container privileges on the host")
                if option in ("-v", "--volume", "--mount"):
                    spec = inline if eq else values[j + 1] if j + 1 < len(values) else ""
                    call.data.update({j} if eq else {j, j + 1})
                    source = (
                        spec.split(":", 1)[0]
                        if option != "--mount"
                        else next(
                            (
                                kv.split("=", 1)[1]
                                for kv in spec.split(",")
                                if kv.startswith(("source=", "src="))
                            ),
                            "",
                        )
                    )
                    if source.startswith(("/", "~", ".", _ELSEWHERE)) or option == "--mount":
                        denial = self.scope.check(source, call.state.cwd, spec)
                        if denial:
                            return denial
        return None

    def _gh(self, call: _Call) -> Denial | None:
        values = call.values
        start = call.first_operand(frozenset({"-R", "--repo"}))
        verb = values[start] if start < len(values) else ""
        following = values[start + 1] if start + 1 < len(values) else ""
        if (
            verb == "release"
            or (verb == "pr" and following == "merge")
            or (verb == "repo" and following in ("delete", "create", "edit"))
        ):
            return _refused(
                PUBLISH, call.shown, "a self-update cycle may not publish, release or merge"
            )
        return _refused(
            NETWORK,
            call.shown,
            "a self-update cycle may reach only loopback, and `gh` talks to GitHub",
        )

    def _service(self, call: _Call) -> Denial | None:
        if {
            "start",
            "stop",
            "restart",
            "reload",
            "force-reload",
            "try-restart",
            "condrestart",
            "enable",
            "disable",
        } & set(call.values):
            return _refused(PUBLISH, call.shown, "a self-update cycle may not change services")
        return None


def _piped_file(call: _Call, *programs: str) -> Denial | None:
    """A program read from a pipe or process substitution (``bash <(...)``): unseen."""
    for program in programs:
        if program in _STDIN_NAMES or program.startswith(("/dev/fd/", "/proc/")):
            return _unseen(call.shown, "it runs a program from a pipe or process substitution")
    return None


def _system_program(value: str) -> bool:
    return value.startswith("/") and posixpath.dirname(_normalize(value)) in _SYSTEM_BIN


def _skip_options(args: list[_Arg], value_options: frozenset[str]) -> int:
    i = 0
    while i < len(args):
        value = args[i].value
        if value == "--":
            return i + 1
        if not value.startswith("-") or value == "-":
            return i
        i += 2 if value in value_options else 1
    return i


def _candidates(value: str) -> Iterator[str]:
    """The parts of one argument that may be paths: itself, ``opt=PATH``, ``-IPATH``, ``@PATH``."""
    yield value
    if value.startswith("-"):
        if "=" in value:
            yield value.split("=", 1)[1]
        elif not value.startswith("--") and len(value) > 2 and _GLUED_PATH.match(value[2:]):
            yield value[2:]
    elif "=" in value and re.match(r"^[A-Za-z_][\w.-]*=", value):
        yield value.split("=", 1)[1]
    if "@" in value:
        after = value.split("@", 1)[1]
        if after.startswith(("/", "~", "..", _ELSEWHERE)):
            yield after


def _safe_git_key(key: str) -> bool:
    return key in GIT_SAFE_KEYS or key.startswith(("color.", "advice."))


def _repository_kind(operand: str) -> str:
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
    if operand.startswith(("/", ".", "~", _ELSEWHERE)) or "/" in operand or operand == ".":
        return "path"
    return "name"


_PATCH_LINE = re.compile(r"^\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+?)\s*$", re.M)
_DIFF_LINE = re.compile(r"^(?:\+\+\+|---) (.+?)(?:\t.*)?\s*$", re.M)


def _looks_like_patch(text: str) -> bool:
    head = text.lstrip()
    return head.startswith(("*** Begin Patch", "diff --git")) or (
        head.startswith("--- ") and "\n+++ " in head
    )


def _patch_paths(scope: _Scope, text: str, cwd: str) -> Denial | None:
    """Judge every file a patch adds, updates, deletes or moves."""
    if "*** Begin Patch" in text:
        paths = _PATCH_LINE.findall(text)
    else:
        paths = [re.sub(r"^[ab]/", "", p) for p in _DIFF_LINE.findall(text)]
    for path in paths:
        denial = _tool_path(scope, path, cwd)
        if denial:
            return denial
    return None


def _tool_path(scope: _Scope, value: str, cwd: str, *, write: bool = True) -> Denial | None:
    """A path a file tool was given (tools do not expand, but ``~`` and ``$HOME`` count)."""
    if re.search(r"[\x00-\x1f]", value):
        return Denial(
            OUTSIDE_CLONE,
            f"{_code(value)} contains control characters, so the self-update policy cannot "
            "tell where it points.",
        )
    path = re.sub(r"^(?:\$HOME|\$\{HOME\})(?=/|$)", "~", value.strip())
    return scope.check(path, cwd, value, write=write)


# --- tools -----------------------------------------------------------------------------

_SHELL_TOOLS = words(
    "bash shell run_shell_command exec_command shell_command local_shell container.exec write_bash"
)
_PATCH_TOOLS = frozenset({"apply_patch", "applypatch"})
_FETCH_TOOLS = frozenset({"webfetch", "web_fetch", "fetch"})
_SEARCH_TOOLS = frozenset({"websearch", "web_search", "google_web_search"})
_GLOB_TOOLS = frozenset({"glob"})
# Tools that only read the paths they are given; every other tool may write them.
_READ_TOOLS = words(
    "read notebookread glob grep ls read_file read_many_files list_directory"
    " search_file_content view list_dir grep_files view_image"
)
_PATH_KEYS = (
    "file_path",
    "notebook_path",
    "path",
    "paths",
    "absolute_path",
    "dir_path",
    "directory",
    "cwd",
    "workdir",
    "working_directory",
    "target_file",
    "filename",
    "file",
    "files",
    "old_path",
    "new_path",
)
_WORKDIR_KEYS = ("workdir", "cwd", "directory", "dir_path", "working_directory")
_GLOB_KEYS = ("include", "glob")
# Tools whose other input fields are content or prose, not paths.
_KNOWN_TOOLS = (
    _SHELL_TOOLS
    | _PATCH_TOOLS
    | _FETCH_TOOLS
    | _SEARCH_TOOLS
    | frozenset(
        {
            "read",
            "write",
            "edit",
            "multiedit",
            "notebookedit",
            "notebookread",
            "glob",
            "grep",
            "ls",
            "todowrite",
            "todoread",
            "task",
            "agent",
            "exitplanmode",
            "bashoutput",
            "killshell",
            "killbash",
            "skill",
            "slashcommand",
            "askuserquestion",
            "read_file",
            "write_file",
            "replace",
            "read_many_files",
            "list_directory",
            "search_file_content",
            "write_todos",
            "view",
            "create",
            "str_replace_editor",
            "str_replace",
            "insert",
            "undo_edit",
            "update_plan",
            "view_image",
            "list_dir",
            "grep_files",
            "read_bash",
            "stop_bash",
            "list_bash",
            "report_intent",
        }
    )
)


class _Tools:
    def __init__(self, scope: _Scope) -> None:
        self.scope = scope

    def evaluate(self, tool_name: str, tool_input: object, cwd: str | None) -> Denial | None:
        base = self.scope.clone
        if cwd:
            base = self.scope.resolve(cwd, self.scope.clone)
            denial = self.scope.judge(base, cwd)
            if denial:
                return Denial(
                    denial.rule,
                    f"The agent's working directory {_code(cwd)} is not a place a self-update "
                    f"cycle may work ({denial.rule}), so every tool call is refused.",
                )
        name = tool_name.strip().lower()
        if name in UNRESTRICTED:
            return _unseen(tool_name, UNRESTRICTED[name])
        if name in _SEARCH_TOOLS:
            return _refused(
                NETWORK,
                tool_name,
                "web search reaches the internet, and a self-update cycle may reach only loopback",
            )
        if name == "save_memory":
            return _refused(
                OUTSIDE_CLONE, tool_name, "it writes the agent's global memory, outside the clone"
            )
        if isinstance(tool_input, str):
            if _looks_like_patch(tool_input):
                return _patch_paths(self.scope, tool_input, base)
            if name in _SHELL_TOOLS:
                return self._shell(tool_input, base)
            return self._loose(tool_input, base)
        if not isinstance(tool_input, Mapping):
            if name in _SHELL_TOOLS and isinstance(tool_input, list):
                return self._argv(tool_input, base)
            return self._loose(tool_input, base)
        if name in _SHELL_TOOLS:
            return self._shell_tool(tool_input, base)
        for value in tool_input.values():
            for text in _strings(value):
                if _looks_like_patch(text):
                    denial = _patch_paths(self.scope, text, base)
                    if denial:
                        return denial
        if name in _FETCH_TOOLS:
            return self._fetch(tool_name, tool_input)
        for key in _PATH_KEYS:
            for value in _strings(tool_input.get(key)):
                denial = _tool_path(self.scope, value, base, write=name not in _READ_TOOLS)
                if denial:
                    return denial
        root = next(iter(_strings(tool_input.get("path") or tool_input.get("dir_path"))), "")
        glob_base = self.scope.resolve(root, base) if root and not root.startswith("~") else base
        keys = _GLOB_KEYS + (("pattern",) if name in _GLOB_TOOLS else ())
        for key in keys:
            for value in _strings(tool_input.get(key)):
                denial = _tool_path(self.scope, value, glob_base, write=False)
                if denial:
                    return denial
        if name not in _KNOWN_TOOLS:
            return self._loose(tool_input, base)
        return None

    def _shell_tool(self, tool_input: Mapping[str, object], base: str) -> Denial | None:
        for key in _WORKDIR_KEYS:
            for value in _strings(tool_input.get(key)):
                denial = _tool_path(self.scope, value, base, write=False)
                if denial:
                    return denial
                base = self.scope.resolve(value, base)
        command = next(
            (tool_input[k] for k in ("command", "cmd", "input") if tool_input.get(k) is not None),
            None,
        )
        if command is None:
            return None
        if isinstance(command, str):
            return self._shell(command, base)
        if isinstance(command, list) and all(isinstance(a, str) for a in command):
            return self._argv(command, base)
        return _unseen("command", "its command has an unexpected shape")

    def _shell(self, command: str, base: str) -> Denial | None:
        if _FORGEABLE.search(command):
            return _unseen(command, "it contains control characters")
        return _Shell(self.scope).script(command, _State(base), 0)

    def _argv(self, argv: list[object], base: str) -> Denial | None:
        if not all(isinstance(a, str) for a in argv):
            return _unseen("command", "its argv has an unexpected shape")
        words = [str(a) for a in argv]
        if any(_FORGEABLE.search(w) for w in words):
            return _unseen(shlex.join(words), "it contains control characters")
        args = [_Arg(w, shlex.quote(w)) for w in words]
        return _Shell(self.scope).command(args, _State(base), False, None, 0)

    def _fetch(self, tool_name: str, tool_input: Mapping[str, object]) -> Denial | None:
        urls = list(_strings(tool_input.get("url"))) + list(_strings(tool_input.get("urls")))
        if not urls:
            urls = _URL_IN_TEXT.findall(" ".join(_strings(tool_input.get("prompt"))))
        if not urls:
            return _refused(
                NETWORK,
                tool_name,
                "it names no loopback URL, and a self-update cycle may fetch only from loopback",
            )
        for url in urls:
            if not _loopback(_host(url)):
                return _network_denial(f"{tool_name} {url}", url)
        return None

    def _loose(self, value: object, base: str, depth: int = 0) -> Denial | None:
        """An unknown tool: every string that looks like a path is judged as one."""
        if depth > 16:
            return None
        if isinstance(value, str):
            if _path_like(value):
                return _tool_path(self.scope, value, base)
            return None
        items: list[object] = []
        if isinstance(value, Mapping):
            items = list(value.values())
        elif isinstance(value, list | tuple):
            items = list(value)
        for item in items:
            denial = self._loose(item, base, depth + 1)
            if denial:
                return denial
        return None


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        if value:
            yield value
    elif isinstance(value, list | tuple):
        for item in value:
            if isinstance(item, str) and item:
                yield item


def _path_like(value: str) -> bool:
    if not value or any(c.isspace() for c in value):
        return False
    if _URL.match(value):
        return value.lower().startswith("file:")
    return value.startswith((".", "~", "/", "$HOME", "${HOME}")) or "/" in value
