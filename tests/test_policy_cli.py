"""`tachograph policy init|apply|show|history|rollback|remove` against a running server
(both stores): the starter written, a document recorded and made active, a refused one
naming its rule, a hook then denied, rollback and removal, a workspace's scope, and a
reader's key refused."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import httpx

from cli.policy import STARTER
from infra.settings import Settings
from tests.support import admin_client, env_for

ROOT = Path(__file__).resolve().parents[1]
KEY = "policy-cli-admin-key"
TYPO = "version: 1\nrules:\n  - {id: typo, when: 'toool == \"Bash\"', then: deny}\n"
LENIENT = "version: 1\nrules:\n  - {id: nothing, when: 'false', then: deny}\n"


def policy(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "policy", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def force_push(api: httpx.Client) -> dict[str, object]:
    payload = {
        "session_id": str(uuid.uuid4()),
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/work/repo",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "git push --force origin main"},
        "tool_use_id": f"toolu_{uuid.uuid4().hex[:12]}",
    }
    answer = api.post("/hooks/claude", json=payload)
    assert answer.status_code == 200, answer.text
    out: dict[str, object] = answer.json().get("hookSpecificOutput") or {}
    return out


def test_the_policy_commands_against_a_running_server(settings: Settings, tmp_path: Path) -> None:
    starter = tmp_path / "policy.yaml"
    bare = env_for(settings)
    made = policy(bare, "init", str(starter))
    assert made.returncode == 0, made.stderr
    assert starter.read_text() == STARTER.read_text()
    again = policy(bare, "init", str(starter))
    assert again.returncode == 1 and "exists" in again.stderr
    assert policy(bare, "init", "-").stdout == STARTER.read_text()

    with admin_client(settings, tmp_path / "serve.log", {}, KEY) as api:
        env = {**bare, "TACHOGRAPH_URL": str(api.base_url), "TACHOGRAPH_API_KEY": KEY}
        typo = tmp_path / "typo.yaml"
        typo.write_text(TYPO)
        refused = policy(env, "apply", str(typo))
        assert refused.returncode == 1
        assert "rule 'typo'" in refused.stderr and "toool" in refused.stderr, refused.stderr
        assert "no active policy" in policy(env, "show").stderr

        applied = policy(env, "apply", str(starter))
        assert applied.returncode == 0, applied.stderr
        assert "revision 1 of the global policy is active" in applied.stdout
        [first] = json.loads(policy(env, "show", "--json").stdout)
        assert first["digest"] in applied.stdout and first["id"] in applied.stdout
        assert first["source"] == STARTER.read_text()
        denied = force_push(api)
        assert denied["permissionDecision"] == "deny"
        assert "Force-pushing rewrites shared history" in str(denied["permissionDecisionReason"])

        lenient = tmp_path / "lenient.yaml"
        lenient.write_text(LENIENT)
        assert "revision 2 of" in policy(env, "apply", str(lenient)).stdout
        shown = policy(env, "show")
        assert (
            shown.returncode == 0 and "revision 2" in shown.stdout and "id: nothing" in shown.stdout
        )
        assert force_push(api).get("permissionDecision") != "deny"
        listed = json.loads(policy(env, "history", "--json").stdout)
        assert [r["number"] for r in listed["items"]] == [2, 1]
        table = policy(env, "history").stdout
        assert "number" in table and "active" in table and "activate" in table

        rolled = policy(env, "rollback", "1")
        assert rolled.returncode == 0, rolled.stderr
        assert "revision 1 of the global policy is active again" in rolled.stdout
        assert force_push(api)["permissionDecision"] == "deny"
        assert policy(env, "rollback", first["id"]).returncode == 1  # already active: 409
        assert policy(env, "rollback", "7").returncode == 2

        removed = policy(env, "remove")
        assert removed.returncode == 0, removed.stderr
        assert json.loads(policy(env, "show", "--json").stdout) == []
        assert force_push(api).get("permissionDecision") != "deny"

        (settings.workspace_root / "locked").mkdir()
        assert api.post("/api/workspaces", json={"id": "locked", "path": "locked"}).is_success
        scoped = policy(env, "apply", str(lenient), "--workspace", "locked")
        assert "revision 1 of the workspace locked policy is active" in scoped.stdout
        [only] = json.loads(policy(env, "show", "--workspace", "locked", "--json").stdout)
        assert only["workspaceId"] == "locked"

        issued = api.post("/api/keys", json={"label": "rita", "role": "reader"})
        reader = {**env, "TACHOGRAPH_API_KEY": issued.json()["secret"]}
        as_reader = policy(reader, "apply", str(starter))
        assert as_reader.returncode == 1 and "HTTP 403" in as_reader.stderr
        assert policy(reader, "show", "--workspace", "locked").returncode == 0
        unreachable = {**env, "TACHOGRAPH_URL": "http://127.0.0.1:9"}
        down = policy(unreachable, "show")
        assert down.returncode == 1 and "127.0.0.1:9" in down.stderr
