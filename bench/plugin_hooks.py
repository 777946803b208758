"""OpenCode's and Kilo's hook for `tachograph bench --only hook_latency`: Tachograph's plugin
as `tachograph hook install` writes it, loaded once into the runtime's own JavaScript
runtime (the CLI binary run as Bun, `BUN_BE_BUN=1`, as OpenCode runs its plugins; Node
where the binary is not cached) and its `tool.execute.before` called in-process, as the
runtime calls it: no process is spawned per call. Each call crosses one pipe to the
process that holds the plugin (counted in the figure) and is answered only once the
plugin has its answer from Tachograph.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

REPO: Final = Path(__file__).resolve().parents[1]
# The runtime, and the captured `tool.execute.before` its plugin hook is called with.
PLUGIN_PAYLOADS: Final = {
    "opencode": "opencode/basic/071-tool.execute.before.json",
    "kilo": "kilo/basic/065-tool.execute.before.json",
}
# Reads one call number a line, calls the hook, prints `ok <args>` or `error <message>`.
DRIVER: Final = """
import { pathToFileURL } from "node:url";
import readline from "node:readline";
const [plugin, capture] = process.argv.slice(2);
const hooks = await (await import(pathToFileURL(plugin).href)).TachographPlugin({});
const { input } = JSON.parse(await (await import("node:fs")).promises.readFile(capture, "utf8"));
const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  const output = { args: { command: "ls", description: "list" } };
  try {
    await hooks["tool.execute.before"]({ ...input, callID: `${input.callID}-${line}` }, output);
    process.stdout.write(`ok ${JSON.stringify(output.args)}\\n`);
  } catch (error) {
    process.stdout.write(`error ${String(error.message).split("\\n")[0]}\\n`);
  }
}
"""


@dataclass
class PluginHook:
    """One runtime's plugin, loaded in a long-lived process; `run(i)` makes call `i`."""

    process: subprocess.Popen[str]

    def run(self, i: int) -> str:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{i}\n")
        self.process.stdin.flush()
        return self.process.stdout.readline()

    @staticmethod
    def problem(_: int, line: str) -> str | None:
        return None if line.startswith("ok ") else f"the plugin answered {line.strip()!r}"

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def javascript(runtime: str, install: bool) -> tuple[list[str], dict[str, str]] | str:
    """How to run a script as the runtime runs its plugins, or why it cannot be."""
    cached = (
        subprocess.run(
            [str(REPO / "scripts" / "agent-clis"), runtime],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if install
        else None
    )
    binary = cached.stdout.strip().splitlines()[-1] if cached and cached.returncode == 0 else ""
    if not binary:
        default = REPO / ".cache" / "agent-clis" / "node_modules"
        found = {
            "opencode": default / "opencode-linux-x64" / "bin" / "opencode",
            "kilo": default / "@kilocode" / "cli-linux-x64" / "bin" / "kilo",
        }[runtime]
        binary = str(found) if found.exists() else ""
    if binary:
        return [binary], {"BUN_BE_BUN": "1"}
    node = shutil.which("node")
    if node:
        return [node], {}
    return f"neither the {runtime} binary nor node is available"


def plugin_hooks(
    url: str, root: Path, env: dict[str, str], fixtures: Path, *, install: bool
) -> tuple[dict[str, PluginHook], dict[str, str]]:
    """Each runtime's installed plugin, loaded and ready; and what each is (or why not)."""
    loaded: dict[str, PluginHook] = {}
    described: dict[str, str] = {}
    for runtime, capture in PLUGIN_PAYLOADS.items():
        how = javascript(runtime, install)
        if isinstance(how, str):
            described[runtime] = f"unavailable: {how}"
            continue
        argv, extra = how
        home = root / f"{runtime}-plugin"
        subprocess.run(
            [sys.executable, "-m", "cli.main", "hook", "install", runtime, str(home), "--url", url],
            check=True,
            capture_output=True,
            timeout=60,
            cwd=REPO,
        )
        plugin = home / ".config" / runtime / "plugin" / "tachograph.js"
        driver = root / f"{runtime}-driver.mjs"
        driver.write_text(DRIVER)
        process = subprocess.Popen(
            [*argv, str(driver), str(plugin), str(fixtures / capture)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**env, **extra},
            cwd=root,
        )
        loaded[runtime] = PluginHook(process)
        described[runtime] = f"{' '.join(argv)} {'(as Bun) ' if extra else ''}{plugin}"
    return loaded, described


def close_all(hooks: dict[str, PluginHook]) -> None:
    for hook in hooks.values():
        hook.close()


def plugin_figures(series: dict[str, Any], hooks: dict[str, PluginHook]) -> dict[str, Any]:
    return {runtime: series[f"plugin_{runtime}"] for runtime in hooks}
