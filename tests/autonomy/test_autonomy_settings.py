"""Autonomy settings on both stores: all off by default, every change an audited event."""

from __future__ import annotations

from fastapi.testclient import TestClient

from domain.autonomy_gate import AUTONOMY_GATE_ID
from domain.autonomy_settings import AUTONOMY_SETTINGS_ID
from infra.settings import Settings
from tests.autonomy.conftest import quiet_client

DEFAULTS = {
    "evolution": False,
    "skillCreation": False,
    "factRetention": False,
    "selfUpdate": False,
    "updatedBy": None,
    "updatedAt": None,
    "selfUpdateTaskId": None,
    "selfUpdateCycles": 0,
}


def test_settings_default_to_off_and_changes_are_recorded_with_their_actor(
    settings: Settings,
) -> None:
    key = "k" * 40
    with quiet_client(settings, api_key=key) as client:
        client.headers["x-tachograph-key"] = key
        assert client.get("/api/settings/autonomy").json() == DEFAULTS
        changed = client.patch("/api/settings/autonomy", json={"evolution": True})
        assert changed.status_code == 200, changed.text
        assert int(changed.headers["x-tachograph-position"]) > 0
        body = changed.json()
        assert (body["evolution"], body["skillCreation"], body["updatedBy"]) == (
            True,
            False,
            "key:admin",
        )
        again = client.patch("/api/settings/autonomy", json={"evolution": True})
        assert again.json() == body  # a no-op appends nothing
        client.patch("/api/settings/autonomy", json={"selfUpdate": True, "evolution": False})
        stream = client.get(f"/api/streams/{AUTONOMY_SETTINGS_ID}").json()
        assert [(e["type"], e["data"]["actor"]) for e in stream["events"]] == [
            ("AutonomySettings.Created", "key:admin"),
            ("AutonomySettings.Changed", "key:admin"),
            ("AutonomySettings.Changed", "key:admin"),
        ]
        assert stream["events"][2]["data"]["changes"] == {"self_update": True, "evolution": False}
        # The gate follows selfUpdate in the same transaction, also audited.
        gate = client.get(f"/api/streams/{AUTONOMY_GATE_ID}").json()["events"]
        assert [e["type"] for e in gate] == ["AutonomyGate.Created", "AutonomyGate.PolicyChanged"]
        assert gate[1]["position"] == stream["events"][2]["position"] + 1
        assert client.get("/api/settings/autonomy").json()["selfUpdate"] is True


def test_bad_settings_changes_are_refused(api: TestClient) -> None:
    for body in ({"evolution": None}, {"evolution": "yes"}, {"memory": True}):
        response = api.patch("/api/settings/autonomy", json=body)
        assert response.status_code == 422, (body, response.text)
    assert api.get("/api/settings/autonomy").json() == DEFAULTS
    # Switching off what is off records nothing at all.
    assert api.patch("/api/settings/autonomy", json={"evolution": False}).json() == DEFAULTS
    assert api.get(f"/api/streams/{AUTONOMY_SETTINGS_ID}").status_code == 404
