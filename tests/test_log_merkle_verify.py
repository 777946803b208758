"""`tachograph verify` checks the Merkle tree and the signed checkpoints too, on both stores."""

from __future__ import annotations

import json
from typing import Any

from fastapi.testclient import TestClient

from api.app import create_app
from domain.merkle import range_nodes, stored_under
from infra.settings import Settings
from projections.log_checkpoints import CHECKPOINTS_TABLE, LINKS_TABLE
from projections.log_tree import NODES_TABLE, NOTES_TABLE
from tests.audit_support import read_store
from tests.log_tamper import Tamper
from tests.support import run_cli


def recorded(settings: Settings, sessions: int = 6) -> int:
    """Sessions recorded by a server signing after every batch; the log's head."""
    with TestClient(create_app(settings.with_(log_note_every_events=1))) as client:
        for _ in range(sessions):
            created = client.post("/api/sessions", json={"workspaceId": "default"})
            assert created.status_code == 201
        head = int(client.get("/api/log/verify").json()["head"]["position"])
    return head


def verify(settings: Settings) -> dict[str, Any]:
    done = run_cli(settings, "verify", "--json")
    assert done.returncode in (0, 1), done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    assert report["ok"] == (done.returncode == 0)
    return report


def test_an_untouched_log_matches_its_tree_and_every_signed_checkpoint(
    settings: Settings,
) -> None:
    head = recorded(settings)
    report = verify(settings)
    assert report["ok"], report["break"]
    merkle = report["merkle"]
    assert merkle["leaves"] == report["events"] == head
    assert merkle["checked"] == merkle["signedCheckpoints"] >= 2
    done = run_cli(settings, "verify")
    assert f"Merkle tree of {head} leaves matched" in done.stdout


def test_a_tail_cut_from_the_log_and_the_chain_is_named_by_the_signed_checkpoints(
    settings: Settings,
) -> None:
    head = recorded(settings)
    tamper = Tamper(settings)
    for position in (head, head - 1):
        tamper.delete(position)
    with read_store(settings) as store, store.transaction() as cur:
        # What an operator holding only the HMAC key can rewrite: the chain (and the
        # leaves beside its links) and its ledger.
        for table, column in ((LINKS_TABLE, "position"), (CHECKPOINTS_TABLE, "position")):
            cur.execute(f"DELETE FROM {table} WHERE {column} >= ?", (head - 1,))
    report = verify(settings)
    assert report["break"]["kind"] == "truncated", report
    assert report["break"]["position"] == head - 1
    assert f"covers {head} events" in report["break"]["message"]


def test_a_checkpoint_altered_in_the_ledger_no_longer_verifies(settings: Settings) -> None:
    recorded(settings)
    with read_store(settings) as store:
        size, note = next(
            (int(r["size"]), str(r["note"]))
            for r in store.query(f"SELECT size, note FROM {NOTES_TABLE} ORDER BY size")
        )
        lines = note.split("\n")
        # Another root, same signature (a root whose base64 began with "A" was left
        # unchanged by always writing "A", one run in 64).
        lines[2] = ("B" if lines[2].startswith("A") else "A") + lines[2][1:]
        with store.transaction() as cur:
            cur.execute(
                f"UPDATE {NOTES_TABLE} SET note = ? WHERE size = ?", ("\n".join(lines), size)
            )
    report = verify(settings)
    assert report["break"]["kind"] == "forged_checkpoint", report
    assert f"signed checkpoint of size {size} does not verify" in report["break"]["message"]


def test_a_tree_altered_in_the_read_model_is_named(settings: Settings) -> None:
    head = recorded(settings, sessions=5)
    with read_store(settings) as store:
        size = int(store.query(f"SELECT COUNT(*) AS n FROM {LINKS_TABLE}")[0]["n"])
        # On the right edge, so part of the root: the last stored row it is made of.
        level, index = stored_under(range_nodes(0, size)[-1])[-1]
        with store.transaction() as cur:
            if level == 0:  # a leaf, kept beside its chain link (leaf index = seq - 1)
                cur.execute(
                    f"UPDATE {LINKS_TABLE} SET leaf = ? WHERE seq = ?", ("00" * 32, index + 1)
                )
            else:
                cur.execute(
                    f"UPDATE {NODES_TABLE} SET hash = ? WHERE level = ? AND idx = ?",
                    ("00" * 32, level, index),
                )
    report = verify(settings)
    assert report["break"]["kind"] == "merkle_mismatch", report
    # A leaf is named by its position; a subtree above the leaves by the head.
    position = index + 1 if level == 0 else head
    assert report["break"]["position"] == position
