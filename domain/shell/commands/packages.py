"""Package managers and task runners: installs, sources, publish verbs, `run` scripts."""

from __future__ import annotations

import re

from domain.shell.base import ShellBase
from domain.shell.paths import (
    remote_url,
)
from domain.shell.state import (
    Arg,
    Call,
    piped_file,
    skip_options,
)
from domain.shell.tables import (
    MANAGER_VALUES,
    PUBLISH_SUBVERBS,
    PUBLISH_VERBS,
    RUN_VALUES,
    RUN_VERBS,
    RUNNERS,
    TASK_RUNNERS,
)
from domain.shell.verdict import (
    NETWORK,
    OUTSIDE_CLONE,
    PUBLISH,
    Denial,
    network_denial,
    refused,
)


class PackageManagers(ShellBase):
    """Package managers and task runners."""

    def _package_manager(self, call: Call) -> Denial | None:
        name, values = call.name, call.values
        if name in RUNNERS:
            return self._run(call, -1)
        start = call.first_operand(MANAGER_VALUES)
        verb = values[start] if start < len(values) else ""
        following = values[start + 1] if start + 1 < len(values) else ""
        if name == "go" and (
            verb == "get" or (verb in ("install", "run") and any("@" in v for v in values))
        ):
            return refused(
                NETWORK, call.shown, "it fetches Go modules, and a self-update cycle may not"
            )
        if (name, verb) == ("deno", "eval") or (
            name in ("bun", "deno") and {"-e", "--eval", "-p", "--print"} & set(values)
        ):
            return self._inline_code(call, call.args[0])
        if verb in PUBLISH_VERBS.get(name, ()) or following in PUBLISH_SUBVERBS.get(
            (name, verb), ()
        ):
            return refused(
                PUBLISH, call.shown, "a self-update cycle may not publish or release packages"
            )
        if name in TASK_RUNNERS:
            scripts = values[start:]
        elif name in ("npm", "pnpm", "yarn", "bun"):
            scripts = [following] if verb in ("run", "run-script") else [verb]
        else:
            scripts = []
        if any(re.match(r"^(?:publish|deploy)(?:$|[:_-])", s) for s in scripts):
            return refused(PUBLISH, call.shown, "a self-update cycle may not publish or deploy")
        if name in TASK_RUNNERS:
            return piped_file(call, *values)
        if self._writes_user_config(name, verb, following, values):
            return refused(
                OUTSIDE_CLONE,
                call.shown,
                "it writes the package manager's user configuration, outside the clone",
            )
        if (name, verb) in RUN_VERBS:
            return self._run(call, start)
        if name == "uv" and verb == "tool" and following == "run":
            return self._run(call, start + 1)
        return self._urls(call, len(values))

    def _writes_user_config(self, name: str, verb: str, following: str, values: list[str]) -> bool:
        if name in ("npm", "pnpm", "yarn", "bun") and (
            verb == "set" or verb == "config" and following in ("set", "delete", "rm", "edit")
        ):
            return True
        if name in ("pip", "pip3") and verb == "config" and following in ("set", "unset", "edit"):
            return True
        if name == "poetry" and verb == "config":
            return not {"--local", "--list"} & set(values) and len(values) > 2
        if name in ("conda", "mamba") and verb == "config":
            return not {"--show", "--get", "--describe", "--show-sources"} & set(values)
        return name == "go" and verb == "env" and bool({"-w", "-u"} & set(values))

    def _urls(self, call: Call, end: int) -> Denial | None:
        """Refuse package sources named by URL (or VCS address) that are not loopback."""
        for arg in call.args[:end]:
            for candidate in (arg.value, arg.value.split("=", 1)[-1]):
                remote = remote_url(candidate)
                if remote:
                    self._endpoint(remote)
                    return network_denial(call.shown, remote)
        return None

    def _run(self, call: Call, verb_index: int) -> Denial | None:
        """``uv run CMD``, ``npx PKG``, ``bundle exec CMD``: judge the command they run."""
        rest = call.args[verb_index + 1 :]
        for j, arg in enumerate(rest):
            if arg.value in ("-c", "--call") and call.name in ("npx", "npm", "pnpm"):
                call.data.update(range(verb_index + 1, len(call.args)))
                script = rest[j + 1] if j + 1 < len(rest) else Arg("", "")
                return self._urls(call, verb_index + 1 + j) or self._nested_script(call, script)
            if not arg.value.startswith("-"):
                break
        start = verb_index + 1 + skip_options(rest, RUN_VALUES)
        # The sources (options and the package a runner fetches) are checked here; what
        # the command does with its own arguments is judged as that command.
        return self._urls(call, start + 1) or self._nested(call, start)
