"""Command-hook client: `tachograph hook <runtime> [<Event>] [--fail-closed]` (§6.5).

The runtime (claude, codex, gemini, copilot) spawns this once per hook, on the hot path
of every tool call, so it imports the stdlib only (checked by a test) and it never breaks
the agent: any delivery failure exits 0, prints nothing (or a deny for gate events when
fail-closed) and logs one line.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final

from api.adapters.runtimes import CLAUDE, RUNTIMES, Runtime
from domain.hook_dispatch import Decision

DEFAULT_URL: Final = "http://127.0.0.1:8000"
DEFAULT_DATA_DIR: Final = "./data"
DEFAULT_TIMEOUT_S: Final = 10.0
LOG_FILE_NAME: Final = "hooks.log"
MAX_ANSWER_BYTES: Final = 1024 * 1024
FAIL_CLOSED_REASON: Final = (
    "Tachograph could not be reached and this hook is fail-closed, so the action is denied."
)
USAGE: Final = "usage: tachograph hook {claude|codex|gemini|copilot} [<Event>] [--fail-closed]"

_KEY_HEADER: Final = "x-tachograph-key"
# The agent's own narrow token first; the admin key only for setups from before agent
# tokens existed (legacy: `tachograph doctor` warns where it finds the admin key exported).
_KEY_ENV: Final = ("TACHOGRAPH_AGENT_TOKEN", "TACHOGRAPH_API_KEY")

# Header -> environment variable; a header is sent only when its variable is set.
_FORWARDED_ENV: Final = (
    ("x-tachograph-session-id", "TACHOGRAPH_SESSION_ID"),
    ("x-tachograph-workspace", "TACHOGRAPH_WORKSPACE"),
)


class DeliveryError(Exception):
    """The hook was not delivered, or the server's answer was unusable."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: the credential must only ever go to the configured server."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        """Return no follow-up request, so a 3xx surfaces as an HTTPError."""
        return None


def run_claude_command_hook(
    event: str | None,
    *,
    stdin: IO[str],
    stdout: IO[str],
    env: Mapping[str, str],
    fail_closed: bool,
) -> int:
    """Relay one Claude Code hook to Tachograph and print its answer; always returns 0."""
    return run_command_hook(
        CLAUDE, event, stdin=stdin, stdout=stdout, env=env, fail_closed=fail_closed
    )


def run_command_hook(
    runtime: Runtime,
    event: str | None,
    *,
    stdin: IO[str],
    stdout: IO[str],
    env: Mapping[str, str],
    fail_closed: bool,
) -> int:
    """Relay one hook of `runtime` to Tachograph and print its answer; always returns 0."""
    payload: dict[str, Any] | None = None
    try:
        payload = _read_payload(stdin)
        if runtime is CLAUDE:
            if event:
                payload["hook_event_name"] = event
            elif isinstance(payload.get("hook_event_name"), str):
                event = payload["hook_event_name"]
        elif not event and isinstance(payload.get("hook_event_name"), str):
            event = payload["hook_event_name"]
        answer = _deliver(runtime, event, payload, env)
    except Exception as exc:  # whatever went wrong, the agent must go on
        _log_failure(env, event, str(exc) if isinstance(exc, DeliveryError) else _describe(exc))
        fallback = _fail_closed_answer(runtime, event, payload) if fail_closed else None
        if fallback is not None:
            _print(stdout, fallback)
        return 0
    _print(stdout, answer)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tachograph hook <runtime> ...` with the arguments after `hook`."""
    args = list(sys.argv[1:] if argv is None else argv)
    runtime = RUNTIMES.get(args[0]) if args else None
    fail_closed = "--fail-closed" in args
    positional = [a for a in args[1:] if a != "--fail-closed"]
    if runtime is None or len(positional) > 1 or any(a.startswith("-") for a in positional):
        # Exit 1, never 2: Claude Code (and Codex, Gemini CLI) read 2 as "block this action".
        print(USAGE, file=sys.stderr)
        return 1
    event = positional[0] if positional else None
    return run_command_hook(
        runtime, event, stdin=sys.stdin, stdout=sys.stdout, env=os.environ, fail_closed=fail_closed
    )


def _read_payload(stdin: IO[str]) -> dict[str, Any]:
    """Read Claude Code's hook JSON object from stdin."""
    try:
        payload = json.loads(stdin.read())
    except json.JSONDecodeError as exc:
        raise DeliveryError(f"stdin is not valid JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise DeliveryError("stdin is not a JSON object")
    return payload


def hook_path(runtime: Runtime, event: str | None) -> str:
    """The route a hook is relayed to: Claude Code's payload always names its event; the
    others' hooks post to their event's own route when the registration names it."""
    if runtime is CLAUDE or not event:
        return f"/hooks/{runtime.name}"
    return f"/hooks/{runtime.name}/{event}"


def _deliver(
    runtime: Runtime, event: str | None, payload: Mapping[str, Any], env: Mapping[str, str]
) -> dict[str, Any]:
    """POST the payload to Tachograph and return its JSON answer object."""
    url = (env.get("TACHOGRAPH_URL") or DEFAULT_URL).rstrip("/") + hook_path(runtime, event)
    headers = {"content-type": "application/json", "accept": "application/json"}
    headers.update({h: env[var] for h, var in _FORWARDED_ENV if env.get(var)})
    key = next((env[var] for var in _KEY_ENV if env.get(var)), None)
    if key is not None:
        headers[_KEY_HEADER] = key
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode("utf-8"), headers=headers, method="POST"
    )
    # No proxies from the process environment: the hook talks to the configured server only.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    try:
        with opener.open(request, timeout=_timeout_s(env)) as response:
            status, raw = response.status, response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise DeliveryError(f"{url} answered HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        raise DeliveryError(f"{url}: {_describe(exc)}") from exc
    return _parse_answer(url, status, raw)


def _parse_answer(url: str, status: int, raw: bytes) -> dict[str, Any]:
    """Check the server's reply is a 2xx JSON object of bounded size."""
    if not 200 <= status < 300:
        raise DeliveryError(f"{url} answered HTTP {status}")
    if len(raw) > MAX_ANSWER_BYTES:
        raise DeliveryError(f"{url} answered more than {MAX_ANSWER_BYTES} bytes")
    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise DeliveryError(f"{url} answered invalid JSON") from exc
    if not isinstance(answer, dict):
        raise DeliveryError(f"{url} answered JSON that is not an object")
    return answer


def _timeout_s(env: Mapping[str, str]) -> float:
    """Return the delivery timeout; an unusable setting falls back to the default."""
    try:
        timeout = float(env.get("TACHOGRAPH_HOOK_TIMEOUT_S", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return timeout if math.isfinite(timeout) and timeout > 0 else DEFAULT_TIMEOUT_S


def _fail_closed_answer(
    runtime: Runtime, event: str | None, payload: Mapping[str, Any] | None
) -> Any:
    """Return the runtime's deny answer for a gate event, or None when nothing is gated."""
    try:
        ev = runtime.to_event(payload if payload is not None else {}, event)
    except ValueError:
        ev = None
    normalised = ev.event if ev is not None else event
    if normalised not in runtime.gate_events:
        return None
    if normalised == "Stop" and payload is not None and payload.get("stop_hook_active") is True:
        # Claude Code is already continuing because of a Stop hook: blocking again while
        # Tachograph is down would keep the agent from ever stopping.
        return None
    answer, _ = runtime.render(normalised, Decision("deny", FAIL_CLOSED_REASON))
    return answer


def _log_failure(env: Mapping[str, str], event: str | None, error: str) -> None:
    """Append one JSON line to hooks.log in the data dir; a broken log is ignored too."""
    now = time.time()
    at = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    line = json.dumps({"at": at, "event": event, "error": error}) + "\n"
    try:
        data_dir = Path(env.get("TACHOGRAPH_DATA_DIR") or DEFAULT_DATA_DIR)
        data_dir.mkdir(parents=True, exist_ok=True)
        with (data_dir / LOG_FILE_NAME).open("a", encoding="utf-8") as log:
            log.write(line)
    except OSError:
        pass


def _describe(exc: BaseException) -> str:
    """Return a one-line, bounded description of a failure."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    text = str(reason) or type(reason).__name__
    if isinstance(reason, BaseException) and type(reason).__name__ not in text:
        text = f"{type(reason).__name__}: {text}"
    return text[:500]


def _print(stdout: IO[str], answer: object) -> None:
    """Write the answer as one JSON line; a closed pipe is not the agent's problem."""
    try:
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    raise SystemExit(main())
