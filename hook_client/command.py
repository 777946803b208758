"""Command-hook client: `tachograph hook <runtime> [<Event>] [--fail-closed]` (§6.5).

The runtime (claude, codex, gemini, copilot, qwen, droid) spawns this once per hook, on the hot path
of every tool call. So it imports little: the C socket module on the way to an
`http://` server (http.client would pull in the email parser, urllib.request ssl); json
only for an answer that decides something or a failure; urllib for an `https://` URL, a
runtime adapter for a fail-closed answer, and the log, only when needed. It never
breaks the agent: any delivery failure exits 0, prints nothing (or a deny for gate events
when fail-closed) and notes one line in the user's failure log (`hook_log_path`).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs a hook ~3 ms
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import IO, Any, Final

DEFAULT_URL: Final = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S: Final = 10.0
# Failed deliveries are noted in one per-user file, never in the agent's working directory
# (a project's repository): TACHOGRAPH_HOOK_LOG, else $XDG_STATE_HOME/tachograph/hooks.log.
LOG_ENV: Final = "TACHOGRAPH_HOOK_LOG"
LOG_FILE_NAME: Final = "hooks.log"
# A log past this size is moved aside (to `hooks.log.1`) before the next failure is noted.
LOG_ROTATE_BYTES: Final = 1024 * 1024
# The line noted after failures when a delivery gets through again (`tachograph doctor`
# counts the failures since the last one).
SUCCESS_MARK: Final = b'"ok": true}'
MAX_ANSWER_BYTES: Final = 1024 * 1024
FAIL_CLOSED_REASON: Final = (
    "Tachograph could not be reached and this hook is fail-closed, so the action is denied."
)
USAGE: Final = (
    "usage: tachograph hook {claude|codex|gemini|copilot|qwen|droid} [<Event>] [--fail-closed]"
)
# The runtimes a hook relays for (ingest/runtimes/runtimes.py holds their adapters).
RUNTIME_NAMES: Final = ("claude", "codex", "gemini", "copilot", "qwen", "droid")
# Hooks delivered by a detached child, so that the hook returns at once (_handed_off).
DETACHED_EVENTS: Final = frozenset({"SessionEnd", "StopFailure"})

_KEY_HEADER: Final = "x-tachograph-key"
# The event a Claude Code hook was registered for (the payload names it too).
_EVENT_HEADER: Final = "x-tachograph-event"
# The agent's own narrow token first; the admin key only for setups from before agent
# tokens existed (legacy: `tachograph doctor` warns where it finds the admin key exported).
_KEY_ENV: Final = ("TACHOGRAPH_AGENT_TOKEN", "TACHOGRAPH_API_KEY")

# Header -> environment variable; a header is sent only when its variable is set.
_FORWARDED_ENV: Final = (
    ("x-tachograph-session-id", "TACHOGRAPH_SESSION_ID"),
    ("x-tachograph-workspace", "TACHOGRAPH_WORKSPACE"),
    # The trace context Claude Code hands its hook subprocesses: the decision's exported
    # span joins the runtime's trace.
    ("traceparent", "TRACEPARENT"),
)


class DeliveryError(Exception):
    """The hook was not delivered, or the server's answer was unusable."""


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
        "claude", event, stdin=stdin, stdout=stdout, env=env, fail_closed=fail_closed
    )


def run_command_hook(
    runtime: str,
    event: str | None,
    *,
    stdin: IO[str],
    stdout: IO[str],
    env: Mapping[str, str],
    fail_closed: bool,
) -> int:
    """Relay one hook of `runtime` to Tachograph and print its answer; always returns 0.

    The payload is relayed as the runtime wrote it, and a pass (`{}`) is printed as the
    server wrote it: the usual hook never decodes or encodes JSON (importing json costs a
    hook's start more than the rest of its work). Only a failure, or an answer that
    decides something, is decoded, to check it or to build the fail-closed answer.
    """
    raw = b""
    try:
        raw = _read_payload(stdin)
        answer = _deliver(runtime, event, raw, env)
    except Exception as exc:  # whatever went wrong, the agent must go on
        payload, problem = _decoded(raw)
        error = str(exc) if isinstance(exc, DeliveryError) else _describe(exc)
        if payload is not None and not event and isinstance(payload.get("hook_event_name"), str):
            event = payload["hook_event_name"]
        _log_failure(env, event, problem or error)
        fallback = _fail_closed_answer(runtime, event, payload) if fail_closed else None
        if fallback is not None:
            _print(stdout, fallback)
        return 0
    _write(stdout, answer)
    _note_success(env)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run `tachograph hook <runtime> ...` with the arguments after `hook`."""
    args = list(sys.argv[1:] if argv is None else argv)
    runtime = args[0] if args and args[0] in RUNTIME_NAMES else None
    fail_closed = "--fail-closed" in args
    positional = [a for a in args[1:] if a != "--fail-closed"]
    if runtime is None or len(positional) > 1 or any(a.startswith("-") for a in positional):
        # Exit 1, never 2: Claude Code (and Codex, Gemini CLI) read 2 as "block this action".
        print(USAGE, file=sys.stderr)
        return 1
    event = positional[0] if positional else None
    if event in DETACHED_EVENTS and _handed_off(runtime, event):
        return 0
    return run_command_hook(
        runtime, event, stdin=sys.stdin, stdout=sys.stdout, env=os.environ, fail_closed=fail_closed
    )


def _handed_off(runtime: str, event: str) -> bool:
    """Deliver the hook from a detached child; True in this (parent) process once it runs.

    These events decide nothing, and a runtime may kill its hooks as it shuts down
    (Claude Code, in `-p` mode, ~20 ms in): the hook returns at once, before anything
    but the standard start-up is loaded, and the child (its own session, so a signal to
    the hook's process group misses it; its standard streams on /dev/null, so the
    runtime is not kept waiting for the end of the hook's output) delivers it alone.
    """
    data = sys.stdin.read()
    try:
        pid = os.fork()
    except OSError:
        return False  # no child: deliver from this process, with stdin already read
    if pid:
        return True
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        import io

        run_command_hook(
            runtime,
            event,
            stdin=io.StringIO(data),
            stdout=io.StringIO(),
            env=os.environ,
            fail_closed=False,
        )
    finally:
        os._exit(0)


def _read_payload(stdin: IO[str]) -> bytes:
    """The hook JSON the runtime wrote on stdin, as bytes (checked only for its shape)."""
    buffer = getattr(stdin, "buffer", None)
    raw = buffer.read() if buffer is not None else stdin.read().encode("utf-8")
    if not raw.lstrip()[:1] == b"{":
        raise DeliveryError("stdin is not a JSON object")
    return bytes(raw)


def _decoded(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """The payload as an object, or None and what is wrong with stdin (failure path)."""
    import json

    try:
        payload = json.loads(raw)
    except ValueError as exc:
        return None, f"stdin is not valid JSON: {exc}"
    if not isinstance(payload, dict):
        return None, "stdin is not a JSON object"
    return payload, None


def hook_path(runtime: str, event: str | None) -> str:
    """The route a hook is relayed to: Claude Code's payload always names its event; the
    others' hooks post to their event's own route when the registration names it."""
    if runtime == "claude" or not event:
        return f"/hooks/{runtime}"
    return f"/hooks/{runtime}/{event}"


def _deliver(runtime: str, event: str | None, raw: bytes, env: Mapping[str, str]) -> bytes:
    """POST the payload to Tachograph and return its answer, a JSON object's bytes."""
    url = (env.get("TACHOGRAPH_URL") or DEFAULT_URL).rstrip("/") + hook_path(runtime, event)
    headers = {"content-type": "application/json", "accept": "application/json"}
    headers.update({h: env[var] for h, var in _FORWARDED_ENV if env.get(var)})
    key = next((env[var] for var in _KEY_ENV if env.get(var)), None)
    if key is not None:
        headers[_KEY_HEADER] = key
    if runtime == "claude" and event:
        # The registration names the event; Claude Code's route takes it from here.
        headers[_EVENT_HEADER] = event
    timeout = _timeout_s(env)
    try:
        if url.startswith("http://"):
            status, answer = _post_plain(url, headers, raw, timeout)
        else:
            status, answer = _post_tls(url, headers, raw, timeout)
    except (OSError, ValueError) as exc:
        raise DeliveryError(f"{url}: {_describe(exc)}") from exc
    return _checked_answer(url, status, answer)


def _post_plain(
    url: str, headers: Mapping[str, str], body: bytes, timeout: float
) -> tuple[int, bytes]:
    """One HTTP/1.1 POST over a plain socket: no proxies, no redirects (a 3xx is just a
    status that is not 2xx), the whole exchange within `timeout`."""
    import _socket  # socket.py would import enum and selectors: ~15 ms of a hook's start

    authority, _, path = url[len("http://") :].partition("/")
    host, port = _host_port(authority)
    head = [f"POST /{path} HTTP/1.1", f"host: {authority}", "connection: close"]
    if any("\r" in v or "\n" in v for v in headers.values()):
        raise ValueError("a header value from the environment holds a line break")
    head += [f"{name}: {value}" for name, value in headers.items()]
    head.append(f"content-length: {len(body)}")
    request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
    deadline = _monotonic() + timeout
    # An ASCII host goes as bytes: a str is encoded with the idna codec, whose import (re,
    # enum, unicodedata) would cost a hook more than the rest of its work.
    name = host.encode("ascii") if host.isascii() else host
    family, kind, proto, _, address = _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM)[0]
    conn = _socket.socket(family, kind, proto)
    try:
        conn.settimeout(timeout)
        conn.connect(address)
        conn.sendall(request)
        chunks: list[bytes] = []
        size = 0
        while True:
            conn.settimeout(max(deadline - _monotonic(), 0.001))
            chunk = conn.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > MAX_ANSWER_BYTES + 64 * 1024:  # the answer, and room for its headers
                break
    finally:
        conn.close()
    return _parse_response(b"".join(chunks))


def _host_port(authority: str) -> tuple[str, int]:
    if authority.startswith("["):  # [::1]:8000
        host, _, rest = authority[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else 80
    host, _, port = authority.partition(":")
    if not host:
        raise ValueError("the URL names no host")
    return host, int(port) if port else 80


def _parse_response(raw: bytes) -> tuple[int, bytes]:
    """Status and body of an HTTP/1.1 response read to its end (`connection: close`)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise ValueError("the server closed the connection before answering")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
        raise ValueError("the server's answer is not HTTP/1.1")
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    if fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        body = _unchunk(body)
    elif b"content-length" in fields:
        length = int(fields[b"content-length"])
        if len(body) < length and length <= MAX_ANSWER_BYTES:
            raise ValueError("the server's answer was cut short")
        body = body[:length] if length <= MAX_ANSWER_BYTES else body
    return int(parts[1]), body


def _unchunk(body: bytes) -> bytes:
    out: list[bytes] = []
    rest = body
    while True:
        size_line, sep, rest = rest.partition(b"\r\n")
        if not sep:
            raise ValueError("the server's chunked answer was cut short")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(rest[:size])
        rest = rest[size + 2 :]


def _post_tls(
    url: str, headers: Mapping[str, str], body: bytes, timeout: float
) -> tuple[int, bytes]:
    """The same over https, through urllib (no proxies, no redirects)."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """Refuse redirects: the credential must only ever go to the configured server."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None  # a 3xx surfaces as an HTTPError

    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, b""


def _monotonic() -> float:
    import time

    return time.monotonic()


def _checked_answer(url: str, status: int, raw: bytes) -> bytes:
    """The server's reply if it is a 2xx JSON object of bounded size (a pass, `{}`, is
    taken as it is; anything else is decoded to be sure)."""
    if not 200 <= status < 300:
        raise DeliveryError(f"{url} answered HTTP {status}")
    if len(raw) > MAX_ANSWER_BYTES:
        raise DeliveryError(f"{url} answered more than {MAX_ANSWER_BYTES} bytes")
    if raw.strip() == b"{}":
        return b"{}"
    import json

    try:
        answer = json.loads(raw)
    except ValueError as exc:
        raise DeliveryError(f"{url} answered invalid JSON") from exc
    if not isinstance(answer, dict):
        raise DeliveryError(f"{url} answered JSON that is not an object")
    return bytes(raw.strip())


def _timeout_s(env: Mapping[str, str]) -> float:
    """Return the delivery timeout; an unusable setting falls back to the default, and
    says so on stderr (the runtime shows a hook's stderr in its debug output), naming the
    setting: the agent must not stop over it, but a person must be able to find it."""
    raw = env.get("TACHOGRAPH_HOOK_TIMEOUT_S")
    if raw is None:
        return DEFAULT_TIMEOUT_S
    try:
        timeout = float(raw)
    except ValueError:
        timeout = float("nan")
    if timeout == timeout and timeout not in (float("inf"), float("-inf")) and timeout > 0:
        return timeout
    print(
        f"tachograph hook: TACHOGRAPH_HOOK_TIMEOUT_S={raw!r} is not a positive number of "
        f"seconds; waiting the default {DEFAULT_TIMEOUT_S:g} s",
        file=sys.stderr,
    )
    return DEFAULT_TIMEOUT_S


def _fail_closed_answer(name: str, event: str | None, payload: Mapping[str, Any] | None) -> Any:
    """Return the runtime's deny answer for a gate event, or None when nothing is gated."""
    from domain.hook_dispatch import Decision
    from ingest.runtimes.runtimes import RUNTIMES

    runtime = RUNTIMES.get(name)
    if runtime is None:
        return None
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


def hook_log_path(env: Mapping[str, str]) -> str:
    """The failure log: TACHOGRAPH_HOOK_LOG, else `$XDG_STATE_HOME/tachograph/hooks.log`
    (`~/.local/state/...` when that is unset). A relative path in either is ignored: it
    would put the log in the agent's working directory, the user's repository."""
    explicit = env.get(LOG_ENV) or ""
    if os.path.isabs(explicit):
        return explicit
    state = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):  # the XDG spec: a relative value is invalid
        home = env.get("HOME") or os.path.expanduser("~")
        state = os.path.join(home, ".local", "state")
    return os.path.join(state, "tachograph", LOG_FILE_NAME)


def _log_failure(env: Mapping[str, str], event: str | None, error: str) -> None:
    """Append one JSON line to the failure log; a broken log is ignored too."""
    import json

    line = json.dumps({"at": _now_iso(), "event": event, "error": error}) + "\n"
    path = hook_log_path(env)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            too_big = os.path.getsize(path) > LOG_ROTATE_BYTES
        except FileNotFoundError:
            too_big = False
        if too_big:
            os.replace(path, path + ".1")
        with open(path, "a", encoding="utf-8") as log:
            log.write(line)
    except OSError:
        pass


def _note_success(env: Mapping[str, str]) -> None:
    """After logged failures, note once that a delivery got through again.

    The usual case costs one failed open: no log, nothing ever failed. With a log, only
    its last line is read, and a success line is appended when that was a failure.
    """
    path = hook_log_path(env)
    try:
        with open(path, "rb") as log:
            size = log.seek(0, 2)
            log.seek(max(0, size - 512))
            last = log.read().rstrip()
        if not last or last.endswith(SUCCESS_MARK):
            return
        with open(path, "a", encoding="utf-8") as log:
            log.write('{"at": "' + _now_iso() + '", ' + SUCCESS_MARK.decode() + "\n")
    except OSError:
        pass


def _now_iso() -> str:
    import time

    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


def _describe(exc: BaseException) -> str:
    """Return a one-line, bounded description of a failure."""
    reason = getattr(exc, "reason", None) or exc  # urllib's URLError wraps the cause
    text = str(reason) or type(reason).__name__
    if isinstance(reason, BaseException) and type(reason).__name__ not in text:
        text = f"{type(reason).__name__}: {text}"
    return text[:500]


def _write(stdout: IO[str], answer: bytes) -> None:
    """Write the server's answer as one line; a closed pipe is not the agent's problem."""
    try:
        stdout.write(answer.decode("utf-8") + "\n")
        stdout.flush()
    except (OSError, ValueError):
        pass


def _print(stdout: IO[str], answer: object) -> None:
    """Write the answer as one JSON line; a closed pipe is not the agent's problem."""
    import json

    try:
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    # Run as a file (`python -S …/hook_client/command.py`, as `hook install` writes it, to
    # skip the site machinery): the package root is this file's grandparent.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    raise SystemExit(main())
