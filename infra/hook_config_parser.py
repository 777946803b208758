"""Strict parsing of the managed hook configuration `TACHOGRAPH_HOOKS` (spec §6.1).

The document's keys are camelCase like every wire shape; what it yields is the domain's
`HookConfig`. The URL rules also apply to other outbound URLs (the HTTP reflector).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NoReturn
from urllib.parse import SplitResult, urlsplit

from domain.hook_config import (
    DEFAULT_TIMEOUT_MS,
    EVENT_OUTCOMES,
    MATCHABLE_EVENTS,
    MAX_TIMEOUT_MS,
    OBSERVATIONAL_EVENTS,
    FailureMode,
    HookConfig,
    HookHandler,
)
from domain.strict_json import StrictJSONError, strict_loads

LOOPBACK_HOSTS: frozenset[str] = frozenset({"127.0.0.1", "localhost", "::1"})

_TOP_LEVEL_KEYS = frozenset({"version", "hooks"})
_HANDLER_KEYS = frozenset({"id", "type", "url", "matcher", "timeoutMs", "failureMode", "secretEnv"})
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class HookConfigError(ValueError):
    """A TACHOGRAPH_HOOKS document that must refuse start-up; message starts with the path."""


class _JsonObject(dict[str, Any]):
    """A decoded JSON object that remembers keys given more than once."""

    duplicates: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _JsonObject:
    """json object hook: keep the last value but record duplicates (json drops them silently)."""
    obj = _JsonObject()
    duplicates: list[str] = []
    for key, value in pairs:
        if key in obj:
            duplicates.append(key)
        obj[key] = value
    obj.duplicates = tuple(duplicates)
    return obj


def _fail(path: str, message: str) -> NoReturn:
    """Raise a HookConfigError for `path`."""
    raise HookConfigError(f"{path or '$'}: {message}")


def _join(path: str, key: str) -> str:
    """JSON path of `key` below `path`, quoting keys that are not plain identifiers."""
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key)}]"


def _object(value: Any, path: str, allowed: frozenset[str] | None) -> _JsonObject:
    """Check that `value` is a JSON object without duplicate or (if `allowed`) unknown keys."""
    if not isinstance(value, _JsonObject):
        _fail(path, "must be a JSON object")
    if value.duplicates:
        _fail(_join(path, value.duplicates[0]), "duplicate key")
    if allowed is not None:
        for key in value:
            if key not in allowed:
                _fail(_join(path, key), "unknown key")
    return value


def _load(raw: str) -> Any:
    """Decode the document strictly, naming the problem (and where a syntax error is)."""
    try:
        return strict_loads(raw, object_pairs_hook=_object_pairs)
    except StrictJSONError as exc:
        _fail("", f"invalid JSON: the document {exc}")


def parse_hook_config(
    raw: str | None, *, allowed_hosts: frozenset[str], allow_insecure_loopback: bool
) -> HookConfig:
    """Validate a TACHOGRAPH_HOOKS document; None or empty means no hooks."""
    if raw is None or not raw.strip():
        return HookConfig.empty()
    document = _object(_load(raw), "", _TOP_LEVEL_KEYS)
    _check_version(document)
    hooks = _object(document.get("hooks", _JsonObject()), "hooks", None)
    policy = _UrlPolicy(frozenset(h.lower() for h in allowed_hosts), allow_insecure_loopback)
    handlers: dict[str, tuple[HookHandler, ...]] = {}
    for event, entries in hooks.items():
        parsed = _parse_event(event, entries, _join("hooks", event), policy)
        if parsed:
            handlers[event] = parsed
    return HookConfig(handlers=handlers)


def _check_version(document: _JsonObject) -> None:
    """The version must be exactly the integer 1 (not true, not 1.0)."""
    if "version" not in document:
        _fail("version", "required (must be 1)")
    version = document["version"]
    if type(version) is not int or version != 1:
        _fail("version", "must be 1")


def _parse_event(
    event: str, entries: Any, path: str, policy: _UrlPolicy
) -> tuple[HookHandler, ...]:
    """Validate the handler list of one event."""
    if event not in EVENT_OUTCOMES:
        _fail(path, "unknown event")
    if not isinstance(entries, list):
        _fail(path, "must be a list of handlers")
    handlers: list[HookHandler] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        handler = _parse_handler(event, entry, f"{path}[{index}]", policy)
        if handler.id in seen:
            _fail(f"{path}[{index}].id", f"duplicate handler id {json.dumps(handler.id)}")
        seen.add(handler.id)
        handlers.append(handler)
    return tuple(handlers)


def _parse_handler(event: str, entry: Any, path: str, policy: _UrlPolicy) -> HookHandler:
    """Validate one handler object."""
    obj = _object(entry, path, _HANDLER_KEYS)
    handler_id = _required_string(obj, "id", path)
    _check_type(obj, path)
    url = policy.check(obj.get("url"), "url" in obj, _join(path, "url"))
    return HookHandler(
        id=handler_id,
        event=event,
        url=url,
        matcher=_matcher(event, obj, path),
        timeout_ms=_timeout_ms(obj, path),
        failure_mode=_failure_mode(event, obj, path),
        secret_env=_secret_env(obj, path),
    )


def _required_string(obj: _JsonObject, key: str, path: str) -> str:
    """A mandatory non-blank string field."""
    field_path = _join(path, key)
    if key not in obj:
        _fail(field_path, "required")
    value = obj[key]
    if not isinstance(value, str) or not value.strip():
        _fail(field_path, "must be a non-empty string")
    return value


def _check_type(obj: _JsonObject, path: str) -> None:
    """Only HTTP handlers exist; the type is mandatory so future types cannot be guessed."""
    if "type" not in obj:
        _fail(_join(path, "type"), 'required (must be "http")')
    if obj["type"] != "http":
        _fail(_join(path, "type"), 'must be "http"')


def _matcher(event: str, obj: _JsonObject, path: str) -> tuple[str, ...] | None:
    """Optional non-empty list of non-empty strings, only where the event has a subject."""
    if "matcher" not in obj:
        return None
    field_path = _join(path, "matcher")
    value = obj["matcher"]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item for item in value)
    ):
        _fail(field_path, "must be a non-empty list of non-empty strings")
    if event not in MATCHABLE_EVENTS:
        # Such a matcher could never select anything: a silent no-op handler is a config bug.
        _fail(field_path, "only tool and subagent events take a matcher")
    return tuple(value)


def _timeout_ms(obj: _JsonObject, path: str) -> int:
    """Integer milliseconds 1–30000, default 2000."""
    value = obj.get("timeoutMs", DEFAULT_TIMEOUT_MS)
    if type(value) is not int or not 1 <= value <= MAX_TIMEOUT_MS:
        _fail(_join(path, "timeoutMs"), f"must be an integer from 1 to {MAX_TIMEOUT_MS}")
    return value


def _failure_mode(event: str, obj: _JsonObject, path: str) -> FailureMode:
    """Closed by default for gate events; observational events are always open."""
    observational = event in OBSERVATIONAL_EVENTS
    value = obj.get("failureMode", "open" if observational else "closed")
    field_path = _join(path, "failureMode")
    if value == "open":
        return "open"
    if value != "closed":
        _fail(field_path, 'must be "open" or "closed"')
    if observational:
        _fail(field_path, 'observational events are always open; "closed" is not allowed')
    return "closed"


def _secret_env(obj: _JsonObject, path: str) -> str | None:
    """Optional name of the environment variable holding the signing secret."""
    if "secretEnv" not in obj:
        return None
    value = obj["secretEnv"]
    field_path = _join(path, "secretEnv")
    if not isinstance(value, str) or not value:
        _fail(field_path, "must be a non-empty string")
    if not ENV_NAME.fullmatch(value):
        _fail(field_path, "must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return value


@dataclass(frozen=True)
class _UrlPolicy:
    """Which hook URLs may be called (§2, §6.1)."""

    allowed_hosts: frozenset[str]
    allow_insecure_loopback: bool

    def check(self, value: Any, present: bool, path: str) -> str:
        """Validate a handler URL and return it unchanged."""
        if not present:
            _fail(path, "required")
        if not isinstance(value, str) or not value:
            _fail(path, "must be a non-empty string")
        parts = _split(value, path)
        host = parts.hostname or ""
        loopback = self.allow_insecure_loopback and host in LOOPBACK_HOSTS
        if parts.scheme != "https" and not (parts.scheme == "http" and loopback):
            _fail(path, self._scheme_message(parts.scheme == "http" and host in LOOPBACK_HOSTS))
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            _fail(path, "must not contain credentials")
        if not host:
            _fail(path, "must name a host")
        _check_port(parts, path)
        if host not in self.allowed_hosts and not loopback:
            _fail(path, f"host {json.dumps(host)} is not in TACHOGRAPH_HOOK_ALLOWED_HOSTS")
        return value

    def _scheme_message(self, loopback_http: bool) -> str:
        """Explain the scheme rule, and name the setting that would allow a loopback URL."""
        if self.allow_insecure_loopback:
            return "must use https:// (http:// only for 127.0.0.1, localhost or ::1)"
        if loopback_http:
            return (
                "must use https:// "
                "(set TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK=1 for http:// on loopback)"
            )
        return "must use https://"


def _split(value: str, path: str) -> SplitResult:
    """Split a URL, refusing characters HTTP clients and urllib may read differently."""
    if not value.isascii() or any(
        ch.isspace() or not ch.isprintable() or ch == "\\" for ch in value
    ):
        _fail(path, "must be an ASCII URL without whitespace, control characters or backslashes")
    try:
        return urlsplit(value)
    except ValueError as exc:
        _fail(path, f"invalid URL: {exc}")


def _check_port(parts: SplitResult, path: str) -> None:
    """Reject ports urllib cannot read (e.g. non-numeric or out of range)."""
    try:
        parts.port  # noqa: B018 - accessing .port validates it
    except ValueError:
        _fail(path, "invalid port")


def check_outbound_url(
    value: Any, path: str, *, allowed_hosts: frozenset[str], allow_insecure_loopback: bool
) -> str:
    """Apply the hook URL rules (§2, §6.1) to another outbound URL, e.g. the HTTP reflector."""
    policy = _UrlPolicy(frozenset(h.lower() for h in allowed_hosts), allow_insecure_loopback)
    return policy.check(value, True, path)
