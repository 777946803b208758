"""A read store kept in the former Merkle layout upgrades at start-up, on both stores.

The former layout: a `log_tree` projection of its own, with a leaf row per event in
`rm_log_leaves` (index, position, hash) and a node row for every level in
`rm_log_nodes`. The upgrade moves the leaves beside the chain's links in place, keeping
what was recorded on arrival; when the two projections had not reached the same
position it rebuilds the chain and tree from the log instead.
"""

from __future__ import annotations

from domain.merkle import CompactRange
from infra.settings import Settings
from projections.log_tree import FORMER_LEAVES_TABLE, LINKS_TABLE, NODES_TABLE, sign_log_head
from services.log_audit import verify_log
from services.log_proofs import consistency, inclusion
from tests.audit_support import KEY, audited_services, read_store
from tests.log_tamper import Tamper


def downgrade(settings: Settings, *, tree_behind: bool = False) -> None:
    """Rewrite the live chain and tree as the former layout kept them."""
    with read_store(settings) as store:
        links = store.query(f"SELECT position, seq, leaf FROM {LINKS_TABLE} ORDER BY seq")
        tree, nodes = CompactRange(), []
        for row in links:
            nodes += [n for n in tree.append(bytes.fromhex(row["leaf"])) if n[0][0] > 0]
        tracked = store.query_one(
            "SELECT position FROM projection_tracking WHERE name = 'log_checkpoints'"
        )
        assert tracked is not None
        behind = int(tracked["position"]) - (1 if tree_behind else 0)
        with store.transaction() as cur:
            cur.execute(
                f"CREATE TABLE {FORMER_LEAVES_TABLE} (idx BIGINT PRIMARY KEY, "
                "position BIGINT NOT NULL, hash TEXT NOT NULL)"
            )
            cur.executemany(
                f"INSERT INTO {FORMER_LEAVES_TABLE} (idx, position, hash) VALUES (?,?,?)",
                [(int(r["seq"]) - 1, int(r["position"]), r["leaf"]) for r in links],
            )
            cur.execute(f"ALTER TABLE {LINKS_TABLE} DROP COLUMN leaf")
            cur.execute(f"DELETE FROM {NODES_TABLE}")
            cur.executemany(
                f"INSERT INTO {NODES_TABLE} (level, idx, hash) VALUES (?,?,?)",
                [(level, index, h.hex()) for (level, index), h in nodes],
            )
            cur.execute(
                "INSERT INTO projection_tracking (name, position) VALUES ('log_tree', ?)",
                (behind,),
            )


def snapshot(settings: Settings) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    with read_store(settings) as store:
        return (
            store.query(f"SELECT * FROM {LINKS_TABLE} ORDER BY position"),
            store.query(f"SELECT * FROM {NODES_TABLE} ORDER BY level, idx"),
        )


def former_layout_gone(settings: Settings) -> bool:
    with read_store(settings) as store, store.transaction() as cur:
        cur.execute("SELECT name FROM projection_tracking WHERE name = 'log_tree'")
        return not cur.fetchall() and not cur.columns(FORMER_LEAVES_TABLE)


def test_an_upgrade_keeps_the_leaves_recorded_on_arrival(settings: Settings) -> None:
    settings = settings.with_(log_note_every_events=100)
    with audited_services(settings, sessions=300) as services:
        head = int(services.app.recorder.max_notification_id() or 0)
        sign_log_head(services.projections, services.store)  # the head too, if unsigned
    links, nodes = snapshot(settings)
    downgrade(settings)
    # Altered after arrival: a rebuild from the log would now record something else.
    Tamper(settings).flip_payload_byte(200, b"auditor")
    with audited_services(settings, sessions=0) as services:
        assert former_layout_gone(settings)
        assert snapshot(settings) == (links, nodes)  # as recorded, only every 4th level kept
        report = verify_log(services.app, services.store, KEY)
        assert report.chain_break is not None and report.chain_break.position == 200
        # Proofs against the notes signed before the upgrade still come out whole.
        sizes = [int(r["size"]) for r in services.store.query("SELECT size FROM log_notes")]
        assert len(sizes) >= 2 and max(sizes) == head
        proof = inclusion(services.store, head, head)
        assert proof["leafIndex"] == head - 1 and proof["hashes"]
        assert len(consistency(services.store, min(sizes), head)["hashes"]) > 1


def test_an_upgrade_rebuilds_a_tree_that_lagged_the_chain(settings: Settings) -> None:
    with audited_services(settings, sessions=300):
        pass
    links, nodes = snapshot(settings)
    downgrade(settings, tree_behind=True)
    with audited_services(settings, sessions=0) as services:
        assert former_layout_gone(settings)
        assert snapshot(settings) == (links, nodes)  # rebuilt from the (intact) log
        report = verify_log(services.app, services.store, KEY)
        assert report.ok, report.chain_break


def test_the_links_by_key_index_of_earlier_releases_goes_and_breaks_are_still_named(
    settings: Settings,
) -> None:
    """Earlier releases indexed the links by (aggregate, version) for every event; the
    upgrade drops that index, and a reordered log is still named as reordered (the one
    lookup by key scans instead)."""
    former = f"{LINKS_TABLE}_key"
    with audited_services(settings, sessions=300):
        pass
    with read_store(settings) as store, store.transaction() as cur:
        cur.execute(f"CREATE INDEX {former} ON {LINKS_TABLE} (aggregate_id, version)")
    assert index_exists(settings, former)
    Tamper(settings).swap(400, 500)
    with audited_services(settings, sessions=0) as services:
        assert not index_exists(settings, former)
        report = verify_log(services.app, services.store, KEY)
        assert report.chain_break is not None
        assert (report.chain_break.position, report.chain_break.kind) == (400, "reordered")


def index_exists(settings: Settings, name: str) -> bool:
    with read_store(settings) as store:
        if store.dialect == "postgres":
            row = store.query_one("SELECT to_regclass(?) IS NOT NULL AS found", (name,))
            return bool(row and row["found"])
        found = store.query_one("SELECT 1 AS found FROM sqlite_master WHERE name = ?", (name,))
        return found is not None
