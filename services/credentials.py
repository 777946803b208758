"""Who is calling: the credential snapshot every request authenticates against.

Each process keeps the credentials read model in memory, keyed by the secret's SHA-256,
and follows it by log position four times a second, so an issue or a revocation on
any replica takes effect on every other within a second without a query per request.
A secret this process has not seen yet (issued a moment ago elsewhere) triggers one
catch-up read, at most every 50 ms, so a fresh key works at once and guessing keys
cannot turn into a query per request.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from domain.credentials import (
    ADMIN,
    BOOTSTRAP_LABEL,
    CAPABILITIES,
    SECRET,
    Binding,
    actor_of,
    expired,
    secret_digest,
)
from projections.api_keys import USAGE_DDL, key_rows_since, record_usage
from projections.base import iso
from projections.store import ReadStore

log = logging.getLogger(__name__)

REFRESH_INTERVAL_S = 0.25
CATCH_UP_MIN_INTERVAL_S = 0.05
USAGE_FLUSH_INTERVAL_S = 2.0


@dataclass(frozen=True)
class Principal:
    """The caller of one request, as authentication established it."""

    label: str | None
    role: str
    actor: str
    binding: Binding = Binding()
    expires_at: str | None = None

    def can(self, capability: str) -> bool:
        return capability in CAPABILITIES[self.role]

    def as_wire(self, auth_required: bool) -> dict[str, object]:
        binding = self.binding
        bound = binding.session_id or binding.workspace_id or binding.task_id
        return {
            "label": self.label,
            "role": self.role,
            "actor": self.actor,
            "authRequired": auth_required,
            "expiresAt": self.expires_at,
            "binding": {
                "sessionId": binding.session_id,
                "workspaceId": binding.workspace_id,
                "taskId": binding.task_id,
            }
            if bound
            else None,
        }


# No TACHOGRAPH_API_KEY: a local development server, open to every local process.
ANONYMOUS = Principal(label=None, role=ADMIN, actor="anonymous")
BOOTSTRAP = Principal(label=BOOTSTRAP_LABEL, role=ADMIN, actor=f"key:{BOOTSTRAP_LABEL}")


@dataclass(frozen=True)
class Refused:
    """Why a presented credential was refused (one sentence for the 401)."""

    reason: str  # missing | malformed | unknown | expired | revoked
    message: str


@dataclass(frozen=True)
class _Credential:
    label: str
    role: str
    digest: str
    binding: Binding
    expires_at: datetime | None
    revoked_at: str | None

    def principal(self) -> Principal:
        return Principal(
            label=self.label,
            role=self.role,
            actor=actor_of(self.label, self.role, self.binding),
            binding=self.binding,
            expires_at=iso(self.expires_at),
        )


MISSING = Refused(
    "missing", "This server needs a credential: send it in the x-tachograph-key header."
)
MALFORMED = Refused(
    "malformed",
    "The x-tachograph-key header is not a Tachograph key (tgk_ and 43 characters); "
    "check that the whole key was copied.",
)
UNKNOWN = Refused(
    "unknown", "The key in x-tachograph-key is not known to this server; ask an admin for one."
)


class CredentialCache:
    """This process's view of every credential; safe to use from any thread."""

    def __init__(
        self,
        store: ReadStore,
        bootstrap_key: str | None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self._bootstrap = bootstrap_key.encode() if bootstrap_key else None
        self.clock = clock
        self._by_digest: dict[str, _Credential] = {}
        self._position = 0
        self._lock = threading.Lock()
        self._last_catch_up = 0.0
        self._used: dict[str, str] = {}
        self._flushed_at = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def auth_required(self) -> bool:
        return self._bootstrap is not None

    def ensure_schema(self) -> None:
        with self.store.transaction() as cur:
            cur.execute(USAGE_DDL)

    # Authentication (the request path: memory only)

    def authenticate(self, presented: bytes | None) -> Principal | Refused:
        """The principal a header value stands for; None header: the anonymous caller."""
        found = self._lookup(presented)
        if isinstance(found, _Credential):
            self._note_use(found.label)
            return found.principal()
        return found

    def recheck(self, presented: bytes | None) -> Refused | None:
        """Why a credential accepted earlier is refused now, or None while it stands.

        For a request that outlives its authentication (an open stream): memory only, so
        it can run every poll, and it does not count as a use of the key.
        """
        found = self._lookup(presented)
        return found if isinstance(found, Refused) else None

    def _lookup(self, presented: bytes | None) -> _Credential | Principal | Refused:
        if not presented:
            return MISSING if self._bootstrap is not None else ANONYMOUS
        if self._bootstrap is not None and hmac.compare_digest(presented, self._bootstrap):
            return BOOTSTRAP
        try:
            secret = presented.decode("ascii")
        except UnicodeDecodeError:
            return MALFORMED
        if not SECRET.fullmatch(secret):
            return MALFORMED
        # Found by digest: the lookup's timing depends on the hash, never on the secret.
        digest = secret_digest(secret)
        credential = self._by_digest.get(digest)
        if credential is None or not hmac.compare_digest(credential.digest, digest):
            return UNKNOWN
        if credential.revoked_at is not None:
            return Refused(
                "revoked", f"The key {credential.label!r} was revoked at {credential.revoked_at}."
            )
        if expired(credential.expires_at, self.clock()):
            return Refused(
                "expired",
                f"The key {credential.label!r} expired at {iso(credential.expires_at)}; "
                "ask an admin for a new one.",
            )
        return credential

    def may_catch_up(self) -> bool:
        """Whether an unknown secret may trigger a read now: at most one such read per
        CATCH_UP_MIN_INTERVAL_S. The periodic refresh does not count: one that began just
        before another replica issued the key would otherwise refuse its first use."""
        now = time.monotonic()
        if now - self._last_catch_up < CATCH_UP_MIN_INTERVAL_S:
            return False
        self._last_catch_up = now
        return True

    def _note_use(self, label: str) -> None:
        # Whole seconds: a busy agent token then changes its entry once a second at most.
        self._used[label] = iso(self.clock().replace(microsecond=0))

    # Following the read model

    def refresh(self) -> None:
        """Apply credential rows changed since the last read."""
        with self._lock:
            rows = key_rows_since(self.store, self._position)
            for row in rows:
                credential = _credential(row)
                self._by_digest[credential.digest] = credential
                self._position = max(self._position, int(row["position"]))

    def flush_usage(self) -> None:
        if not self._used:
            return
        used, self._used = self._used, {}
        record_usage(self.store, used)

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._follow, name="credentials", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            self.flush_usage()
        except Exception as exc:  # noqa: BLE001 - last-used times are best effort
            log.warning("could not record key usage: %s", exc)

    def _follow(self) -> None:
        while not self._stop.wait(REFRESH_INTERVAL_S):
            try:
                self.refresh()
                if time.monotonic() - self._flushed_at >= USAGE_FLUSH_INTERVAL_S:
                    self._flushed_at = time.monotonic()
                    self.flush_usage()
            except Exception as exc:  # noqa: BLE001 - keep the last snapshot through a blip
                log.warning("could not refresh credentials: %s", exc)


def _credential(row: dict[str, object]) -> _Credential:
    binding = json.loads(str(row["binding"]))
    expires = row["expires_at"]
    return _Credential(
        label=str(row["label"]),
        role=str(row["role"]),
        digest=str(row["secret_sha256"]),
        binding=Binding(**binding),
        expires_at=_parse(str(expires)) if expires else None,
        revoked_at=str(row["revoked_at"]) if row["revoked_at"] else None,
    )


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
