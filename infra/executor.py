"""The command executor: runs one attempt's agent process without a shell and reaps it.

Stop requests (timeout, cancellation, shutdown) send SIGTERM to the process group, wait
a bounded grace, then SIGKILL. A process that still cannot be reaped is reported once
and keeps being waited for, so its slot stays taken.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

PLACEHOLDER = re.compile(r"\{(prompt|model|taskId|workspace|hookSettings)\}")
# Never handed to an agent: they unlock the database, the audit signing key, hook
# secrets or the API (the bootstrap admin key; the server's own agent token, if any:
# each attempt gets a token of its own instead).
SERVER_SECRETS = frozenset(
    {
        "TACHOGRAPH_API_KEY",
        "TACHOGRAPH_AGENT_TOKEN",
        "TACHOGRAPH_DATABASE_URL",
        "TACHOGRAPH_CODER_HOOK_SECRET",
        "TACHOGRAPH_LOG_SIGNING_KEY",
        "TACHOGRAPH_HOOKS",
        "PGPASSWORD",
    }
)
MAX_LINE_BYTES = 1024 * 1024
STDERR_TAIL_BYTES = 4096
_PR_SET_PDEATHSIG = 1


class LineSink(Protocol):
    """Receives stdout lines as they arrive and is asked to flush on a fixed rhythm."""

    def line(self, text: str) -> None: ...

    def flush(self) -> None: ...


@dataclass(frozen=True)
class CommandSpec:
    """What to run, where, with which environment."""

    argv: tuple[str, ...]
    cwd: Path
    env: Mapping[str, str]


@dataclass(frozen=True)
class RunResult:
    """How an attempt's process ended."""

    exit_code: int | None
    stopped: str | None  # timeout | cancelled | shutdown | lost; None when it exited itself
    reaped: bool
    stderr_tail: str = ""
    spawn_error: str | None = None
    spawn_error_class: str | None = None
    killed: bool = False


_OPTIONAL = ("model", "hookSettings")


def build_argv(
    template: Sequence[str],
    *,
    prompt: str,
    model: str | None,
    task_id: str,
    workspace: str,
    hook_settings: str | None = None,
) -> tuple[str, ...]:
    """Substitute placeholders in one pass (values are never re-expanded nor shell-parsed).

    Without a model, an argument `{model}` is left out together with a flag right
    before it (`["--model", "{model}"]`), and `--model={model}` is left out; the same
    for `{hookSettings}` (a Claude Code settings file Tachograph wrote for the run).
    """
    values = {
        "prompt": prompt,
        "model": model,
        "taskId": task_id,
        "workspace": workspace,
        "hookSettings": hook_settings,
    }
    missing = [f"{{{name}}}" for name in _OPTIONAL if values[name] is None]
    argv: list[str] = []
    for arg in template:
        placeholder = next((p for p in missing if p in arg), None)
        if placeholder is not None:
            if (
                arg == placeholder
                and argv
                and argv[-1].startswith("-")
                and not PLACEHOLDER.search(argv[-1])
            ):
                argv.pop()
            continue
        argv.append(PLACEHOLDER.sub(lambda m: values[m.group(1)] or "", arg))
    return tuple(argv)


def task_env(
    base: Mapping[str, str],
    *,
    drop: Iterable[str],
    task_id: str,
    turn_id: str,
    session_id: str,
    url: str,
    workspace: str,
    agent_token: str | None = None,
    secret_values: Iterable[str | None] = (),
) -> dict[str, str]:
    """The agent's environment: the server's minus its secrets, plus the task's identity.

    A variable is withheld when its name is a secret's, and also when its value is one
    (an admin key copied into another variable reaches no agent either).
    """
    hidden = SERVER_SECRETS | frozenset(drop)
    values = {v for v in secret_values if v}
    env = {k: v for k, v in base.items() if k not in hidden and v not in values}
    if agent_token is not None:
        env["TACHOGRAPH_AGENT_TOKEN"] = agent_token  # bound to this attempt's session
    env.update(
        {
            "TACHOGRAPH_TASK_ID": task_id,
            "TACHOGRAPH_TURN_ID": turn_id,
            "TACHOGRAPH_SESSION_ID": session_id,
            "TACHOGRAPH_URL": url,
            "TACHOGRAPH_WORKSPACE": workspace,
        }
    )
    return env


def _parent_death_signal() -> Callable[[], None] | None:
    """A pre-exec hook so the agent dies with its worker (Linux), or None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)

    return hook


class CommandRunner:
    """Runs a command to completion, a stop, or an unreapable state; one call per attempt."""

    def __init__(
        self,
        *,
        timeout_s: float,
        grace_s: float,
        reap_wait_s: float = 5.0,
        flush_s: float = 0.5,
        tick_s: float = 0.05,
        drain_s: float = 1.0,
    ) -> None:
        self.timeout_s = timeout_s
        self.grace_s = grace_s
        self.reap_wait_s = reap_wait_s
        self.flush_s = flush_s
        self.tick_s = tick_s
        self.drain_s = drain_s
        self._preexec = _parent_death_signal()
        # Processes that survived SIGKILL: kept referenced (and reapable later), never dropped.
        self.unreaped: list[subprocess.Popen[bytes]] = []

    def spawn(self, spec: CommandSpec) -> subprocess.Popen[bytes]:
        """Start the process in its own process group (so a stop reaches its children)."""
        return subprocess.Popen(
            list(spec.argv),
            cwd=spec.cwd,
            env=dict(spec.env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=self._preexec,  # only prctl, resolved before any fork
            close_fds=True,
        )

    def signal(self, proc: subprocess.Popen[bytes], sig: int) -> None:
        """Signal the whole process group; a group already gone is fine."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)

    def run(
        self,
        spec: CommandSpec,
        sink: LineSink,
        should_stop: Callable[[], str | None],
        on_unreaped: Callable[[], None],
    ) -> RunResult:
        """Run until exit or stop; `should_stop` returns a stop reason or None."""
        try:
            proc = self.spawn(spec)
        except FileNotFoundError as exc:
            return _spawn_failure(spec, exc, "configuration")
        except PermissionError as exc:
            return _spawn_failure(spec, exc, "permission")
        except OSError as exc:
            return _spawn_failure(spec, exc, "infrastructure")
        try:
            result = _Watch(self, proc, sink, should_stop, on_unreaped).run()
            if not result.reaped:
                self.unreaped.append(proc)
            return result
        finally:
            # Not `with proc`: its exit waits for the process, which may never be reapable.
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def _spawn_failure(spec: CommandSpec, exc: OSError, error_class: str) -> RunResult:
    where = f" (in {exc.filename})" if exc.filename and str(exc.filename) != spec.argv[0] else ""
    message = f"cannot start {spec.argv[0]!r}: {exc.strerror or exc}{where}"
    return RunResult(None, None, True, spawn_error=message, spawn_error_class=error_class)


class _Watch:
    """The select loop of one running process."""

    def __init__(
        self,
        runner: CommandRunner,
        proc: subprocess.Popen[bytes],
        sink: LineSink,
        should_stop: Callable[[], str | None],
        on_unreaped: Callable[[], None],
    ) -> None:
        self.runner = runner
        self.proc = proc
        self.sink = sink
        self.should_stop = should_stop
        self.on_unreaped = on_unreaped
        self.out = bytearray()
        self.err = bytearray()
        self.skipping_long_line = False

    def run(self) -> RunResult:
        r = self.runner
        selector = selectors.DefaultSelector()
        assert self.proc.stdout is not None and self.proc.stderr is not None
        selector.register(self.proc.stdout, selectors.EVENT_READ, "out")
        selector.register(self.proc.stderr, selectors.EVENT_READ, "err")
        start = time.monotonic()
        last_flush = start
        stopped: str | None = None
        term_at: float | None = None
        kill_at: float | None = None
        unreaped = False
        drain_until: float | None = None
        try:
            while True:
                if selector.get_map():
                    for key, _ in selector.select(r.tick_s):
                        self._read(selector, key)
                elif self.proc.poll() is None:
                    time.sleep(r.tick_s)  # output closed early; keep watching the process
                now = time.monotonic()
                if now - last_flush >= r.flush_s:
                    self.sink.flush()
                    last_flush = now
                code = self.proc.poll()
                if code is not None:
                    # Reaped. Drain what is left; a grandchild holding the pipe gets a bound.
                    drain_until = drain_until or now + r.drain_s
                    if not selector.get_map() or now >= drain_until:
                        self._end_of_output()
                        return RunResult(
                            code, stopped, True, self._stderr(), killed=kill_at is not None
                        )
                    continue
                if stopped is None:
                    stopped = "timeout" if now - start >= r.timeout_s else self.should_stop()
                    if stopped is not None:
                        r.signal(self.proc, signal.SIGTERM)
                        term_at = now
                elif kill_at is None and term_at is not None and now - term_at >= r.grace_s:
                    r.signal(self.proc, signal.SIGKILL)
                    kill_at = now
                elif kill_at is not None and not unreaped and now - kill_at >= r.reap_wait_s:
                    unreaped = True
                    self.on_unreaped()
                elif unreaped and self.should_stop() == "shutdown":
                    # Nothing more can be done in this process; recovery takes over later.
                    return RunResult(None, stopped, False, self._stderr(), killed=True)
        finally:
            selector.close()

    def _read(self, selector: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        data = os.read(key.fd, 65536)
        if not data:
            selector.unregister(key.fileobj)
            return
        if key.data == "err":
            self.err += data
            del self.err[:-STDERR_TAIL_BYTES]
            return
        self.out += data
        while True:
            newline = self.out.find(b"\n")
            if newline < 0:
                break
            line = bytes(self.out[:newline])
            del self.out[: newline + 1]
            if self.skipping_long_line:
                self.skipping_long_line = False  # the rest of an over-long line
                continue
            self.sink.line(line.decode(errors="replace"))
        if len(self.out) > MAX_LINE_BYTES:
            self.sink.line(bytes(self.out[:MAX_LINE_BYTES]).decode(errors="replace"))
            self.out.clear()
            self.skipping_long_line = True

    def _end_of_output(self) -> None:
        if self.out and not self.skipping_long_line:
            self.sink.line(bytes(self.out).decode(errors="replace"))
        self.out.clear()

    def _stderr(self) -> str:
        return bytes(self.err).decode(errors="replace")


def describe_exit(result: RunResult) -> str:
    """One line saying how the process ended (for errors and logs)."""
    if result.spawn_error:
        return result.spawn_error
    code = result.exit_code
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"
