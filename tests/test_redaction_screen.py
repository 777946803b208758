"""Redaction's cheap tests skip a pattern only where it cannot match.

`redact_secrets` runs each pattern only when a test of the text says it could match
(the hook path redacts every tool input). Whatever the text, the result must be what
running every pattern gives.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from domain import secret_patterns
from domain.redaction import might_hold_secret, redact_secrets


def every_pattern(text: str) -> str:
    """Redaction with no screening: every rule's substitution, in order."""
    for rule in secret_patterns.RULES:
        text = rule.apply(text)
    return text


SECRETS = [
    "sk-ant-api03-AbCdEfGhIjKlMnOpQrSt",
    "ghp_" + "a1B2" * 6,
    "github_pat_" + "x" * 24,
    "glpat-" + "Q" * 22,
    "xoxb-1234567890-abc",
    "AKIA" + "ABCDEFGHIJKLMNOP",
    "AIza" + "b" * 35,
    "sk_live_" + "9" * 20,
    "eyJhbGciOiJI.eyJzdWIiOiIx.SflKxwRJSMeK",
    "Bearer abcdefgh12345",
    "bEaReR\tzzzzzzzzzz",
    "api_key=hunter2hunter2",
    '"password": "correct horse"',
    "TOKEN: abcdefg",
    "client_secret='s3cr3tvalue'",
    "Aa1" + "x" * 40,
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN OPENSSH PRIVATE KEY-----\ncut off",
    # Letters that case-insensitive matching folds onto ASCII ones.
    "ſecret=abcdefgh",
    "\u212aey: abcdefgh12",
    "pasſword=abcdefgh",
    "postgresql://user:pa55word@db/app",
    "Authorization: Basic dXNlcjpwYXNz",
    "curl -u admin:hunter2 https://x",
    "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG",
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
    "mytool --password 'two words'",
    "AccountKey=abc123==;",
    "sshpass -p hunter2 ssh h",
    "mysql -psecret db",
    "redis-cli -a secret",
    "PuTTY-User-Key-File-3: ssh-ed25519\nPrivate-MAC: 0a1b",
    "https://a.blob.core.windows.net/c?sv=1&sig=abc%2Fdef",
]
PLAIN = [
    "",
    "ls -la",
    "/home/dev/repo/notes.txt",
    '{"type":"create","filePath":"/home/dev/repo/notes.txt","content":"hello\\n"}',
    "git push --force origin main",
    "sha256 " + "0123456789abcdef" * 4,
    "structuredPatch userModified originalFile",
    "keyboard tokenizer secretary",  # words a test lets through to the patterns
    "ssh -p 2222 host; mkdir -p a/b; docker login --password-stdin",
    "https://example.com:8080/a@b",
]


def test_known_secrets_and_plain_text_come_out_as_every_pattern_gives() -> None:
    for secret in SECRETS:
        for text in (secret, f"echo {secret} > out.txt", f'{{"k":"{secret}"}}'):
            assert redact_secrets(text) == every_pattern(text), text
            assert might_hold_secret(text), text
    for text in PLAIN:
        assert redact_secrets(text) == every_pattern(text), text
    assert not might_hold_secret("ls -la /home/dev/repo")


fragments = st.sampled_from(
    SECRETS + PLAIN + [" ", "=", ":", '"', "'", "\\", "\n", "-", "_", "@", "://", "é", "İ"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(fragments | st.text(max_size=40), max_size=8).map("".join))
def test_any_text_comes_out_as_every_pattern_gives(text: str) -> None:
    assert redact_secrets(text) == every_pattern(text)
    if not might_hold_secret(text):
        assert every_pattern(text) == text
