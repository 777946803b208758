"""A fake agent for self-update cycle tests; the workspace's name says how it behaves.

argv: taskId, working directory (the cycle's clone), state directory; the workspace's
slug comes from TACHOGRAPH_WORKSPACE. `fail-*` workspaces fail with a
non-transient error, `flaky-*` ones fail transiently on a task's first run only, the
others complete. Every run appends `taskId workspace` to `<state>/runs.log`.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    task_id, state = sys.argv[1], sys.argv[3]
    workspace = os.environ["TACHOGRAPH_WORKSPACE"]
    with open(os.path.join(state, "runs.log"), "a", encoding="utf-8") as runs:
        runs.write(f"{task_id} {workspace}\n")
    time.sleep(0.3)
    if workspace.startswith("fail-"):
        print("invalid argument: the cycle cannot run here", file=sys.stderr)
        return 2
    marker = os.path.join(state, f"{task_id}.seen")
    if workspace.startswith("flaky-") and not os.path.exists(marker):
        open(marker, "w").close()
        print("API error: overloaded", file=sys.stderr)
        return 1
    print(f"cycle of {workspace} done", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
