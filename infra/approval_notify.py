"""`TACHOGRAPH_APPROVAL_NOTIFY`: each new approval request posted to one URL, off the hot
path, signed like hook requests (x-tachograph-timestamp and x-tachograph-signature when a
secret is configured), so a chat bot can post it where operators are."""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from domain.approval import Approval
from domain.hook_config import HookHandler
from infra.hook_wire import HookTransport

log = logging.getLogger(__name__)

NOTIFY_TIMEOUT_MS = 5000


def notify_handler(url: str, secret_env: str | None) -> HookHandler:
    """The notification target as the hook transport calls it (same URL rules, signing)."""
    return HookHandler(
        id="approval-notify",
        event="ApprovalRequested",
        url=url,
        matcher=None,
        timeout_ms=NOTIFY_TIMEOUT_MS,
        failure_mode="open",
        secret_env=secret_env,
    )


def notification(approval: Approval) -> dict[str, Any]:
    """What `TACHOGRAPH_APPROVAL_NOTIFY` receives for a new request: the redacted facts a
    chat bot needs to post it, and the route that decides it (never the raw input)."""
    return {
        "type": "approval.requested",
        "approval": {
            "id": str(approval.id),
            "sessionId": str(approval.session_id),
            "workspaceId": approval.workspace_id,
            "event": approval.event_name,
            "toolName": approval.tool_name,
            "inputSummary": approval.input_summary,
            "ruleId": approval.rule_id,
            "handlerId": approval.handler_id,
            "requestReason": approval.reason,
            "deadline": approval.deadline.isoformat().replace("+00:00", "Z"),
            "onTimeout": approval.on_timeout,
        },
        "decide": f"/api/approvals/{approval.id}/decide",
    }


class ApprovalNotifier:
    """Posts each new request on a thread of its own: a slow or failing receiver never
    delays the held call, it is logged and dropped."""

    def __init__(self, transport: HookTransport, handler: HookHandler) -> None:
        self._transport = transport
        self._handler = handler
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="approval-notify")

    def __call__(self, approval: Approval) -> None:
        body = json.dumps(notification(approval), separators=(",", ":")).encode()
        self._pool.submit(self._post, body, str(approval.id))

    def _post(self, body: bytes, approval_id: str) -> None:
        reply = self._transport.call(self._handler, body)
        if reply.failure is not None or reply.status is None or not 200 <= reply.status < 300:
            log.warning(
                "approval notification not delivered",
                extra={
                    "approval_id": approval_id,
                    "failure": reply.failure,
                    "status": reply.status,
                },
            )

    def close(self) -> None:
        self._pool.shutdown(wait=True)
