"""The closed lists the self-update policy allows from, and the rules that name refusals.

The policy (domain/self_update_policy.py) judges each command of a self-update agent's
shell text. A command it has no judge for is allowed only when its name is on
``KNOWN_COMMANDS``: ordinary tools whose arguments are files and data, which the policy
checks as such. Anything else is refused as ``unknown-command`` rather than guessed at.
The other lists name what is refused with a rule of its own, so the agent is told why
in a sentence it can act on. Pure data and predicates.
"""

from __future__ import annotations

DYNAMIC_COMMAND_WORD = "dynamic-command-word"
UNANALYSED_WRAPPER = "unanalysed-wrapper"
INLINE_INTERPRETER = "inline-interpreter"
UNRESOLVED_PATH_EXPANSION = "unresolved-path-expansion"
AWK_SED_IO = "awk-sed-io"
EXEC_CHANGING_ENV = "exec-changing-env"
COMMAND_REDEFINITION = "command-redefinition"
PROCESS_CONTROL = "process-control"
UNKNOWN_COMMAND = "unknown-command"
ALLOWLIST_RULES = frozenset(
    {
        DYNAMIC_COMMAND_WORD,
        UNANALYSED_WRAPPER,
        INLINE_INTERPRETER,
        UNRESOLVED_PATH_EXPANSION,
        AWK_SED_IO,
        EXEC_CHANGING_ENV,
        COMMAND_REDEFINITION,
        PROCESS_CONTROL,
        UNKNOWN_COMMAND,
    }
)


def words(text: str) -> frozenset[str]:
    """The set of the space-separated words in ``text``: the tables' notation."""
    return frozenset(text.split())


# Commands with no judge of their own that the policy allows: their arguments are
# options, data and paths, and every path is checked. (Commands with a judge, such as
# git, the interpreters, shells, package managers and fetchers, are allowed or refused
# by it.)
KNOWN_COMMANDS = words(
    # files and text
    "ls cat head tail wc sort uniq cut paste join column tr diff cmp comm file stat du df"
    " tree realpath readlink basename dirname pwd mkdir rmdir rm cp mv ln touch chmod"
    " install truncate tee nl fold fmt expand unexpand rev tac od hexdump xxd strings"
    " md5sum sha1sum sha256sum sha512sum b2sum cksum base64 iconv split csplit dd shuf"
    " tar gzip gunzip zcat bzip2 bunzip2 xz unxz zip unzip patch"
    # the environment, read only
    " date cal uname whoami id nproc uptime free ps pgrep lsof printenv locale bc"
    " getconf tput clear which"
    # shell builtins and keywords the parser hands on as commands
    " break continue times dirs help getopts unalias fg bg disown"
    # building, testing and checking code
    " pytest py.test ruff mypy black isort flake8 pylint pyright coverage tox nox"
    " tsc eslint prettier jest vitest mocha gofmt rustc rustfmt cmake ninja gcc g++ cc"
    " clang clang++ javac java shellcheck shfmt"
)

# Wrappers that run another command in a form the policy does not follow: refused
# whatever they run. (The simple, fixed forms — ``timeout``, ``nice``, ``nohup``,
# ``env``, ``time``, ``stdbuf``, ``setsid``, ``command``, ``exec`` — are unwrapped and
# the inner command judged.)
UNANALYSED_WRAPPERS = words(
    "xargs flock taskset chrt script parallel strace ltrace prlimit numactl cpulimit"
    " xvfb-run dbus-run-session dbus-launch faketime entr valgrind gdb lldb rr perf"
    " catchsegv setarch linux32 linux64 expect"
)

# Signals to processes: only jobs of the agent's own shell (`kill %1`, `kill $!`).
PROCESS_CONTROL_TOOLS = words("pkill killall skill snice fuser renice")

# git subcommands the policy knows; any other (an external `git-*` program, an alias
# set elsewhere, a transport helper) is refused as unknown.
GIT_SUBCOMMANDS = words(
    "add am annotate apply archive bisect blame branch bundle cat-file check-attr"
    " check-ignore check-ref-format checkout cherry cherry-pick clean clone commit"
    " commit-tree config count-objects describe diff diff-files diff-index diff-tree"
    " fetch filter-branch for-each-ref format-patch fsck gc grep hash-object"
    " help init log lfs ls-files ls-remote ls-tree merge merge-base mktree mv"
    " name-rev notes prune pull range-diff read-tree rebase reflog reset restore revert"
    " rev-list rev-parse rm shortlog show show-ref sparse-checkout stage stash status"
    " submodule switch symbolic-ref tag update-index update-ref var version"
    " whatchanged worktree write-tree"
)

# Commands that only read the files they are given: they may read the agents'
# instruction files and git's own files that are not credentials (`cat CLAUDE.md`,
# `test -d .git`). Every other command's paths are taken as written.
READERS = words(
    "cat head tail wc cut paste join column diff cmp comm file stat du ls realpath readlink"
    " basename dirname nl fold rev tac od hexdump strings md5sum sha1sum sha256sum"
    " sha512sum b2sum cksum grep egrep fgrep zgrep rg ag ack jq gojq awk gawk mawk nawk"
    " test [ [[ echo printf pwd"
)

# --- the environment -------------------------------------------------------------------

# Variables that choose which program runs, what it loads or how a shell splits words.
_EXEC_NAMES = words(
    "PATH BASH_ENV ENV IFS CDPATH PS4 PROMPT_COMMAND SHELLOPTS BASHOPTS GLOBIGNORE HOME"
    " XDG_CONFIG_HOME ZDOTDIR INPUTRC SHELL CONFIG_SHELL MAKEFLAGS MFLAGS MAKE CC CXX CPP"
    " LD AR NODE_OPTIONS NODE_PATH GCONV_PATH LOCPATH NLSPATH TAR_OPTIONS GREP_OPTIONS"
    " PAGER MANPAGER SYSTEMD_PAGER EDITOR VISUAL BROWSER LESSOPEN LESSCLOSE LESS"
    " JAVA_TOOL_OPTIONS _JAVA_OPTIONS JDK_JAVA_OPTIONS MAVEN_OPTS GRADLE_OPTS RUSTC_WRAPPER"
    " RUSTC RUSTDOC GOFLAGS GOTOOLCHAIN GOROOT DOCKER_HOST DOCKER_CONFIG PS0 PS1 PS2 PS3"
    " JAVA_HOME VIRTUAL_ENV UV_PYTHON MAKEFILES"
)
_EXEC_PREFIXES = ("GIT_", "LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "BASH_", "CARGO_", "RUSTUP_")
# Exceptions: names in those families that carry data only.
_DATA_NAMES = words(
    "GIT_AUTHOR_NAME GIT_AUTHOR_EMAIL GIT_AUTHOR_DATE GIT_COMMITTER_NAME GIT_COMMITTER_EMAIL"
    " GIT_COMMITTER_DATE GIT_TERMINAL_PROMPT GIT_OPTIONAL_LOCKS GIT_MERGE_AUTOEDIT"
    " GIT_LITERAL_PATHSPECS PYTHONDONTWRITEBYTECODE PYTHONUNBUFFERED PYTHONHASHSEED"
    " PYTHONIOENCODING PYTHONUTF8 PYTHONFAULTHANDLER"
)
# Exceptions by value: a pager that is no pager, an editor that accepts as it is.
_HARMLESS_VALUES = {
    "GIT_PAGER": frozenset({"", "cat"}),
    "PAGER": frozenset({"", "cat"}),
    "MANPAGER": frozenset({"", "cat"}),
    "GIT_EDITOR": frozenset({"true", ":"}),
    "GIT_SEQUENCE_EDITOR": frozenset({"true", ":"}),
    "EDITOR": frozenset({"true", ":"}),
    "VISUAL": frozenset({"true", ":"}),
}


def changes_execution(name: str, value: str, *, dynamic: bool) -> bool:
    """Whether setting ``name`` to ``value`` changes what a program runs or loads.

    ``PYTHONPATH`` is allowed with a value known in advance: its entries are checked as
    paths like any other, so it points only into the clone, whose code the agent runs
    anyway (``python -m pytest`` imports it).
    """
    if name in _DATA_NAMES:
        return False
    if name == "PYTHONPATH":
        return dynamic
    if name in _HARMLESS_VALUES:
        return dynamic or value not in _HARMLESS_VALUES[name]
    return (
        name in _EXEC_NAMES
        or name.startswith(_EXEC_PREFIXES)
        or name.lower().startswith("npm_config_")
        or name.endswith(("_CONFIG_FILE", "_ASKPASS"))
    )


# --- options of known commands that run another program -------------------------------

# Long options, and short options (also inside a cluster such as `-cIf`), by command.
_RUNNING_LONG = {
    "tar": (
        "--to-command",
        "--checkpoint-action",
        "--use-compress-program",
        "--info-script",
        "--new-volume-script",
        "--rsh-command",
        "--rmt-command",
        "--files-from",
    ),
    "zip": ("--unzip-command",),
    "split": ("--filter",),
    "sort": ("--compress-program", "--files0-from"),
    "install": ("--strip-program",),
    "wc": ("--files0-from",),
    "du": ("--files0-from",),
    "patch": ("--ed",),
    "pylint": ("--init-hook",),
}
_RUNNING_SHORT = {"tar": "IFT", "cmake": "E", "patch": "e"}
_RUNNING_EXACT = {"zip": ("-TT",), "gcc": ("-wrapper",), "g++": ("-wrapper",), "cc": ("-wrapper",)}


def running_option(name: str, values: list[str]) -> str | None:
    """The option of a known command that runs (or reads a list of) what the line does not
    show (`tar --to-command`, `tar cIf`, `split --filter`, `cmake -E`), or None."""
    for index, value in enumerate(values):
        if value in _RUNNING_EXACT.get(name, ()):
            return value
        option = value.split("=", 1)[0]
        if option in _RUNNING_LONG.get(name, ()):
            return option
        letters = _RUNNING_SHORT.get(name, "")
        # A cluster after one dash, or tar's old style: a first word of letters only.
        cluster = value[1:] if value.startswith("-") and not value.startswith("--") else ""
        if not cluster and name == "tar" and index == 0 and value.isalpha():
            cluster = value
        if letters and any(letter in letters for letter in cluster):
            return value
    return None
