"""The shapes of secrets redaction knows, each with the cheap test that says when it could
match (domain/redaction.py applies them; tests/test_redaction_corpus.py holds a positive
and a negative case of each).

A value that is quoted is cut whole, quotes kept (`password="correct horse"` becomes
`password="[redacted]"`); a bare one up to the next space or shell separator. Where a
rule keeps part of a match (a URL's user, an auth scheme, curl's user name), it is the
part that says what was there, never the credential.

Every scan that runs over a line is bounded, so no text makes a pattern quadratic.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

REDACTED: Final = "[redacted]"

# A quoted value: "…" (backslash escapes), '…', or \"…\" (a quote inside a JSON string).
_QUOTED: Final = r'"(?:[^"\\\n]|\\.)+"|\'[^\'\n]+\'|\\"(?:[^"\\]|\\[^"])+?\\"'
# A command-line value: quoted, or a word that is not the next flag.
_ARG: Final = rf"(?:{_QUOTED}|\\?[\"']?(?!-)[^\s\"'`;|&<>\\]+)"
# How far along a command line a tool's password flag is looked for.
_LINE: Final = r"[^\n;|&]{0,200}?"


def redacted_value(value: str) -> str:
    """`[redacted]` in the value's own quotes (an unclosed quote stays unclosed)."""
    for quote in ('\\"', '"', "'"):
        if value.startswith(quote):
            closed = len(value) >= 2 * len(quote) and value.endswith(quote)
            return quote + REDACTED + (quote if closed else "")
    return REDACTED


def _lead_kept(match: re.Match[str]) -> str:
    """Group 1 (what names the secret) kept, group 2 (the secret) cut."""
    return match.group(1) + redacted_value(match.group(2))


def _user_kept(match: re.Match[str]) -> str:
    """`curl -u user:password`: the user name kept, the password cut."""
    value = match.group(2)
    quote = next((q for q in ('\\"', '"', "'") if value.startswith(q)), "")
    inner = value[len(quote) :]
    if quote and inner.endswith(quote):
        inner = inner[: -len(quote)]
    user, colon, _ = inner.partition(":")
    if not colon:
        return match.group(0)  # no password given: curl asks for it
    return f"{match.group(1)}{quote}{user}:{REDACTED}{quote}"


def _opaque(match: re.Match[str]) -> str:
    """A long token mixing upper case, lower case and digits (hex digests do not)."""
    token = match.group(0)
    mixed = (
        any(c.isupper() for c in token)
        and any(c.islower() for c in token)
        and any(c.isdigit() for c in token)
    )
    return REDACTED if mixed else token


@dataclass(frozen=True)
class Rule:
    """One shape of secret and how a match of it is replaced."""

    name: str
    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]

    def apply(self, text: str) -> str:
        return self.pattern.sub(self.replace, text)


def _whole(match: re.Match[str]) -> str:
    return REDACTED


RULES: Final = (
    # Private keys of every kind (PEM, OpenSSH, PGP's KEY BLOCK); an unterminated one (cut
    # off by a log, say) is redacted to the end.
    Rule(
        "private_key",
        re.compile(
            r"-----BEGIN[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|.*\Z)",
            re.DOTALL,
        ),
        _whole,
    ),
    Rule(
        "putty_key",
        re.compile(r"PuTTY-User-Key-File-\d+:.*?(?:Private-MAC:[ \t]*[0-9a-fA-F]+|\Z)", re.DOTALL),
        _whole,
    ),
    # `scheme://user:password@host`: the user stays, the password goes.
    Rule(
        "url_credentials",
        re.compile(r"(://[^\s:/@\"'<>\\?#]{0,256}:)([^\s/@\"'<>\\?#]{1,512})(?=@)"),
        _lead_kept,
    ),
    # `Authorization: <scheme> <credentials>` (and Proxy-), to the end of the header.
    Rule(
        "authorization_header",
        re.compile(
            r"(?i)((?:proxy-)?authorization(?:\\?[\"'])?[ \t]*[:=][ \t]*(?:\\?[\"'])?"
            r"(?:[a-z][a-z0-9_-]{0,30}[ \t]+)?)([^\r\n\"'\\]+)"
        ),
        lambda m: m.group(1) + REDACTED,
    ),
    Rule(
        "bearer",
        re.compile(r"(?i)\b(bearer\s+)([A-Za-z0-9\-._~+/]{8,}=*)"),
        lambda m: m.group(1) + REDACTED,
    ),
    # Tools whose short flag is a password: `sshpass -p`, the MySQL clients' `-p`
    # (attached is the password; a separate word, read as the database, is cut too),
    # `redis-cli -a`. Elsewhere `-p` is a port or a path flag and is left alone.
    Rule(
        "sshpass",
        re.compile(rf"(\bsshpass(?:[ \t]+-[A-Za-oq-z]\S*){{0,8}}[ \t]+-p[ \t]*)({_ARG})"),
        _lead_kept,
    ),
    Rule(
        "mysql_password",
        re.compile(
            r"(\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlcheck|mysqlshow|mysqlsh"
            rf"|mariadb|mariadb-dump|mariadb-admin)\b{_LINE}[ \t]-p[ \t]*)({_ARG})"
        ),
        _lead_kept,
    ),
    Rule(
        "redis_password",
        re.compile(rf"(\bredis-cli\b{_LINE}[ \t]-a[ \t]+)({_ARG})"),
        _lead_kept,
    ),
    Rule(
        "curl_user",
        re.compile(rf"(\bcurl\b{_LINE}[ \t](?:-u|-U|--user|--proxy-user)(?:[ \t]+|=)?)({_ARG})"),
        _user_kept,
    ),
    # `--password VALUE`, `--db-password=VALUE`, `-storepass VALUE`, `--token VALUE`, …
    # (not `--password-stdin` or `--token-file`: those name where the secret is).
    Rule(
        "secret_flag",
        re.compile(
            r"(?i)((?<![\w-])--?(?!no-)(?:[a-z0-9]+-){0,4}"
            r"(?:password|passwd|passphrase|pass(?:in|out)?|secret|token|api-?key|access-key"
            r"|secret-key|client-secret|storepass|keypass|srcstorepass|deststorepass)"
            rf"(?:[ \t]*=[ \t]*|[ \t]+))({_ARG})"
        ),
        _lead_kept,
    ),
    # `aws configure set aws_secret_access_key VALUE` (and the ini and env forms).
    Rule(
        "aws_secret",
        re.compile(
            r"(?i)(\baws_(?:secret_access_key|session_token|security_token)(?:\\?[\"'])?"
            rf"(?:[ \t]*[:=][ \t]*|[ \t]+))({_ARG})"
        ),
        _lead_kept,
    ),
    # Azure connection strings and SAS URLs.
    Rule(
        "connection_string",
        re.compile(
            r"(?i)((?:\b(?:AccountKey|SharedAccessKey|SharedAccessSignature|SharedSecret)"
            r"|[?&]sig)=)([^;&\"'\s\\]+)"
        ),
        lambda m: m.group(1) + REDACTED,
    ),
    # `api_key=…`, `"password": "…"`, `SECRET: …`: the value of a secret-named assignment,
    # quoted (any length, spaces and all) or bare (6 characters or more).
    Rule(
        "assignment",
        re.compile(
            r"(?i)((?:api[_-]?key|apikey|secret|token|password|passwd|passphrase"
            r"|access[_-]?key|private[_-]?key|client[_-]?secret)[A-Za-z0-9_\-]{0,64}"
            rf"(?:\\?[\"'])?\s*[:=]\s*)({_QUOTED}|\\?[\"']?[^\s\"',;]{{6,}})"
        ),
        _lead_kept,
    ),
    # Well-known key shapes: OpenAI/Anthropic, GitHub, GitLab, Slack, AWS, Google, Stripe,
    # npm, PyPI, Hugging Face, SendGrid, DigitalOcean, Shopify, JWTs.
    Rule(
        "key_shape",
        re.compile(
            r"\b(?:"
            r"sk-[A-Za-z0-9_\-]{16,}"
            r"|(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}"
            r"|github_pat_[A-Za-z0-9_]{20,}"
            r"|glpat-[A-Za-z0-9_\-]{20,}"
            r"|xox[abposre]-[A-Za-z0-9\-]{10,}"
            r"|xapp-[A-Za-z0-9\-]{10,}"
            r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
            r"|AIza[0-9A-Za-z_\-]{35}"
            r"|(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|whsec_[A-Za-z0-9]{24,}"
            r"|npm_[A-Za-z0-9]{36}"
            r"|pypi-[A-Za-z0-9_\-]{50,}"
            r"|hf_[A-Za-z0-9]{30,}"
            r"|SG\.[A-Za-z0-9_\-]{16,}\.[A-Za-z0-9_\-]{16,}"
            r"|ya29\.[A-Za-z0-9_\-]{20,}"
            r"|dop_v1_[a-f0-9]{64}"
            r"|shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}"
            r"|eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
            r")"
        ),
        _whole,
    ),
    Rule(
        "opaque", re.compile(r"(?<![A-Za-z0-9_\-])[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-])"), _opaque
    ),
)

# Each test below accepts a superset of its rule's matches on ASCII text, and no
# replacement (`[redacted]`, or a part of the match kept) makes a match of a later rule
# that its test, taken on the text before, ruled out. Other text runs every rule:
# case-insensitive matching then knows letters (`ſ`, `K`) a lowercase test would miss.
# Bytes of a token character ([A-Za-z0-9_-]) become `a`, every other byte a space: a run
# of `a` is then a run of token characters.
_TOKEN_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"
_RUNS = bytes(ord("a") if b in _TOKEN_CHARS else ord(" ") for b in range(256))
# Every key shape holds a run of at least 11 token characters (a JWT's shortest segment
# is `eyJ` and 8 more); an opaque token is a run of 32.
_SHAPE_RUN = b"a" * 11
_OPAQUE_RUN = b"a" * 32
_ALL: Final = (True,) * len(RULES)


def applicable(text: str) -> tuple[bool, ...]:
    """For each of RULES, whether it could match the text."""
    if not text.isascii():
        return _ALL
    lower = text.lower()
    runs = text.encode().translate(_RUNS)
    long_run = _SHAPE_RUN in runs  # an opaque token's run is longer still
    named = "key" in lower or "secret" in lower or "token" in lower or "pass" in lower
    # Every tool rule has a flag (`-p`, `-a`, `-u`): the tool names are looked for only
    # then; each other rule's words hold one that `named` looks for, or an `=`.
    flags = "-" in text
    return (
        "-----BEGIN" in text,
        named and "PuTTY-User-Key-File" in text,
        "://" in text and "@" in text,
        "authorization" in lower,
        "bearer" in lower,
        named and flags and "sshpass" in lower,
        flags and ("mysql" in lower or "mariadb" in lower),
        flags and "redis-cli" in lower,
        flags and "curl" in lower,
        named and flags,
        named and "aws_" in lower,
        "=" in text
        and (
            "accountkey" in lower
            or "sharedac" in lower
            or "sharedsecret" in lower
            or "sig=" in lower
        ),
        named,
        long_run and _may_start_key_shape(text),
        long_run and _OPAQUE_RUN in runs,
    )


def _may_start_key_shape(text: str) -> bool:
    """Whether the text holds the start of a key shape (as `or`s: ~10x quicker than a
    loop or a regular expression of the alternatives), grouped by the separator each
    start holds, so text without it skips the group."""
    return (
        (
            "_" in text
            and (
                "gh" in text
                or "github_pat_" in text
                or "_live_" in text
                or "_test_" in text
                or "whsec_" in text
                or "npm_" in text
                or "hf_" in text
                or "dop_v1_" in text
                or "shp" in text
            )
        )
        or (
            "-" in text
            and (
                "sk-" in text
                or "glpat-" in text
                or "xox" in text
                or "xapp-" in text
                or "pypi-" in text
            )
        )
        or ("." in text and ("eyJ" in text or "SG." in text or "ya29." in text))
        or "AKIA" in text
        or "ASIA" in text
        or "AIza" in text
    )
