"""Runs the stand-in agent's escape attempts inside an `infra.jail.Jail`, as whichever user
runs this module (root, or an unprivileged one under setpriv), and reports as JSON.

    python -m tests.jail.jail_driver CONFIG

CONFIG: {"relayedPort": N, "hidden": DIR, "keep": DIR, "script": {...}}; the jail relays
`relayedPort`, covers `hidden` and binds `keep` back; the attempts run in `keep`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from infra.jail import Jail, bwrap, installation

AGENT = str(Path(__file__).resolve().parents[1] / "autonomy" / "self_update_agent.py")


def main() -> int:
    config = json.loads(sys.argv[1])
    binary = bwrap()
    if binary is None:
        sys.exit("bwrap is not on PATH")
    # Tachograph's installation shown as the cycle shows it: the checkout running these
    # tests may itself lie in a hidden directory (a clone under /tmp).
    jail = Jail(
        binary,
        [config["relayedPort"]],
        [Path(config["hidden"])],
        [Path(config["keep"])],
        show=installation(),
    )
    try:
        isolation = jail.probe()
        escape = [sys.executable, AGENT, "--escape", json.dumps(config["script"])]
        done = subprocess.run(
            jail.wrap(escape), cwd=config["keep"], capture_output=True, text=True, timeout=120
        )
    finally:
        jail.close()
    if done.returncode != 0:
        sys.exit(f"the escape attempts failed ({done.returncode}): {done.stderr}")
    report = {
        "isolation": isolation.held,
        "missing": isolation.missing,
        "hidden": jail.hidden,
        "probes": json.loads(done.stdout),
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
