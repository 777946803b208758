"""Each shape of secret redaction knows: a positive case (the secret is gone, the marker is
there, what names it stays readable) and a negative case (a look-alike that is no
secret is left exactly as it was)."""

from __future__ import annotations

import pytest

from domain.redaction import REDACTED, redact_json, redact_secrets

PGP_KEY = (
    "-----BEGIN PGP PRIVATE KEY BLOCK-----\n\nlQOYBGN0ZXN0AQgAxyz123\n=AbCd\n"
    "-----END PGP PRIVATE KEY BLOCK-----"
)
PUTTY_KEY = (
    "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: me\nPublic-Lines: 2\n"
    "AAAAC3NzaC1lZDI1NTE5\nPrivate-Lines: 1\nAAAAIFh0ZXN0a2V5\nPrivate-MAC: 0a1b2c3d"
)

# (shape, text, the secret that must go, what must stay)
POSITIVE = [
    ("url", "psql postgresql://app:pa55w0rd@db:5432/prod", "pa55w0rd", "postgresql://app:"),
    (
        "url",
        "git clone https://x-access-token:gho_tok@github.com/o/r",
        "gho_tok",
        "x-access-token:",
    ),
    ("url", "redis://:s3cr3t@cache:6379/0", "s3cr3t", "redis://:"),
    ("authorization", "curl -H 'Authorization: Basic dXNlcjpwdw==' h", "dXNlcjpwdw==", "Basic"),
    ("authorization", '{"Authorization":"Token abc123def"}', "abc123def", "Token"),
    ("authorization", "Proxy-Authorization: Digest u=1, r=2f9c", "r=2f9c", "Digest"),
    ("authorization", "authorization: xyzzy-plain-creds", "xyzzy-plain-creds", "authorization"),
    ("bearer", "got Bearer eyJhbGciOi.abc.def back", "eyJhbGciOi.abc.def", "Bearer"),
    ("curl", "curl -u admin:hunter2 https://h", "hunter2", "-u admin:"),
    ("curl", "curl --user 'admin:two words' https://h", "two words", "--user 'admin:"),
    ("curl", "curl -sS -uadmin:pw123 https://h", "pw123", "-uadmin:"),
    ("aws", "aws configure set aws_secret_access_key wJalrXUtnFEMI/K7MDENG/bPx", "wJalrX", "set"),
    ("aws", "aws_session_token = FwoGZXIvYXdzEBYaDH", "FwoGZXIvYXdzEBYaDH", "aws_session_token"),
    (
        "private key",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpA\n-----END RSA PRIVATE KEY-----",
        "MIIEpA",
        "",
    ),
    (
        "private key",
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIFHz\n-----END ENCRYPTED PRIVATE KEY-----",
        "MIIFHz",
        "",
    ),
    ("private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNz (cut off", "b3BlbnNz", ""),
    ("private key", PGP_KEY, "lQOYBGN0ZXN0AQgAxyz123", ""),
    ("private key", PUTTY_KEY, "AAAAIFh0ZXN0a2V5", ""),
    ("password flag", "mytool --password x", " x", "--password"),
    ("password flag", "mytool --password=s3cret", "s3cret", "--password="),
    ("password flag", 'mytool --db-password "two words"', "two words", "--db-password"),
    ("password flag", "gh auth --token ghtok123", "ghtok123", "--token"),
    ("password flag", "keytool -storepass changeit -list", "changeit", "-storepass"),
    ("password flag", "openssl pkcs12 -passin pass:hunter2", "hunter2", "-passin"),
    ("password flag", "tool --api-key abc123", "abc123", "--api-key"),
    ("mysql", "mysql -u root -pS3cret db", "S3cret", "mysql -u root -p"),
    ("mysql", "mysqldump -h db -p 'two words' app", "two words", "mysqldump"),
    ("sshpass", "sshpass -p hunter2 ssh host", "hunter2", "sshpass -p"),
    ("sshpass", "sshpass -v -p'two words' ssh host", "two words", "sshpass -v -p"),
    ("redis", "redis-cli -h cache -a s3cret ping", "s3cret", "-a"),
    (
        "azure",
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=Zm9vYmFy==;X=y",
        "Zm9vYmFy",
        "AccountKey=",
    ),
    (
        "azure",
        "Endpoint=sb://n/;SharedAccessKeyName=k;SharedAccessKey=c2VjcmV0=",
        "c2VjcmV0",
        "SharedAccessKey=",
    ),
    (
        "azure",
        "https://a.blob.core.windows.net/c/b?sv=2020-08-04&sig=AbC%2FdEf%3D",
        "AbC%2FdEf",
        "&sig=",
    ),
    ("assignment", "export DB_PASSWORD='correct horse battery'", "horse battery", "DB_PASSWORD="),
    ("assignment", '{"client_secret": "two words here"}', "two words here", "client_secret"),
    ("assignment", 'echo "{\\"api_key\\": \\"a b c\\"}"', "a b c", "api_key"),
    ("assignment", "SECRET_KEY = 'x'", "'x'", "SECRET_KEY"),
    ("assignment", "api_key=hunter2hunter2", "hunter2hunter2", "api_key="),
    ("assignment", "password:\n  hunter2hunter2", "hunter2hunter2", "password"),
    ("aws key", "id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE", "here"),
    ("aws key", "id ASIAY34FZKBOKMUTVV7A here", "ASIAY34FZKBOKMUTVV7A", "here"),
    ("github", "ghp_" + "a1B2" * 9, "ghp_", ""),
    ("github", "gho_" + "a1B2" * 9, "gho_", ""),
    ("github", "ghs_" + "a1B2" * 9, "ghs_", ""),
    ("github", "github_pat_11ABCDEFG0" + "x" * 40, "github_pat_", ""),
    ("gitlab", "glpat-" + "Ab1_" * 6, "glpat-", ""),
    ("slack", "xoxb-1234567890-0987654321-AbCdEf", "xoxb-", ""),
    ("slack", "xoxp-1234567890-0987654321-AbCdEf", "xoxp-", ""),
    ("stripe", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "sk_live_", ""),
    ("stripe", "rk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "rk_live_", ""),
    ("openai", "OPENAI=sk-" + "Ab1" * 16, "Ab1Ab1", "OPENAI="),
    ("openai", "key sk-proj-" + "Ab1_" * 12, "sk-proj-", "key"),
    ("anthropic", "key sk-ant-api03-" + "Ab1-" * 20, "sk-ant-", "key"),
    ("google", "key AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q", "AIzaSy", "key"),
    ("npm", "//registry.npmjs.org/:_authToken=npm_" + "a1B2" * 9, "npm_a1B2", "_authToken="),
    ("npm", "publish with npm_" + "a1B2" * 9, "npm_a1B2", "publish"),
    ("pypi", "pypi-AgEIcHlwaS5vcmc" + "Ab1" * 20, "pypi-AgEI", ""),
    ("huggingface", "hf_" + "aB1" * 12, "hf_aB1", ""),
    ("jwt", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N", "eyJhbGci", ""),
    ("opaque", "token Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVc", "Zx9Qw8Er7Ty6", "token"),
]

# (shape, text that holds no secret)
NEGATIVE = [
    ("url", "see https://example.com:8080/docs/a@b"),
    ("url", "git clone git@github.com:org/repo.git"),
    ("url", "ssh://git@host/repo and mailto:dev@example.com"),
    ("authorization", "authorization failed for user dev"),
    ("bearer", "the bearer of bad news"),
    ("curl", "curl -u admin https://h (curl asks for the password)"),
    ("curl", "docker run -u 1000:1000 image"),
    ("password flag", "echo x | docker login --password-stdin -u dev"),
    ("password flag", "kubectl --token-file /run/token get pods"),
    ("password flag", "llm --max-tokens 100 --passes 3"),
    ("password flag", "psql --no-password -d app"),
    ("mysql", "mysql -u root -p -h db"),
    ("-p", "ssh -p 2222 host; mkdir -p a/b; psql -p 5432; docker run -p 80:80 x"),
    ("-p", "scp -P 2222 f host:; git -p log; python -m http.server -p 8000"),
    ("sshpass", "sshpass -e ssh -p 22 host"),
    ("assignment", "the token expiration is 30 minutes; max_tokens=4096"),
    ("assignment", "password_reset_url is documented; keyboard tokenizer secretary"),
    ("assignment", "reset your password in settings"),
    ("private key", "-----BEGIN PUBLIC KEY-----\nMIIBIjAN\n-----END PUBLIC KEY-----"),
    ("private key", "-----BEGIN CERTIFICATE-----\nMIIDdz\n-----END CERTIFICATE-----"),
    ("key shapes", "task-runner ask-me sk-short ghp_short npm_install hf_x AIzaShort"),
    ("key shapes", "sha256 " + "0123456789abcdef" * 4),
    ("key shapes", "commit 3f786850e387550fdab836ed7e6dc881de23001b, uuid 5b3f7c1e-2d4a-5e8f"),
    ("azure", "AccountName=myaccount;EndpointSuffix=core.windows.net"),
    ("azure", "https://example.com/search?sign=up&design=x"),
    ("paths", "/home/dev/repo/src/components/Button.tsx"),
]


@pytest.mark.parametrize(("shape", "text", "secret", "kept"), POSITIVE)
def test_each_shape_is_redacted(shape: str, text: str, secret: str, kept: str) -> None:
    redacted = redact_secrets(text)
    assert secret not in redacted, (shape, redacted)
    assert REDACTED in redacted and kept in redacted, (shape, redacted)
    assert redact_secrets(redacted) == redacted  # once is enough


@pytest.mark.parametrize(("shape", "text"), NEGATIVE)
def test_each_look_alike_is_left_alone(shape: str, text: str) -> None:
    assert redact_secrets(text) == text, shape


def test_a_quoted_value_is_cut_whole_not_only_its_first_word() -> None:
    assert redact_secrets('password = "correct horse battery staple"') == (
        f'password = "{REDACTED}"'
    )
    assert redact_secrets("--password 'correct horse'") == f"--password '{REDACTED}'"


def test_json_keeps_its_structure_and_loses_secret_members_and_strings() -> None:
    value = {
        "command": "curl -u me:pw https://h",
        "headers": {"Authorization": "Basic x", "Accept": "*/*"},
        "n": 3,
        "items": ["plain", {"api_token": "t"}, None, True],
    }
    assert redact_json(value) == {
        "command": f"curl -u me:{REDACTED} https://h",
        "headers": {"Authorization": REDACTED, "Accept": "*/*"},
        "n": 3,
        "items": ["plain", {"api_token": REDACTED}, None, True],
    }


def test_no_text_makes_a_pattern_slow() -> None:
    """Every scan is bounded: texts built to backtrack redact in well under a second."""
    import time

    hostile = [
        "curl " * 4000,
        "mysql -u " * 2000,
        "a." * 8000 + "://",
        "token" * 3000 + "=",
        "://" + ":" * 8000,
        '--password "' + "x" * 16000,
        "-----BEGIN PRIVATE KEY-----" * 500,
    ]
    for text in hostile:
        started = time.perf_counter()
        redact_secrets(text)
        assert time.perf_counter() - started < 1.0, text[:20]
