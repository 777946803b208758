"""A fake agent executable for executor tests: its prompt (JSON) says what to do.

Keys: `record` (append a JSON line with pid, argv, cwd and TACHOGRAPH_* env to this file),
`sleep_if_first` (sleep this long only on the task's first recorded run),
`ignore_term` (ignore SIGTERM), `on_term` (print this and exit 0 on SIGTERM), `lines`
(strings printed as-is, objects as JSON), `repeat` (print "line N" this many times),
`sleep` (seconds), `stderr` (text), `exit` (status). A prompt that is not JSON is
echoed as one line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def main() -> int:
    prompt = sys.argv[1] if len(sys.argv) > 1 else ""
    try:
        plan = json.loads(prompt)
    except ValueError:
        plan = {"lines": [prompt]}
    if not isinstance(plan, dict):
        plan = {"lines": [prompt]}
    first_run = True
    if plan.get("record"):
        task_id = os.environ.get("TACHOGRAPH_TASK_ID")
        if os.path.exists(plan["record"]):
            with open(plan["record"], encoding="utf-8") as seen_before:
                first_run = not any(
                    json.loads(line)["env"].get("TACHOGRAPH_TASK_ID") == task_id
                    for line in seen_before
                    if line.strip()
                )
        seen = {
            "pid": os.getpid(),
            "argv": sys.argv,
            "cwd": os.getcwd(),
            "env": {k: v for k, v in os.environ.items() if k.startswith("TACHOGRAPH_")},
        }
        with open(plan["record"], "a", encoding="utf-8") as out:
            out.write(json.dumps(seen) + "\n")
    if plan.get("ignore_term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    elif plan.get("on_term"):

        def leave(*_: object) -> None:
            print(plan["on_term"], flush=True)
            sys.exit(0)

        signal.signal(signal.SIGTERM, leave)
    for line in plan.get("lines", []):
        print(line if isinstance(line, str) else json.dumps(line), flush=True)
    for n in range(int(plan.get("repeat", 0))):
        print(f"line {n}")
    sys.stdout.flush()
    if plan.get("stderr"):
        print(plan["stderr"], file=sys.stderr, flush=True)
    sleep = float(plan.get("sleep", 0))
    if plan.get("sleep_if_first") and first_run:
        sleep = float(plan["sleep_if_first"])
    deadline = time.monotonic() + sleep
    while time.monotonic() < deadline:
        time.sleep(0.02)
    return int(plan.get("exit", 0))


if __name__ == "__main__":
    raise SystemExit(main())
