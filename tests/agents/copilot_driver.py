"""Run the real Copilot CLI against a real `tachograph serve`, inside `unshare -n`.

    unshare -n sh -c 'ip link set lo up && exec python copilot_driver.py WORK COPILOT'

Everything runs in the namespace (loopback only): the scripted model stand-in
(openai_responses_standin.py) and the policy handler (hook_server.py) in this process,
`tachograph serve` on SQLite in WORK/data, and Copilot CLI itself. The hooks are installed
by `tachograph hook install copilot <home>`. Three runs share one serve and one
COPILOT_CACHE_HOME: `command` (command hooks), `http` (native HTTP hooks) and `down`
(command hooks, serve stopped). Each run's facts go to WORK/results.json for the test,
which reads the stored data afterwards.

The scripted model: a shell command the policy denies (`echo ran > MARKER_SHELL_RAN.txt`),
one it rewrites (`echo REWRITE_ME > original.txt` to `echo REWRITTEN > rewritten.txt`),
an apply_patch writing hello.txt, then a final text.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO)]

import openai_responses_standin as standin  # noqa: E402

from tests.hook_server import HookServer  # noqa: E402

MARKER = "MARKER_SHELL_RAN.txt"
DENIED = f"echo ran > {MARKER}"
ORIGINAL = "echo REWRITE_ME > original.txt"
REWRITTEN = "echo REWRITTEN > rewritten.txt"
DENY_REASON = "copilot-e2e: the marker command is not allowed"
PROMPT = "Run two shell commands, then write hello.txt."
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
FINAL_TEXT = "All done: ran the shell commands and wrote hello.txt."
# Copilot CLI unpacks ~235 MB into its cache on first start: one cache beside the npm
# installs of scripts/agent-clis (git-ignored), kept across runs like them.
CACHE = os.environ.get("TACHOGRAPH_COPILOT_CACHE", str(REPO / ".cache" / "copilot-cli"))


def responder(body: dict[str, Any]) -> standin.Reply:
    turn = standin.conversation_turn(body)
    if turn == 0:
        return standin.ToolUse("bash", {"command": DENIED, "description": "marker"})
    if turn == 1:
        return standin.ToolUse("bash", {"command": ORIGINAL, "description": "original"})
    if turn == 2:
        return standin.ToolUse("apply_patch", PATCH)
    return standin.Text(FINAL_TEXT)


def policy(body: dict[str, Any]) -> tuple[int, Any]:
    """The managed PreToolUse handler: deny the marker command, rewrite the other one."""
    command = (body.get("detail", {}).get("toolInput") or {}).get("command", "")
    if body.get("toolName") == "bash" and command == DENIED:
        return 200, {"schemaVersion": 1, "outcome": "deny", "reason": DENY_REASON}
    if body.get("toolName") == "bash" and command == ORIGINAL:
        replacement = {"command": REWRITTEN, "description": "rewritten"}
        return 200, {"schemaVersion": 1, "outcome": "modify", "replacement": replacement}
    return 200, {"schemaVersion": 1, "outcome": "pass"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tachograph(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_ready(url: str, serve: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            raise SystemExit(f"serve exited early:\n{log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), 0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"serve not ready:\n{log.read_text()}")


def run_copilot(
    copilot: str, work: Path, name: str, url: str, env: dict[str, str], http: bool
) -> dict[str, Any]:
    home, proj = work / name / "home", work / name / "proj"
    proj.mkdir(parents=True)
    install = ["hook", "install", "copilot", str(home), "--url", url]
    installed = tachograph(*install, *(["--http"] if http else []), env=env)
    assert installed.returncode == 0, installed.stderr
    agent_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "NO_COLOR": "1",
        "CI": "1",
        "COPILOT_HOME": str(home / ".copilot"),
        "COPILOT_OFFLINE": "true",
        "COPILOT_AUTO_UPDATE": "false",
        "COPILOT_HOOK_ALLOW_LOCALHOST": "1",
        "COPILOT_PROVIDER_BASE_URL": api.base_url,
        "COPILOT_PROVIDER_TYPE": "openai",
        "COPILOT_PROVIDER_WIRE_API": "responses",
        "COPILOT_PROVIDER_API_KEY": "sk-standin",
        "COPILOT_MODEL": "gpt-5.5",
        "COPILOT_CACHE_HOME": CACHE,
        "TACHOGRAPH_DATA_DIR": str(work / name / "hook-data"),  # the hook client's hooks.log
    }
    before = len(api.requests)
    started = time.monotonic()
    proc = subprocess.run(
        [
            copilot,
            "-p",
            PROMPT,
            "--allow-all-tools",
            "--no-auto-update",
            "--disable-client-telemetry",
            "-C",
            str(proj),
        ],
        cwd=proj,
        env=agent_env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    elapsed = time.monotonic() - started
    requests = [json.dumps(r.body) for r in api.agent_requests()[before:] if r.body]
    resume = re.search(r"--resume=([0-9a-f-]{36})", proc.stdout + proc.stderr)
    return {
        "rc": proc.returncode,
        "elapsed": elapsed,
        "stdout": proc.stdout[-4000:],
        "stderr": proc.stderr[-4000:],
        "native_session": resume.group(1) if resume else None,
        "files": sorted(p.name for p in proj.iterdir()),
        "rewritten": (proj / "rewritten.txt").read_text()
        if (proj / "rewritten.txt").exists()
        else None,
        "requests": requests,
        "hook_file": json.loads((home / ".copilot" / "hooks" / "tachograph.json").read_text()),
    }


def main() -> int:
    global api
    work, copilot = Path(sys.argv[1]), sys.argv[2]
    handler = HookServer()
    handler.routes["/policy"] = policy
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    hooks = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {
                    "id": "shell-policy",
                    "type": "http",
                    "url": handler.url + "/policy",
                    "matcher": ["bash"],
                }
            ]
        },
    }
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TACHOGRAPH_DATA_DIR": str(work / "data"),
        "TACHOGRAPH_WORKSPACE_ROOT": str(work / "workspaces"),
        "TACHOGRAPH_HOOKS": json.dumps(hooks),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
    }
    (work / "workspaces").mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"netns": os.readlink("/proc/self/ns/net")}
    with standin.ResponsesStandIn(responder) as api:
        log = work / "serve.log"
        with log.open("ab") as out:
            serve = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "serve", "--port", str(port)],
                cwd=REPO,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_ready(url, serve, log)
            results["command"] = run_copilot(copilot, work, "command", url, env, http=False)
            results["http"] = run_copilot(copilot, work, "http", url, env, http=True)
        finally:
            serve.terminate()
            serve.wait(30)
        results["down"] = run_copilot(copilot, work, "down", url, env, http=False)
        results["policy_calls"] = [body for _, body, _ in handler.requests]
        results["errors"] = list(api.errors)
    handler.close()
    (work / "results.json").write_text(json.dumps(results, indent=1))
    return 0


api: Any = None

if __name__ == "__main__":
    raise SystemExit(main())
