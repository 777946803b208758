"""Containers (docker, podman), GitHub's CLI and service control."""

from __future__ import annotations

from domain.shell.base import ShellBase
from domain.shell.paths import (
    ELSEWHERE,
    host_of,
    is_loopback,
)
from domain.shell.state import (
    Call,
)
from domain.shell.verdict import (
    NETWORK,
    PUBLISH,
    SUDO,
    Denial,
    network_denial,
    refused,
)


class ServiceCommands(ShellBase):
    """Containers, GitHub's CLI and service control."""

    def _docker(self, call: Call) -> Denial | None:
        values = call.values
        i = 0
        while i < len(values) and values[i].startswith("-"):
            option, eq, inline = values[i].partition("=")
            if option in ("-H", "--host"):
                host = inline if eq else (values[i + 1] if i + 1 < len(values) else "")
                if not host.startswith("unix://"):
                    self._endpoint(host)
                if not host.startswith("unix://") and not is_loopback(host_of(host)):
                    return network_denial(call.shown, host)
            i += (
                1
                if eq
                or option
                not in ("-H", "--host", "--context", "-c", "--config", "-l", "--log-level")
                else 2
            )
        verb = values[i] if i < len(values) else ""
        following = values[i + 1] if i + 1 < len(values) else ""
        if (
            verb in ("push", "login")
            or (verb in ("image", "manifest", "plugin") and following == "push")
            or (
                verb in ("build", "buildx", "compose")
                and ("--push" in values or following == "push")
            )
        ):
            return refused(
                PUBLISH,
                call.shown,
                "a self-update cycle may not publish images or log in to registries",
            )
        if verb in ("run", "create", "exec") or (
            verb == "container" and following in ("run", "create", "exec")
        ):
            for j in range(i + 1, len(values)):
                value = values[j]
                option, eq, inline = value.partition("=")
                if (
                    value == "--privileged"
                    or option in ("--cap-add", "--device", "--security-opt")
                    or (
                        option in ("--pid", "--network", "--net", "--ipc", "--uts", "--userns")
                        and (inline if eq else values[j + 1] if j + 1 < len(values) else "")
                        == "host"
                    )
                ):
                    return refused(SUDO, call.shown, "it gives a container privileges on the host")
                if option in ("-v", "--volume", "--mount"):
                    spec = inline if eq else values[j + 1] if j + 1 < len(values) else ""
                    call.data.update({j} if eq else {j, j + 1})
                    source = (
                        spec.split(":", 1)[0]
                        if option != "--mount"
                        else next(
                            (
                                kv.split("=", 1)[1]
                                for kv in spec.split(",")
                                if kv.startswith(("source=", "src="))
                            ),
                            "",
                        )
                    )
                    if source.startswith(("/", "~", ".", ELSEWHERE)) or option == "--mount":
                        denial = self.scope.check(source, call.state.cwd, spec)
                        if denial:
                            return denial
        return None

    def _gh(self, call: Call) -> Denial | None:
        values = call.values
        start = call.first_operand(frozenset({"-R", "--repo"}))
        verb = values[start] if start < len(values) else ""
        following = values[start + 1] if start + 1 < len(values) else ""
        if (
            verb == "release"
            or (verb == "pr" and following == "merge")
            or (verb == "repo" and following in ("delete", "create", "edit"))
        ):
            return refused(
                PUBLISH, call.shown, "a self-update cycle may not publish, release or merge"
            )
        return refused(
            NETWORK,
            call.shown,
            "a self-update cycle may reach only loopback, and `gh` talks to GitHub",
        )

    def _service(self, call: Call) -> Denial | None:
        if {
            "start",
            "stop",
            "restart",
            "reload",
            "force-reload",
            "try-restart",
            "condrestart",
            "enable",
            "disable",
        } & set(call.values):
            return refused(PUBLISH, call.shown, "a self-update cycle may not change services")
        return None
