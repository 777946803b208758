"""Hook decisions out as OpenTelemetry spans, through a real `serve` (both stores).

A stand-in collector on loopback receives one `apply_guardrail` span per decision, with
the attributes docs/telemetry.md lists, for a deny, an operator's approval and a pass;
the runtime's `traceparent` makes the span its child. The same spans arrive in OTLP JSON,
gzipped, with the configured headers and resource, and over mutual TLS to an https://
collector with the CA and client certificate named. With the collector down, or the
queue full, hooks answer as before and the drops are counted on /metrics.
"""

from __future__ import annotations

import json
import re
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from infra.settings import Settings
from tests.hook_server import HookServer, answer
from tests.otel_collector import Collector
from tests.support import admin_client, free_port
from tests.tls_certificates import self_signed

pytestmark = pytest.mark.slow

ADMIN_KEY = "otel-export-admin-key"
RULES = {"version": 1, "rules": [{"id": "risky-git", "tool": "Bash", "match": "git push"}]}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"
# Not ASCII: the encoder counts the reason's length in UTF-8 bytes.
DENY_REASON = "writes to /etc are refused — ask ops"


@pytest.fixture
def collector() -> Iterator[Collector]:
    stand_in = Collector()
    yield stand_in
    stand_in.close()


@pytest.fixture
def handler() -> Iterator[HookServer]:
    server = HookServer()
    server.routes["/deny"] = answer("deny", reason=DENY_REASON)
    yield server
    server.close()


def serve_env(handler: HookServer, **otel: str) -> dict[str, str]:
    hooks = {
        "version": 1,
        "hooks": {
            "PreToolUse": [
                {"id": "no-etc", "type": "http", "url": f"{handler.url}/deny", "matcher": ["Write"]}
            ]
        },
    }
    return {
        "TACHOGRAPH_HOOKS": json.dumps(hooks),
        "TACHOGRAPH_APPROVALS": json.dumps(RULES),
        "TACHOGRAPH_HOOK_ALLOW_INSECURE_LOOPBACK": "1",
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        **otel,
    }


def pre_tool_use(session: str, tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    """A Claude Code 2.1.328 PreToolUse body (the shape of its capture)."""
    return {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/-repo/{session}.jsonl",
        "cwd": "/home/dev/repo",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": tool_input,
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:20]}",
    }


def agent_headers(client: httpx.Client) -> dict[str, str]:
    issued = client.post("/api/keys", json={"role": "agent", "workspaceId": "default"})
    assert issued.status_code == 201, issued.text
    return {"x-tachograph-key": issued.json()["secret"]}


def of_call(body: dict[str, Any]) -> Any:
    return lambda span: span.attributes.get("tachograph.tool_call.id") == body["tool_use_id"]


def test_deny_approval_and_pass_arrive_as_guardrail_spans(
    settings: Settings, tmp_path: Path, collector: Collector, handler: HookServer
) -> None:
    env = serve_env(handler, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        agent = agent_headers(client)
        native = str(uuid.uuid4())
        write = pre_tool_use(native, "Write", {"file_path": "/etc/passwd", "content": "x"})
        denied = client.post("/hooks/claude", json=write, headers=agent)
        assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"

        read = pre_tool_use(native, "Read", {"file_path": "README.md"})
        traced = {**agent, "traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-01"}
        passed = client.post("/hooks/claude", json=read, headers=traced)
        assert passed.status_code == 200 and passed.json() == {}

        push = pre_tool_use(native, "Bash", {"command": "git push origin main"})
        held: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: held.append(
                client.post("/hooks/claude", json=push, headers=agent, timeout=60)
            )
        )
        thread.start()
        request = _pending(client)
        decided = client.post(
            f"/api/approvals/{request['id']}/decide", json={"decision": "allow", "reason": "ok"}
        )
        assert decided.status_code == 200, decided.text
        thread.join(60)
        assert held and held[0].status_code == 200

        [deny] = collector.spans(of_call(write))
        [allow] = collector.spans(of_call(read))
        [approved] = collector.spans(of_call(push))
        session_uuid = deny.attributes["tachograph.session.id"]
        links = _links(client, session_uuid)

    for span, response in ((deny, denied), (allow, passed), (approved, held[0])):
        assert span.name == "apply_guardrail Tachograph"
        assert span.kind == 1  # INTERNAL
        assert span.resource["service.name"] == "tachograph"
        attributes = span.attributes
        assert attributes["gen_ai.operation.name"] == "apply_guardrail"
        assert attributes["gen_ai.guardian.name"] == "Tachograph"
        assert attributes["gen_ai.security.target.type"] == "tool_call"
        assert attributes["gen_ai.conversation.id"] == session_uuid
        assert attributes["tachograph.agent.session_id"] == native
        assert attributes["tachograph.hook.event"] == "PreToolUse"
        assert attributes["gen_ai.security.target.id"] == attributes["tachograph.tool_call.id"]
        position = int(response.headers["x-tachograph-position"])
        assert attributes["tachograph.log.position"] == position
        assert attributes["tachograph.log.recorded"] is True
        assert attributes["tachograph.log.link"] == links[position]
        assert span.start_ns <= span.end_ns

    assert deny.attributes["gen_ai.security.decision.type"] == "deny"
    assert deny.attributes["tachograph.decision.outcome"] == "deny"
    assert deny.attributes["gen_ai.security.policy.id"] == "no-etc"
    assert deny.attributes["gen_ai.security.decision.reason"] == DENY_REASON
    assert deny.attributes["gen_ai.tool.name"] == "Write"

    assert allow.attributes["gen_ai.security.decision.type"] == "allow"
    assert "gen_ai.security.policy.id" not in allow.attributes
    assert allow.trace_id == TRACE_ID and allow.parent_span_id == PARENT_SPAN
    assert deny.trace_id != TRACE_ID and deny.parent_span_id == ""  # no context sent

    assert approved.attributes["gen_ai.security.decision.type"] == "allow"
    assert approved.attributes["gen_ai.security.policy.id"] == "approval:risky-git"
    assert approved.attributes["tachograph.approval.id"] == request["id"]
    assert approved.attributes["tachograph.approval.rule_id"] == "risky-git"
    assert approved.attributes["tachograph.approval.verdict"] == "allow"
    assert approved.attributes["tachograph.approval.operator"] == "key:admin"
    # An allowed call carries no reason (the conventions ask for one on other decisions).
    assert "gen_ai.security.decision.reason" not in approved.attributes


def test_json_gzip_headers_and_resource_as_the_otlp_variables_ask(
    settings: Settings, tmp_path: Path, collector: Collector, handler: HookServer
) -> None:
    env = serve_env(
        handler,
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json",
        OTEL_EXPORTER_OTLP_COMPRESSION="gzip",
        OTEL_EXPORTER_OTLP_HEADERS="authorization=Bearer%20collector-secret,x-team=agents",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci,service.name=ignored",
        OTEL_SERVICE_NAME="governance",
    )
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        agent = agent_headers(client)
        write = pre_tool_use(str(uuid.uuid4()), "Write", {"file_path": "/etc/hosts"})
        traced = {**agent, "traceparent": f"00-{TRACE_ID}-{PARENT_SPAN}-00"}
        denied = client.post("/hooks/claude", json=write, headers=traced)
        assert denied.json()["hookSpecificOutput"]["permissionDecision"] == "deny"
        [span] = collector.spans(of_call(write))

    [request] = collector.headers
    assert request["content-type"] == "application/json"
    assert request["content-encoding"] == "gzip"
    assert request["authorization"] == "Bearer collector-secret"
    assert request["x-team"] == "agents"
    assert span.resource == {"service.name": "governance", "deployment.environment": "ci"}
    assert span.name == "apply_guardrail Tachograph" and span.kind == 1
    # Exported whatever the sampling flag of the runtime's context said.
    assert span.trace_id == TRACE_ID and span.parent_span_id == PARENT_SPAN
    assert len(span.span_id) == 16 and span.span_id != "0" * 16
    attributes = span.attributes
    assert attributes["tachograph.log.position"] == int(denied.headers["x-tachograph-position"])
    assert attributes["tachograph.log.recorded"] is True
    assert attributes["gen_ai.security.decision.type"] == "deny"
    assert attributes["gen_ai.security.policy.id"] == "no-etc"


def test_an_https_collector_is_trusted_by_the_named_ca_and_sees_the_client_certificate(
    settings: Settings, tmp_path: Path, handler: HookServer
) -> None:
    server_cert, server_key = self_signed(tmp_path, "collector")
    client_cert, client_key = self_signed(tmp_path, "tachograph")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(server_cert, server_key)
    tls.load_verify_locations(client_cert)
    tls.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: no span without the client's certificate
    collector = Collector(tls)
    env = serve_env(
        handler,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{collector.url}/v1/traces",
        OTEL_EXPORTER_OTLP_CERTIFICATE=str(server_cert),
        OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE=str(client_cert),
        OTEL_EXPORTER_OTLP_CLIENT_KEY=str(client_key),
    )
    try:
        with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
            agent = agent_headers(client)
            read = pre_tool_use(str(uuid.uuid4()), "Read", {"file_path": "README.md"})
            assert client.post("/hooks/claude", json=read, headers=agent).json() == {}
            [span] = collector.spans(of_call(read))
    finally:
        collector.close()
    assert collector.url.startswith("https://")
    assert span.attributes["gen_ai.security.decision.type"] == "allow"


def test_a_collector_that_is_down_costs_hooks_nothing_and_drops_are_counted(
    settings: Settings, tmp_path: Path, handler: HookServer
) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = serve_env(handler, OTEL_EXPORTER_OTLP_ENDPOINT=down, OTEL_EXPORTER_OTLP_TIMEOUT="1")
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        agent = agent_headers(client)
        native = str(uuid.uuid4())
        for n in range(5):
            body = pre_tool_use(native, "Read", {"file_path": f"f{n}.py"})
            started = time.monotonic()
            answered = client.post("/hooks/claude", json=body, headers=agent)
            assert answered.status_code == 200 and answered.json() == {}
            assert answered.headers["x-tachograph-position"]
            assert time.monotonic() - started < 2
        assert _dropped(client, "export_failed", at_least=5) >= 5
        assert _dropped(client, "queue_full") == 0


def test_a_busy_collector_is_retried_and_a_refusing_one_drops_the_batch(
    settings: Settings, tmp_path: Path, collector: Collector, handler: HookServer
) -> None:
    collector.refusals = [503, 400]  # busy (retried), then refusing the retry (dropped)
    env = serve_env(handler, OTEL_EXPORTER_OTLP_ENDPOINT=collector.url)
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        agent = agent_headers(client)
        native = str(uuid.uuid4())
        first = pre_tool_use(native, "Read", {"file_path": "a.py"})
        assert client.post("/hooks/claude", json=first, headers=agent).json() == {}
        assert _dropped(client, "export_failed", at_least=1) == 1
        collector.refusals = [503]  # busy once: the retry a second later is taken
        second = pre_tool_use(native, "Read", {"file_path": "b.py"})
        assert client.post("/hooks/claude", json=second, headers=agent).json() == {}
        [span] = collector.spans(of_call(second))
        assert _dropped(client, "export_failed") == 1
    assert collector.spans(of_call(first), timeout=0) == []
    assert span.attributes["tachograph.hook.event"] == "PreToolUse"


def test_a_full_queue_drops_new_decisions_and_counts_them(
    settings: Settings, tmp_path: Path, collector: Collector, handler: HookServer
) -> None:
    env = serve_env(
        handler,
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{collector.url}/v1/traces",
        OTEL_BSP_MAX_QUEUE_SIZE="2",
        OTEL_BSP_SCHEDULE_DELAY="3600000",  # nothing leaves the queue during the test
    )
    with admin_client(settings, tmp_path / "serve.log", env, ADMIN_KEY) as client:
        agent = agent_headers(client)
        native = str(uuid.uuid4())
        for n in range(5):
            body = pre_tool_use(native, "Read", {"file_path": f"f{n}.py"})
            answered = client.post("/hooks/claude", json=body, headers=agent)
            assert answered.status_code == 200 and answered.json() == {}
        # SessionStart is not sent here: the five PreToolUse are the only decisions.
        assert _dropped(client, "queue_full", at_least=3) == 3


def _pending(client: httpx.Client, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = client.get("/api/approvals", params={"status": "pending"}).json()["items"]
        if items:
            return dict(items[0])
        time.sleep(0.05)
    raise AssertionError("no pending approval")


def _links(client: httpx.Client, session_uuid: str) -> dict[int, str]:
    exported = client.get(f"/api/sessions/{session_uuid}/export")
    assert exported.status_code == 200, exported.text
    records = [json.loads(line) for line in exported.text.splitlines()]
    return {int(r["position"]): str(r["link"]) for r in records}


_DROPPED = re.compile(r'^tachograph_otel_decisions_dropped_total\{reason="(\w+)"\} (\S+)$', re.M)


def _dropped(client: httpx.Client, reason: str, at_least: int = 0, timeout: float = 20) -> int:
    deadline = time.monotonic() + timeout
    while True:
        text = client.get("/metrics").text
        counts = {r: int(float(v)) for r, v in _DROPPED.findall(text)}
        count = counts.get(reason, 0)
        if count >= at_least or time.monotonic() > deadline:
            return count
        time.sleep(0.1)
