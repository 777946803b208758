"""The shell walker: shell text taken apart the way bash would run it.

Parses with domain/shell/syntax.py, walks pipelines, groups and simple commands in order,
expands words (variables the walk has seen set, ``$PWD``, ``$(pwd)``; anything else is
a placeholder for "only known at run time"), runs substitutions before the command they
feed, and hands each command to the command runner and its family's judge
(domain/shell/commands/). Each path it meets goes to its ``PathRules``, each fact to
``facts``; what a judge finds a command does (a ``Denial`` named like the rule that
cares) becomes a fact too, and the walk goes on to the end of the call.
"""

from __future__ import annotations

import re

from domain.shell.allowlist import (
    COMMAND_REDEFINITION,
    EXEC_CHANGING_ENV,
    changes_execution,
)
from domain.shell.command import CommandRunner
from domain.shell.commands.builtins import Builtins
from domain.shell.commands.files import FileCommands
from domain.shell.commands.git import GitCommands
from domain.shell.commands.interpreters import Interpreters
from domain.shell.commands.network import NetworkCommands
from domain.shell.commands.packages import PackageManagers
from domain.shell.commands.services import ServiceCommands
from domain.shell.paths import (
    CHECKED,
    ELSEWHERE,
    JOB,
    SYSTEM_BIN,
    UNKNOWN,
    remote_url,
)
from domain.shell.programs import (
    arithmetic_names,
    is_arithmetic,
    is_shell_script,
    plain_value,
)
from domain.shell.result import Facts
from domain.shell.state import (
    _COMMAND_VARIABLES,
    _SOURCE_VARIABLE,
    ASSIGNMENT,
    ELSEWHERE_VARIABLES,
    MAX_DEPTH,
    Arg,
    PathRules,
    State,
)
from domain.shell.syntax import (
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
from domain.shell.tables import (
    DATA_COMMANDS,
    DELIMITER_OPTIONS,
    FETCHERS,
    KEYWORDS,
    NAMED,
    PACKAGE_MANAGERS,
    PATTERN_ALIASES,
    PATTERN_TOOLS,
    PYTHON,
    SHELLS,
    SOCKET_TOOLS,
)
from domain.shell.verdict import (
    GIT_CONFIG,
    UNRESTRICTED_SHELL,
    Denial,
    network_denial,
    quoted,
    refused,
    unseen,
)

# Each command with a judge of its own, and the method of Shell that judges it.
_JUDGES: dict[str, str] = {
    "git": "_git",
    "rsync": "_rsync",
    "openssl": "_openssl",
    "docker": "_docker",
    "podman": "_docker",
    "gh": "_gh",
    "service": "_service",
    "find": "_find",
    "cd": "_cd",
    "pushd": "_cd",
    "popd": "_popd",
    "export": "_declare",
    "declare": "_declare",
    "typeset": "_declare",
    "readonly": "_declare",
    "local": "_declare",
    "alias": "_alias",
    "trap": "_trap",
    "source": "_source",
    ".": "_source",
    "apply_patch": "_apply_patch",
    "applypatch": "_apply_patch",
    "watch": "_watch",
    "test": "_test",
    "[": "_test",
    "[[": "_test",
    "node": "_node",
    "nodejs": "_node",
    "perl": "_perl",
    "ruby": "_ruby",
    "php": "_php",
    "lua": "_lua",
    "luajit": "_lua",
    "Rscript": "_lua",
}
for _names, _judge in (
    (FETCHERS, "_fetcher"),
    (SOCKET_TOOLS, "_socket"),
    (PACKAGE_MANAGERS, "_package_manager"),
    (SHELLS, "_shell"),
    (DATA_COMMANDS, "_data"),
    (frozenset(PATTERN_TOOLS) | frozenset(PATTERN_ALIASES), "_pattern_tool"),
    (frozenset(DELIMITER_OPTIONS), "_delimited"),
):
    for _name in _names:
        _JUDGES[_name] = _judge
_JUDGES.update({"kill": "_kill", "hash": "_hash", "enable": "_enable"})
for _name in ("read", "mapfile", "readarray", "let", "getopts", "printf", "unset"):
    _JUDGES[_name] = "_sets_variables"


class Shell(
    CommandRunner,
    FileCommands,
    Builtins,
    Interpreters,
    NetworkCommands,
    PackageManagers,
    GitCommands,
    ServiceCommands,
):
    """Walks shell text command by command, the way a shell would run it."""

    judges = _JUDGES

    def __init__(self, scope: PathRules, facts: Facts) -> None:
        self.scope = scope
        self.facts = facts

    # -- structure --

    def script(self, src: str, state: State, depth: int) -> Denial | None:
        if depth > MAX_DEPTH:
            return unseen(src, "commands are nested too deeply")
        try:
            lexer = Lexer(src)
            lexer.run()
            tree = Parser(lexer.tokens).parse()
        except (ParseError, RecursionError) as error:
            return Denial(
                UNRESTRICTED_SHELL,
                f"The shell command {quoted(src)} could not be parsed ({error}), so the "
                "self-update policy refuses it rather than guess.",
            )
        return self._pipelines(tree, state, depth)

    def _pipelines(self, pipelines: list[Pipeline], state: State, depth: int) -> Denial | None:
        for pipeline in pipelines:
            alone = len(pipeline.commands) == 1
            for index, command in enumerate(pipeline.commands):
                own = state if alone else state.fork()  # pipeline stages run in subshells
                if isinstance(command, Group):
                    self._note(self._pipelines(command.body, own.fork(), depth))
                    self._note(self._redirects(command.redirects, own, depth))
                else:
                    self._note(self._simple(command, own, index > 0, depth))
        return None

    # -- expansion --

    def _expand(self, word: Word, state: State) -> tuple[Arg, list[str]]:
        out: list[str] = []
        subs: list[str] = []
        dynamic = False
        for part in word.parts:
            if part.kind == "lit":
                out.append(part.text)
            elif part.kind == "var":
                value = self._variable(part.text, state)
                if not part.quoted and re.search(r"\s", value):
                    value = UNKNOWN  # split into words the policy would have to count
                dynamic = dynamic or bool(re.search("[\x01\x03-\x05]", value))
                out.append(value)
            elif part.kind == "sub" and is_arithmetic(part.text):
                out.append(UNKNOWN)
                dynamic = True
            elif part.kind == "sub":
                subs.append(part.text)
                known = self._known_substitution(part.text, state)
                dynamic = dynamic or known is None
                out.append(UNKNOWN if known is None else known)
            elif part.kind == "proc":
                subs.append(part.text)
                out.append("/dev/fd/63")
            else:  # ${...} with operators: judge any substitution inside, value unknown
                subs.extend(p.text for p in expansion_parts(part.text) if p.kind == "sub")
                out.append(UNKNOWN)
                dynamic = True
        value = "".join(out)
        if not re.fullmatch(r"(?:[A-Za-z_]\w*\+?=)?[\x03-\x05]", value):
            value = re.sub("[\x03-\x05]", UNKNOWN, value)  # a marker inside a longer word
        expanded = any(part.kind != "lit" for part in word.parts)
        return Arg(value, word.raw, dynamic, expanded), subs

    def _variable(self, name: str, state: State) -> str:
        if name == "!":
            return JOB
        if name == "HOME":
            return "~"
        if name == "PWD":
            return state.cwd
        if name in state.variables:
            return state.variables[name]
        if name in ELSEWHERE_VARIABLES:
            return ELSEWHERE
        return UNKNOWN

    def _known_substitution(self, src: str, state: State) -> str | None:
        command = " ".join(src.split())
        if command == "pwd":
            return state.cwd
        if command == "git rev-parse --show-toplevel":
            return self.scope.clone
        return None

    # -- one simple command --

    def _simple(self, command: Simple, state: State, piped: bool, depth: int) -> Denial | None:
        expanded = [self._expand(word, state) for word in command.words]
        targets = [self._expand(r.target, state) for r in command.redirects if r.target is not None]
        subs = [s for _, found in expanded + targets for s in found]
        for redirect in command.redirects:
            doc = redirect.heredoc
            if doc is not None and not doc.quoted:
                subs.extend(p.text for p in expansion_parts(doc.body) if p.kind == "sub")
        for sub in subs:  # substitutions run before the command they feed
            self._note(self.script(sub, state.fork(), depth + 1))
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
                self._note(denial)
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
                self._note(self._loop(args[i + 1 :], state))
                return self._redirects(command.redirects, state, depth)
            elif raw == "case" and not words[i].quoted:
                return unseen(raw, "`case` statements are not analysed")
            else:
                break
        assignments = []
        while i < len(words) and ASSIGNMENT.match(words[i].raw):
            assignments.append(args[i])
            i += 1
        for assignment in assignments:
            self._note(self._assignment(assignment, state, depth))
        if i >= len(args):
            for assignment in assignments:
                self._assign(assignment, state)
            return self._redirects(command.redirects, state, depth)
        stdin = self._stdin(command.redirects, state)
        self._script_written(args[i:], command.redirects, stdin, state, depth)
        self._note(self.command(args[i:], state, piped, stdin, depth))
        return self._redirects(command.redirects, state, depth)

    def _script_written(
        self, args: list[Arg], redirects: list[Redirect], stdin: Arg | None, state: State,
        depth: int,
    ) -> None:  # fmt: skip
        """A script the shell writes (`cat > a.sh <<'EOF'`, `echo … > a.sh`) is walked as
        if it ran: running it later (`bash a.sh`) shows only its name."""
        program = args[0].value.rsplit("/", 1)[-1]
        if program in ("cat", "tee") and stdin is not None and stdin.raw.startswith("<<"):
            text = stdin.value
        elif program == "echo":
            text = " ".join(a.value for a in args[1:] if not a.value.startswith("-"))
        else:
            return
        targets = [
            self._expand(r.target, state)[0].value
            for r in redirects
            if r.target is not None and r.op in (">", ">>", ">|", "&>", "&>>")
        ]
        if program == "tee":
            targets += [a.value for a in args[1:] if not a.value.startswith("-")]
        if any(is_shell_script(target, text) for target in targets):
            self._note(self.script(text, state.fork(), depth + 1))

    def _loop(self, header: list[Arg], state: State) -> Denial | None:
        if not header:
            return None
        name = header[0].value
        denial = self._env_name(name, " ".join(a.raw for a in header), dynamic=True)
        if denial:
            return denial
        items = header[2:] if len(header) > 1 and header[1].value == "in" else []
        for arg in items:
            self._note(self._arg_path(arg, state))
        # Each item is read as a path, so the variable is one of them (not an option); a
        # write through it is a write to each item (command.py).
        state.loops[name] = items
        plain = bool(items) and all(not a.value.startswith("-") for a in items)
        state.variables[name] = CHECKED if plain else UNKNOWN
        return None

    def _stdin(self, redirects: list[Redirect], state: State) -> Arg | None:
        stdin = None
        for redirect in redirects:
            if redirect.fd not in ("", "0"):
                continue
            doc = redirect.heredoc
            if doc is not None:
                if doc.quoted:
                    stdin = Arg(doc.body, "<<" + doc.delimiter)
                else:
                    arg, _ = self._expand(Word(expansion_parts(doc.body), doc.body, False), state)
                    stdin = Arg(arg.value, "<<" + doc.delimiter, arg.dynamic)
            elif redirect.op == "<<<" and redirect.target is not None:
                stdin, _ = self._expand(redirect.target, state)
        return stdin

    def _redirects(self, redirects: list[Redirect], state: State, depth: int) -> Denial | None:
        for redirect in redirects:
            if redirect.target is None or redirect.op == "<<<":
                continue
            target, _ = self._expand(redirect.target, state)
            if redirect.op in (">&", "<&") and re.fullmatch(r"\d+-?|-", target.value):
                continue
            self._note(self._arg_path(target, state, write=redirect.op not in ("<", "<&")))
        return None

    def _assign(self, arg: Arg, state: State) -> None:
        name, _, value = arg.value.partition("=")
        name = name.rstrip("+")
        if name in ("HOME", "PWD"):
            return
        kept = not arg.dynamic or value in (JOB, CHECKED) or UNKNOWN in value
        state.variables[name] = value if kept else UNKNOWN

    def _assignment(self, arg: Arg, state: State, depth: int) -> Denial | None:
        """Judge ``NAME=value``: its value as a path, a source URL or a command."""
        exact, _, value = arg.value.partition("=")
        exact = exact.rstrip("+")
        name = exact.upper()
        if name in _COMMAND_VARIABLES and value:
            if arg.dynamic:
                return unseen(arg.raw, f"`{name}` holds a command computed at run time")
            denial = self.script(value, state.fork(), depth + 1)
            if denial:
                return denial
        if name.startswith("GIT_CONFIG") and name not in (
            "GIT_CONFIG_NOSYSTEM",
            "GIT_CONFIG_GLOBAL",
            "GIT_CONFIG_SYSTEM",
            "GIT_CONFIG",
        ):
            return refused(
                GIT_CONFIG, arg.raw, "it injects git configuration through the environment"
            )
        if _SOURCE_VARIABLE.search(name) or name == "GOPROXY":
            remote = remote_url(value)
            if remote:
                self._endpoint(remote)
            if remote or (name == "GOPROXY" and "direct" in value.lower()):
                return network_denial(arg.raw, remote or value)
        if "://" in value or value.lower().startswith("file:"):
            pieces = [value]
        else:
            pieces = [piece for piece in value.split(":") if piece not in SYSTEM_BIN]
        for piece in pieces:
            denial = self.scope.check(piece, state.cwd, arg.raw)
            if denial:
                return denial
        return self._env_name(exact, arg.raw, value, dynamic=arg.dynamic)

    def _env_name(self, name: str, shown: str, value: str = "", *, dynamic: bool) -> Denial | None:
        if changes_execution(name, value, dynamic=dynamic):
            return refused(
                EXEC_CHANGING_ENV,
                shown,
                f"`{name}` changes which program runs or what it loads, which a self-update "
                "cycle may not set",
            )
        return None

    def _arithmetic(self, text: str, state: State, shown: str) -> Denial | None:
        """Arithmetic evaluates names' values again: they must be plain and set right here."""
        for name in arithmetic_names(text):
            value = state.variables.get(name)
            if value is None or not plain_value(value):
                return unseen(
                    shown,
                    f"arithmetic evaluates `{name}`, whose value is only known at run time and "
                    "may hold code",
                )
        if re.search("[\x01-\x05]", text):
            return unseen(shown, "arithmetic evaluates a value only known at run time")
        return None

    def _subscript(self, text: str, state: State, shown: str) -> Denial | None:
        """``${!name}`` and subscripts (``a[i]``, ``${a[i]}``), which bash evaluates."""
        if text.startswith("!"):
            return unseen(shown, "`${!...}` expands a variable named at run time")
        index = re.search(r"\[(.*)\]", text, re.DOTALL)
        if index and index.group(1) not in ("@", "*"):
            return self._arithmetic(index.group(1), state, shown)
        return None

    def _define(self, name: str, state: State, *, function: bool = True) -> Denial | None:
        """A function or alias named ``name``: refused if it would stand for a known command."""
        if name in self.judges or name in NAMED or PYTHON.match(name):
            return refused(
                COMMAND_REDEFINITION,
                name,
                "it redefines a command the self-update policy judges by its name",
            )
        if function:  # its body was judged; an alias's text is substituted, so not its name
            state.functions.add(name)
        return None
