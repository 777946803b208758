"""Credential rules: roles, secrets, labels, expiry and the actor each credential signs as.

Pure: the API authenticates with these, the `ApiKey` aggregate records what they decide.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from domain.errors import RuleViolation

AGENT, READER, OPERATOR, ADMIN = "agent", "reader", "operator", "admin"
ROLES = (AGENT, READER, OPERATOR, ADMIN)
# What each role may do, as the capabilities a route needs. An agent token is not a
# weaker reader: it can write hook events and signals but read nothing.
HOOKS, READ, OPERATE, ADMINISTER = "hooks", "read", "operate", "administer"
CAPABILITIES: dict[str, frozenset[str]] = {
    AGENT: frozenset({HOOKS}),
    READER: frozenset({READ}),
    OPERATOR: frozenset({HOOKS, READ, OPERATE}),
    ADMIN: frozenset({HOOKS, READ, OPERATE, ADMINISTER}),
}
# The smallest role that holds each capability, for the 403's "needs ..." sentence.
NEEDED_ROLE = {HOOKS: AGENT, READ: READER, OPERATE: OPERATOR, ADMINISTER: ADMIN}

SELF_UPDATE_POLICY = "self-update"
POLICIES = (SELF_UPDATE_POLICY,)
BOOTSTRAP_LABEL = "admin"  # TACHOGRAPH_API_KEY: never stored, so no issued key may take it
LABEL = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
SECRET_PREFIX = "tgk_"
# tgk_ and 32 random bytes in unpadded base64url.
SECRET = re.compile(r"^tgk_[A-Za-z0-9_-]{43}$")
_DURATION = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_LIFETIME = timedelta(days=3650)


@dataclass(frozen=True)
class Binding:
    """What an agent token may write to: one session, or the sessions of one workspace."""

    session_id: str | None = None
    workspace_id: str | None = None
    task_id: str | None = None  # set on tokens the executor mints for a task attempt
    turn_id: str | None = None
    # A code-owned tool policy every PreToolUse of the token's holder passes first
    # (`self-update`: its agent works only inside `root`, a contained clone).
    policy: str | None = None
    root: str | None = None

    def as_dict(self) -> dict[str, str]:
        fields = {
            "session_id": self.session_id,
            "workspace_id": self.workspace_id,
            "task_id": self.task_id,
            "turn_id": self.turn_id,
            "policy": self.policy,
            "root": self.root,
        }
        return {k: v for k, v in fields.items() if v is not None}


def new_secret() -> str:
    """A fresh credential: shown once, stored only as its digest."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_digest(secret: str) -> str:
    """SHA-256 hex of a secret, the only form in which it is ever stored."""
    return hashlib.sha256(secret.encode()).hexdigest()


def check_label(label: str) -> str:
    if not LABEL.fullmatch(label):
        raise RuleViolation(
            f"Label {label!r} must match [a-z0-9][a-z0-9._-]{{0,62}} (lowercase, no spaces)."
        )
    if label == BOOTSTRAP_LABEL:
        raise RuleViolation(
            "Label 'admin' is the bootstrap key TACHOGRAPH_API_KEY's; choose another label."
        )
    return label


def check_role(role: str) -> str:
    if role not in ROLES:
        raise RuleViolation(f"Role {role!r} is not one of {', '.join(ROLES)}.")
    return role


def check_binding(role: str, binding: Binding) -> Binding:
    """Agent tokens are bound to exactly one session or workspace; other keys to none."""
    bound = [b for b in (binding.session_id, binding.workspace_id) if b is not None]
    if role == AGENT and len(bound) != 1:
        raise RuleViolation("An agent token is bound to exactly one session or one workspace.")
    if role != AGENT and (bound or binding.task_id):
        raise RuleViolation(f"A {role} key cannot be bound to a session or workspace.")
    if binding.policy is not None and (binding.policy not in POLICIES or not binding.root):
        raise RuleViolation(f"Policy {binding.policy!r} is not one of {', '.join(POLICIES)}.")
    return binding


def parse_lifetime(text: str) -> timedelta:
    """`30d`, `12h`, `15m` or `90s`, at most ten years."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise RuleViolation(
            f"Expiry {text!r} must be a whole number followed by s, m, h or d (e.g. 30d)."
        )
    lifetime = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if lifetime > MAX_LIFETIME:
        raise RuleViolation(f"Expiry {text!r} is longer than ten years.")
    return lifetime


def actor_of(label: str, role: str, binding: Binding) -> str:
    """How events caused by this credential name their actor."""
    if role != AGENT:
        return f"key:{label}"
    if binding.task_id is not None:
        return f"task:{binding.task_id}"
    if binding.session_id is not None:
        return f"agent:{binding.session_id}"
    return f"agent:{label}"


def expired(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is not None and now >= expires_at
