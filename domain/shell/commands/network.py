"""Network commands: fetchers (curl, wget, httpie), sockets, `openssl`, `rsync`."""

from __future__ import annotations

import re

from domain.shell.base import ShellBase
from domain.shell.paths import (
    UNKNOWN,
    host_of,
    is_loopback,
)
from domain.shell.state import (
    Call,
)
from domain.shell.tables import (
    FETCH_REFUSED,
    FETCH_REFUSED_SHORT,
    FETCH_VALUES,
    SOCKET_EXEC,
    SOCKET_VALUES,
)
from domain.shell.verdict import (
    NETWORK,
    Denial,
    network_denial,
    refused,
    unseen,
)


class NetworkCommands(ShellBase):
    """Fetchers, sockets and remote copies, and the hosts they name."""

    # -- network --

    def _fetcher(self, call: Call) -> Denial | None:
        value_options = FETCH_VALUES.get(call.name, frozenset())
        refused_options = FETCH_REFUSED | FETCH_REFUSED_SHORT.get(call.name, frozenset())
        targets: list[str] = []
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            option, eq, inline = value.partition("=")
            takes_next = value in value_options
            if value.startswith("-") and not value.startswith("--") and len(value) > 2:
                # A cluster (`-sSLo out`) or a short option with its value glued (`-ofile`).
                for k, letter in enumerate(value[1:], start=1):
                    if f"-{letter}" in refused_options:
                        option = f"-{letter}"
                        break
                    if f"-{letter}" in value_options:
                        takes_next = k == len(value) - 1
                        break
            if option in refused_options:
                return refused(
                    NETWORK,
                    call.shown,
                    f"`{option}` sends {call.name} to hosts the self-update policy cannot see",
                )
            if option == "--url":
                following = call.args[i + 1].value if i + 1 < len(call.args) else ""
                targets.append(inline if eq else following)
                i += 1 if eq else 2
            elif value.startswith("--") and eq:
                i += 1
            elif takes_next:
                i += 2
            elif value.startswith("-") and value != "-":
                i += 1
            else:
                targets.append(value)
                i += 1
        if call.name in ("http", "https", "xh", "xhs") and targets:
            if re.fullmatch(r"[A-Z]+", targets[0]) and len(targets) > 1:
                targets = targets[1:]
            targets = targets[:1]  # the rest are request items
        for target in targets:
            if target.lower().startswith("file:"):
                continue  # a local file: judged as a path
            self._endpoint(target)
            if UNKNOWN in target or not is_loopback(host_of(target)):
                return network_denial(call.shown, target)
        return None

    def _socket(self, call: Call) -> Denial | None:
        targets: list[str] = []
        listening = False
        i = 0
        while i < len(call.args):
            value = call.args[i].value
            if value in SOCKET_EXEC or value.startswith("-c") and call.name == "ncat":
                return unseen(call.shown, "it runs a command on a network connection")
            if value in ("-x", "--proxy"):
                return refused(NETWORK, call.shown, "it connects through a proxy")
            if value in ("-l", "--listen") or (
                value.startswith("-") and "l" in value[1:] and not value.startswith("--")
            ):
                listening = listening or call.name in ("nc", "ncat", "netcat")
            if value in SOCKET_VALUES and call.name not in ("dig", "host", "nslookup"):
                i += 2
                continue
            if value.startswith(("-", "+")) and value != "-":
                i += 1
                continue
            target = value[1:] if value.startswith("@") else value
            if not re.fullmatch(r"\d+([-:]\d+)?", target) and (
                call.name not in ("dig", "host", "nslookup")
                or "." in target
                or ":" in target
                or target.lower() == "localhost"
            ):
                targets.append(target)
            i += 1
        for target in targets:
            self._endpoint(target)
            if not is_loopback(host_of(target) or target):
                return network_denial(call.shown, target)
        if listening and not targets:
            return refused(NETWORK, call.shown, "it listens on every network interface")
        return None

    def _openssl(self, call: Call) -> Denial | None:
        if not call.args or call.args[0].value not in ("s_client", "s_server", "s_time"):
            return None
        if call.args[0].value == "s_server":
            return refused(NETWORK, call.shown, "it listens for network connections")
        values = call.values
        for i, value in enumerate(values):
            if value == "-connect" and i + 1 < len(values):
                self._endpoint(values[i + 1])
                if not is_loopback(host_of(values[i + 1])):
                    return network_denial(call.shown, values[i + 1])
                return None
        return network_denial(call.shown, "the default host")

    def _rsync(self, call: Call) -> Denial | None:
        for arg in call.args:
            value = arg.value
            if value in ("-e", "--rsh") or value.startswith("--rsh="):
                return refused(NETWORK, call.shown, "rsync over a remote shell reaches other hosts")
            if not value.startswith("-") and (
                "::" in value or value.startswith("rsync://") or re.match(r"^[^/:]+:", value)
            ):
                self._endpoint(value)
                return network_denial(call.shown, value)
        return None
