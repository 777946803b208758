"""Shell text as the self-update policy reads it: a quote-aware lexer and a small parser.

POSIX quoting as ``shlex`` does it, plus the operators, redirections, here-documents
and substitutions ``shlex`` does not know. Substitutions are kept as source text, so the
policy judges them as commands when they are expanded. Pure: no file system, no
processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class ParseError(Exception):
    """Shell text the policy cannot parse with confidence."""


@dataclass
class Part:
    kind: str  # "lit", "var", "sub" (command substitution), "proc", "expr"
    text: str
    quoted: bool = False  # inside double quotes: expanded without word splitting


@dataclass
class Word:
    parts: list[Part]
    raw: str
    quoted: bool


@dataclass
class Op:
    op: str
    fd: str = ""


@dataclass
class Heredoc:
    delimiter: str
    quoted: bool
    strip_tabs: bool
    fd: str = ""
    body: str = ""


Token = Word | Op | Heredoc

_OPERATORS = (
    "&&",
    "||",
    ";;&",
    ";;",
    ";&",
    "|&",
    "&>>",
    "&>",
    "<<<",
    "<<-",
    "<<",
    "<>",
    "<&",
    ">&",
    ">>",
    ">|",
    ";",
    "&",
    "|",
    "(",
    ")",
    "<",
    ">",
)
_META = frozenset(" \t\r\n;&|()<>")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL_PARAMETERS = frozenset("@*#?$!-0123456789")
_MAX_NESTING = 24
_ANSI_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI = re.compile(
    r"\\(x[0-9A-Fa-f]{1,2}|u[0-9A-Fa-f]{1,4}|U[0-9A-Fa-f]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL
)


def _ansi_c(body: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] in "xuU":
            return chr(int(code[1:], 16))
        if code[0] in "01234567":
            return chr(int(code, 8))
        if code[0] == "c":
            return chr(ord(code[1]) & 0x1F)
        return _ANSI_ESCAPES.get(code, "\\" + code)

    return _ANSI.sub(one, body)


class Lexer:
    """Tokens of shell text; substitutions are kept as source, judged when expanded."""

    def __init__(self, src: str, start: int = 0, nesting: int = 0) -> None:
        if nesting > _MAX_NESTING:
            raise ParseError("substitutions nested too deeply")
        self.src, self.i, self.nesting = src, start, nesting
        self.tokens: list[Token] = []
        self.pending: list[Heredoc] = []
        self.word_end = -1

    def run(self, *, until_paren: bool = False) -> int:
        """Lex to the end (or to the `)` closing a `$(`, whose index is returned)."""
        src, depth = self.src, 0
        while self.i < len(src):
            c = src[self.i]
            if c in " \t\r":
                self.i += 1
            elif src.startswith("\\\n", self.i):
                self.i += 2
            elif c == "\n":
                self.i += 1
                self.tokens.append(Op("\n"))
                self._heredoc_bodies()
            elif c == "#":
                end = src.find("\n", self.i)
                self.i = len(src) if end < 0 else end
            elif c == ")" and until_paren and depth == 0:
                if self.pending:
                    raise ParseError("here-document not terminated inside `$(...)`")
                return self.i
            elif c in "<>" and src.startswith("(", self.i + 1):
                self.tokens.append(self._process_substitution())
            elif c in _META:
                depth += {"(": 1, ")": -1}.get(c, 0)
                self._operator()
            else:
                self.tokens.append(self._word())
        if until_paren:
            raise ParseError("unclosed `$(`")
        self.pending.clear()  # a here-document cut off by the end of the text is empty
        return self.i

    def _operator(self) -> None:
        op = next(o for o in _OPERATORS if self.src.startswith(o, self.i))
        fd = ""
        last = self.tokens[-1] if self.tokens else None
        if (
            op[0] in "<>"
            and isinstance(last, Word)
            and last.raw.isdigit()
            and self.word_end == self.i
        ):
            fd = last.raw
            self.tokens.pop()
        self.i += len(op)
        if op in ("<<", "<<-"):
            while self.i < len(self.src) and self.src[self.i] in " \t":
                self.i += 1
            if self.i >= len(self.src) or self.src[self.i] in _META:
                raise ParseError("here-document without a delimiter")
            word = self._word()
            if all(p.kind == "lit" for p in word.parts):
                delimiter = "".join(p.text for p in word.parts)
            else:
                delimiter = re.sub(r"[\"'\\]", "", word.raw)
            doc = Heredoc(delimiter, word.quoted, op == "<<-", fd)
            self.tokens.append(doc)
            self.pending.append(doc)
            return
        self.tokens.append(Op(op, fd))

    def _heredoc_bodies(self) -> None:
        src = self.src
        for doc in self.pending:
            lines = []
            while self.i < len(src):
                end = src.find("\n", self.i)
                line = src[self.i :] if end < 0 else src[self.i : end]
                self.i = len(src) if end < 0 else end + 1
                if doc.strip_tabs:
                    line = line.lstrip("\t")
                if line == doc.delimiter:
                    break
                lines.append(line)
            doc.body = "\n".join(lines)
        self.pending.clear()

    def _word(self) -> Word:
        src, start = self.src, self.i
        parts: list[Part] = []
        quoted = False
        while self.i < len(src) and src[self.i] not in _META:
            c = src[self.i]
            if c == "\\":
                if not src.startswith("\\\n", self.i):
                    quoted = True
                    parts.append(Part("lit", src[self.i + 1 : self.i + 2]))
                self.i += 2
            elif c == "'":
                end = src.find("'", self.i + 1)
                if end < 0:
                    raise ParseError("unterminated single quote")
                quoted = True
                parts.append(Part("lit", src[self.i + 1 : end]))
                self.i = end + 1
            elif c == '"':
                quoted = True
                self.i += 1
                parts.extend(self._double_quoted())
            elif src.startswith("$'", self.i):
                quoted = True
                parts.append(self._ansi_quoted())
            elif src.startswith('$"', self.i):
                quoted = True
                self.i += 2
                parts.extend(self._double_quoted())
            elif c == "$":
                parts.append(self._dollar())
            elif c == "`":
                parts.append(self._backtick())
            else:
                j = self.i
                while j < len(src) and src[j] not in _META and src[j] not in "\\'\"$`":
                    j += 1
                parts.append(Part("lit", src[self.i : j]))
                self.i = j
        self.word_end = self.i
        return Word(parts, src[start : self.i], quoted)

    def _double_quoted(self, *, heredoc: bool = False) -> list[Part]:
        """Parts of double-quoted text (or of an expanding here-document body)."""
        src = self.src
        parts: list[Part] = []
        buf: list[str] = []
        escapable = "$`\\\n" if heredoc else '$`"\\\n'
        while True:
            if self.i >= len(src):
                if heredoc:
                    break
                raise ParseError("unterminated double quote")
            c = src[self.i]
            nxt = src[self.i + 1 : self.i + 2]
            if c == '"' and not heredoc:
                self.i += 1
                break
            if c == "\\" and nxt and nxt in escapable:
                if nxt != "\n":
                    buf.append(nxt)
                self.i += 2
            elif c == "$" and nxt and (nxt in "({_" or nxt.isalnum() or nxt in "@*#?$!-"):
                parts.append(Part("lit", "".join(buf)))
                buf = []
                parts.append(_quoted(self._dollar()))
            elif c == "`":
                parts.append(Part("lit", "".join(buf)))
                buf = []
                parts.append(_quoted(self._backtick()))
            else:
                buf.append(c)
                self.i += 1
        parts.append(Part("lit", "".join(buf)))
        return [p for p in parts if p.kind != "lit" or p.text]

    def _dollar(self) -> Part:
        src, i = self.src, self.i
        nxt = src[i + 1 : i + 2]
        if src.startswith("$((", i):
            end = self._balanced(i + 1, "(", ")")
            self.i = end
            # Bash falls back to a command substitution when this is not arithmetic,
            # so the content is judged as commands too.
            return Part("sub", src[i + 2 : end - 1])
        if nxt == "(":
            inner = Lexer(src, i + 2, self.nesting + 1)
            close = inner.run(until_paren=True)
            self.i = close + 1
            return Part("sub", src[i + 2 : close])
        if nxt == "{":
            end = self._balanced(i + 1, "{", "}")
            self.i = end
            body = src[i + 2 : end - 1]
            if NAME.fullmatch(body) or (len(body) == 1 and body in _SPECIAL_PARAMETERS):
                return Part("var", body)
            return Part("expr", body)
        if nxt == "[":  # the old arithmetic form `$[...]`, read like `$((...))`
            end = self._balanced(i + 1, "[", "]")
            self.i = end
            return Part("sub", "(" + src[i + 2 : end - 1] + ")")
        if nxt and (nxt == "_" or nxt.isalpha()):
            match = NAME.match(src, i + 1)
            assert match is not None
            self.i = match.end()
            return Part("var", match.group())
        if nxt and nxt in _SPECIAL_PARAMETERS:
            self.i = i + 2
            return Part("var", nxt)
        self.i = i + 1
        return Part("lit", "$")

    def _balanced(self, i: int, opening: str, closing: str) -> int:
        """Index just past the ``closing`` that matches the ``opening`` at ``i``."""
        src, depth, j = self.src, 0, i
        while j < len(src):
            c = src[j]
            if c == "\\":
                j += 2
                continue
            if c in "'\"":
                end = j + 1
                while end < len(src) and src[end] != c:
                    end += 2 if src[end] == "\\" and c == '"' else 1
                if end >= len(src):
                    raise ParseError("unterminated quote")
                j = end + 1
                continue
            if src.startswith("$(", j) and not src.startswith("$((", j):
                j = Lexer(src, j + 2, self.nesting + 1).run(until_paren=True) + 1
                continue
            if c == opening:
                depth += 1
            elif c == closing:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise ParseError(f"unclosed `{opening}`")

    def _backtick(self) -> Part:
        src, j, buf = self.src, self.i + 1, []
        while j < len(src):
            c = src[j]
            if c == "\\" and src[j + 1 : j + 2] in ("`", "$", "\\"):
                buf.append(src[j + 1])
                j += 2
                continue
            if c == "`":
                self.i = j + 1
                return Part("sub", "".join(buf))
            buf.append(c)
            j += 1
        raise ParseError("unterminated backtick")

    def _ansi_quoted(self) -> Part:
        src, j = self.src, self.i + 2
        while j < len(src) and src[j] != "'":
            j += 2 if src[j] == "\\" else 1
        if j >= len(src):
            raise ParseError("unterminated $'...'")
        body = src[self.i + 2 : j]
        self.i = j + 1
        return Part("lit", _ansi_c(body))

    def _process_substitution(self) -> Word:
        start = self.i
        close = Lexer(self.src, start + 2, self.nesting + 1).run(until_paren=True)
        self.i = close + 1
        self.word_end = self.i
        return Word([Part("proc", self.src[start + 2 : close])], self.src[start : self.i], False)


def _quoted(part: Part) -> Part:
    part.quoted = True
    return part


def expansion_parts(text: str) -> list[Part]:
    """Parts of an expanding here-document body or ``${...}`` text."""
    return Lexer(text)._double_quoted(heredoc=True)


@dataclass
class Redirect:
    op: str
    fd: str
    target: Word | None = None
    heredoc: Heredoc | None = None


@dataclass
class Simple:
    words: list[Word]
    redirects: list[Redirect]
    defines: Word | None = None  # `name () ...`: the function this defines


@dataclass
class Group:
    body: list[Pipeline]
    redirects: list[Redirect]


@dataclass
class Pipeline:
    commands: list[Simple | Group]


_SEPARATORS = frozenset({";", "&", "&&", "||", "\n", ";;", ";&", ";;&"})
_REDIRECT_OPS = frozenset({">", ">>", "<", "<>", ">|", "&>", "&>>", ">&", "<&", "<<<"})


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens, self.pos = tokens, 0

    def _peek(self, ahead: int = 0) -> Token | None:
        index = self.pos + ahead
        return self.tokens[index] if index < len(self.tokens) else None

    def _is_op(self, token: Token | None, *ops: str) -> bool:
        return isinstance(token, Op) and token.op in ops

    def parse(self) -> list[Pipeline]:
        return self._list(inside=False)

    def _list(self, *, inside: bool) -> list[Pipeline]:
        items: list[Pipeline] = []
        while (token := self._peek()) is not None:
            if isinstance(token, Op) and token.op in _SEPARATORS:
                self.pos += 1
            elif self._is_op(token, ")"):
                if inside:
                    return items
                raise ParseError("unbalanced `)`")
            else:
                items.append(self._pipeline())
        if inside:
            raise ParseError("unclosed `(`")
        return items

    def _pipeline(self) -> Pipeline:
        commands = [self._command()]
        while self._is_op(self._peek(), "|", "|&"):
            self.pos += 1
            while self._is_op(self._peek(), "\n"):
                self.pos += 1
            commands.append(self._command())
        return Pipeline(commands)

    def _command(self) -> Simple | Group:
        if self._is_op(self._peek(), "("):
            self.pos += 1
            body = self._list(inside=True)
            self.pos += 1
            return Group(body, self._redirects())
        words: list[Word] = []
        redirects: list[Redirect] = []
        while (token := self._peek()) is not None:
            if isinstance(token, Word):
                words.append(token)
                self.pos += 1
            elif isinstance(token, Heredoc) or token.op in _REDIRECT_OPS:
                redirects.extend(self._redirects())
            elif token.op == "(" and len(words) == 1 and self._is_op(self._peek(1), ")"):
                # `name () body`: a function definition; its body follows and is judged
                # as if it ran.
                self.pos += 2
                return Simple([], [], defines=words[0])
            elif token.op == "(":
                raise ParseError("unexpected `(`")
            else:
                break
        if not words and not redirects:
            raise ParseError("a pipe or operator without a command")
        return Simple(words, redirects)

    def _redirects(self) -> list[Redirect]:
        out: list[Redirect] = []
        while (token := self._peek()) is not None:
            if isinstance(token, Heredoc):
                out.append(Redirect("<<", token.fd, heredoc=token))
                self.pos += 1
            elif isinstance(token, Op) and token.op in _REDIRECT_OPS:
                target = self._peek(1)
                if not isinstance(target, Word):
                    raise ParseError(f"`{token.op}` without a target")
                out.append(Redirect(token.op, token.fd, target=target))
                self.pos += 2
            else:
                break
        return out
