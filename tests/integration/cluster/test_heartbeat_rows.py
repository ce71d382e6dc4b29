"""A heartbeat rewrites its node's row (ST_NODE_HEARTBEAT: last_heartbeat,
running, device state, tasks; no indexed column). sql/025_hot_heartbeats.sql
keeps room in the nodes table's pages so that the update is heap-only (HOT):
the new version goes beside the old one, which is pruned in place, instead
of to another page with new index entries and a dead row left for
autovacuum. Packed full, half the heartbeats of the 1,000-node scale bench
found no room and the 1,000-row table grew to 3,000-3,700 pages in a minute.

Rows shaped as 8-GPU nodes' are inserted and beaten once inside a
transaction that is rolled back (the stack's nodes never see them), and
pg_stat_xact_user_tables counts that transaction's HOT updates."""
import json
import uuid

ROWS = 200


def gpus_json():
    return json.dumps([{"index": g, "model": "NVIDIA A100-SXM4-40GB",
                        "memory_bytes": 42949672960, "uuid": f"GPU-{uuid.uuid4()}"}
                       for g in range(8)])


def state_json(beat):
    return json.dumps({"gpus": [{"index": g, "memory_total": 42949672960,
                                 "memory_free": 40000000000 - 1000003 * (beat + g),
                                 "util": (7 * g + beat) % 100} for g in range(8)]})


def test_a_heartbeat_updates_its_node_row_in_place(stack):
    tag = uuid.uuid4().hex[:12]
    rows = stack.psql(f"""
        BEGIN;
        INSERT INTO nodes (name, url, backend, gpus, slots, gpu_state)
          SELECT 'hot-{tag}-' || i, 'http://127.0.0.1:9/', 'cuda', '{gpus_json()}'::jsonb, 8,
                 '{state_json(0)}'::jsonb
          FROM generate_series(1, {ROWS}) i;
        UPDATE nodes SET last_heartbeat = now(), running = 3, state = 'up',
                         gpu_state = '{state_json(1)}'::jsonb
          WHERE name LIKE 'hot-{tag}-%';
        SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'nodes';
        ROLLBACK;""")
    upd, hot = (int(v) for v in rows[-1])
    assert upd == ROWS, rows
    # packed full (fillfactor 100) none is: 0 of 200 here
    assert hot >= 0.95 * ROWS, f"{hot} of {upd} heartbeat updates were heap-only"
    assert stack.psql_value(f"SELECT count(*) FROM nodes WHERE name LIKE 'hot-{tag}-%'") == "0"
