"""Schemathesis against a real `tachograph serve`: no 5xx, nothing outside the OpenAPI contract.

Bounded for CI (a few examples per operation, a fixed seed, loopback only). A longer
run is documented in docs/operations.md ("Fuzzing the API").
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infra.settings import Settings
from tests.support import Server

pytestmark = pytest.mark.slow

API_KEY = "fuzz-" + "k" * 27
SCHEMATHESIS = str(Path(sys.executable).with_name("schemathesis"))


def schemathesis_args(url: str, max_examples: int, seed: int) -> list[str]:
    """The CI run; the documented longer run changes only the numbers."""
    return [
        SCHEMATHESIS,
        "run",
        f"{url}/openapi.json",
        "--header",
        f"x-tachograph-key: {API_KEY}",
        # Every check but one: a schema-valid body may still name a workspace directory
        # that does not exist or a cron that is not five fields; 422 is right there.
        "--checks",
        "all",
        "--exclude-checks",
        "positive_data_acceptance",
        # The live stream never ends by itself: each case would wait out the request
        # timeout (four minutes for that operation alone); tests/test_live_stream.py covers it.
        "--exclude-path",
        "/api/stream",
        "--max-examples",
        str(max_examples),
        "--seed",
        str(seed),
        # One worker: with two, hypothesis describes strategies by parsing their source
        # in both threads at once, which CPython 3.11 can fail with "SystemError: AST
        # constructor recursion depth mismatch" (seen in a full run, inside the fuzzer).
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--suppress-health-check",
        "all",
    ]


def test_fuzzing_the_openapi_contract_finds_no_5xx_and_no_violation(
    settings: Settings, tmp_path: Path
) -> None:
    server = Server(settings.with_(api_key=API_KEY), tmp_path / "serve.log")
    try:
        server.wait_ready(headers={"x-tachograph-key": API_KEY})
        result = subprocess.run(
            schemathesis_args(server.url, max_examples=8, seed=20261130),
            cwd=tmp_path,  # schemathesis keeps replay data in ./.schemathesis
            capture_output=True,
            text=True,
            # ~2-5 minutes on two cores; beside a second test worker under load, longer.
            timeout=600,
            check=False,
        )
    finally:
        server.kill()
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-12000:]
    assert "No issues found" in report or " passed" in report, report[-4000:]
    assert '"level": "error"' not in server.output(), server.output()[-4000:]
