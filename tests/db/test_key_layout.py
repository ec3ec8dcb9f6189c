"""Recall keys' vector layout (migration 019): a large conversation's key vectors get an
HNSW index of their own, and the key arm reads that index alone.

Two conversations are loaded (one with more user turns than a quarter of
donto.recall_exact_max(), the bound of key indexes, one with fewer) and their keys get
random unit vectors of a small test model. The
trigger gives each vector its key's projection whatever the inserter wrote;
donto.ensure_context_indexes builds one key index, for the large projection only, once;
the key arm through it ranks the keys as the exact scan does; and an upgrade from 018
with key vectors in it moves them over unchanged.
"""

from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest

from donto_pg import loader, migrate
from tests.conftest import write_chat

DIM = 8
EXACT_MAX = 100  # key indexes above EXACT_MAX / 4 = 25 keys: 150 get one, 20 do not
# ~1,000 characters per exchange: about one recall chunk per user turn
PAD = "with a few words of padding so that the exchange fills a window. " * 5


def _load(conn: psycopg.Connection, root, cid: str, turns: int) -> int:
    batch = {"batch_number": 1, "time_anchor": None, "turns": [
        [{"role": "user", "id": 2 * i, "content": f"user turn {i} about topic {i % 7} " + PAD,
          "question_type": "main_question",
          **({"time_anchor": "January-10-2024"} if i == 0 else {})},
         {"role": "assistant", "id": 2 * i + 1, "content": f"answer {i} " + 2 * PAD}]
        for i in range(turns)]}
    d = write_chat(root / cid, cid, [batch])
    res = loader.load_beam(conn, str(d.parent.parent.parent))
    assert [r.ok for r in res] == [True], res[0].error
    conn.commit()
    return res[0].revision_id


def _vec(v: np.ndarray) -> str:
    return "[" + ",".join(map(str, v.tolist())) + "]"


@pytest.fixture
def keyed(db, tmp_path):
    """A conversation of 150 user turns and one of 20, their keys with random vectors."""
    rng = np.random.default_rng(19)
    db.execute(f"set donto.recall_exact_max = {EXACT_MAX}")
    model = db.execute("select donto.ensure_embedding_model('test-model', 'random', %s)",
                       (DIM,)).fetchone()[0]
    out = {}
    for cid, turns in (("1", 150), ("2", 20)):
        rev = _load(db, tmp_path, cid, turns)
        proj, ctx = db.execute(
            "select projection_id, context_id from donto.projection "
            "where revision_id = %s and kind = 'recall'", (rev,)).fetchone()
        keys = [r[0] for r in db.execute(
            "select key_id from donto.x_turn_key where projection_id = %s order by key_id",
            (proj,)).fetchall()]
        assert len(keys) == turns
        vecs = rng.standard_normal((turns, DIM)).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        assert db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                          (model, keys, [_vec(v) for v in vecs])).fetchone()[0] == turns
        out[cid] = {"proj": proj, "ctx": ctx, "keys": dict(zip(keys, vecs, strict=True))}
    db.commit()
    return db, model, out, rng


def test_key_vectors_carry_their_keys_projection(keyed):
    db, model, out, _ = keyed
    assert db.execute(
        "select count(*) from donto.x_turn_key_vector v join donto.x_turn_key k "
        "using (key_id) where v.projection_id is distinct from k.projection_id").fetchone()[0] == 0
    # Whatever the inserter writes, the trigger sets the key's projection.
    other = db.execute("select donto.ensure_embedding_model('test-model-2', 'random', %s)",
                       (DIM,)).fetchone()[0]
    key = next(iter(out["1"]["keys"]))
    db.execute("insert into donto.x_turn_key_vector (key_id, model_id, projection_id, embedding) "
               "values (%s, %s, %s, %s)", (key, other, out["2"]["proj"], _vec(np.ones(DIM))))
    assert db.execute("select projection_id from donto.x_turn_key_vector "
                      "where key_id = %s and model_id = %s", (key, other)).fetchone()[0] \
        == out["1"]["proj"]
    db.rollback()


def test_a_large_projection_gets_a_key_index_of_its_own_once(keyed):
    db, model, out, _ = keyed
    assert db.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 1
    names = {r[0] for r in db.execute(
        "select indexname from pg_indexes where tablename = 'x_turn_key_vector' "
        "and indexname like 'x_turn_key_vector_hnsw%'").fetchall()}
    assert names == {f"x_turn_key_vector_hnsw_m{model}_p{out['1']['proj']}"}
    assert db.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 0
    db.commit()


def _key_ranks(conn, q: np.ndarray, ctx: int, model: int, pool: int) -> list[tuple]:
    return conn.execute(
        "select statement_id, key_vector_rank from donto._recall_keys(%s::vector, null, %s, "
        "null, %s, %s, true, false) order by key_vector_rank, statement_id",
        (_vec(q), ctx, model, pool)).fetchall()


def test_the_key_arm_reads_its_index_and_ranks_as_the_exact_scan(keyed):
    db, model, out, rng = keyed
    ctx = out["1"]["ctx"]
    queries = [rng.standard_normal(DIM).astype(np.float32) for _ in range(5)]
    exact = [_key_ranks(db, q, ctx, model, 150) for q in queries]
    assert all(len(e) > 10 for e in exact)
    db.execute("select donto.ensure_context_indexes(%s)", (model,))
    db.commit()
    notes: list[str] = []
    db.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    db.execute("load 'auto_explain'")
    for name, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                        ("log_level", "notice"), ("log_analyze", "off")):
        db.execute(f"set auto_explain.{name} = {value}")
    # A pool as large as the conversation and ef_search above it: the index returns every
    # key, so its ranking must be the exact one. (On 150 rows the planner would rather
    # sort them; 10,000 and more, where the index is built by default, go through it.)
    db.execute("set hnsw.ef_search = 400")
    for name in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
        db.execute(f"set {name} = off")
    via_index = [_key_ranks(db, q, ctx, model, 150) for q in queries]
    db.execute("reset auto_explain.log_min_duration")
    for name in ("enable_seqscan", "enable_bitmapscan", "enable_sort"):
        db.execute(f"reset {name}")
    assert any(f"x_turn_key_vector_hnsw_m{model}_p{out['1']['proj']}" in n for n in notes)
    assert via_index == exact
    # recall through the index: k rows, all of the conversation's own context.
    rows = db.execute(
        "select s.context_id from donto.recall_by_vector(%s::vector, k => 10, context => "
        "(select iri from donto.context where context_id = %s), model => 'test-model', "
        "arms => 'vector') as r join donto.statement s using (statement_id)",
        (_vec(queries[0]), ctx)).fetchall()
    db.rollback()
    assert rows and {r[0] for r in rows} == {ctx}


def test_upgrade_from_018_moves_the_key_vectors_unchanged(db):
    """A database at migration 018 with recall keys and their vectors upgrades to head:
    the same vectors, each with its key's projection."""
    info = db.info
    name = f"donto_up019_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres",
                         autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    try:
        with psycopg.connect(host=info.host, port=info.port, user=info.user,
                             dbname=name) as conn:
            migrate.migrate(conn, upto="018")
            conn.execute("""
                insert into donto.embedding_model (name, source, dimension)
                values ('test-model', 'random', 3);
                insert into donto.document (iri) values ('test:a'), ('test:b');
                insert into donto.revision (document_id, sha256, body, body_chars)
                select document_id, sha256(iri::bytea), repeat('x', 100), 100
                from donto.document;
                insert into donto.context (iri, kind)
                values ('ctx:memory/episodic/test/a', 'recall'),
                       ('ctx:memory/episodic/test/b', 'recall');
                insert into donto.projection (revision_id, kind, strategy, params, context_id)
                select r.revision_id, 'recall', 'fixed-window', '{"window_chars": 10}',
                       c.context_id
                from donto.revision as r
                join donto.document as d using (document_id)
                join donto.context as c on c.iri = 'ctx:memory/episodic/test/' || substr(d.iri, 6);
                insert into donto.turn (revision_id, seq, turn_id, role, session, exchange,
                                        header_start, char_start, char_end)
                select r.revision_id, g, g, 'user', 1, g, 10 * g, 10 * g + 2, 10 * g + 9
                from donto.revision as r, generate_series(0, 4) as g;
                insert into donto.x_turn_key (projection_id, revision_id, turn_seq,
                                              header_start, char_start, char_end,
                                              key_text, key_tsv)
                select p.projection_id, t.revision_id, t.seq, t.header_start, t.char_start,
                       t.char_end, 'key ' || t.seq, to_tsvector('english', 'key ' || t.seq)
                from donto.turn as t join donto.projection as p using (revision_id);
                insert into donto.x_turn_key_vector (key_id, model_id, embedding)
                select k.key_id, 1, ('[' || sin(k.key_id) || ',' || cos(k.key_id) || ','
                                     || (k.key_id % 5 + 1) || ']')::vector
                from donto.x_turn_key as k order by k.key_id desc;
            """)
            before = conn.execute("select key_id, model_id, embedding::text, created_at "
                                  "from donto.x_turn_key_vector order by 1, 2").fetchall()
            conn.commit()
            assert "019-key-layout.sql" in migrate.migrate(conn)
            after = conn.execute("select key_id, model_id, embedding::text, created_at "
                                 "from donto.x_turn_key_vector order by 1, 2").fetchall()
            assert after == before and len(after) == 10
            assert conn.execute(
                "select count(*) from donto.x_turn_key_vector v join donto.x_turn_key k "
                "using (key_id) where v.projection_id = k.projection_id").fetchone()[0] == 10
            assert migrate.migrate(conn) == []  # a second run changes nothing
            # The table is append-only again (I3) and readers may read it.
            with pytest.raises(psycopg.Error, match="append-only|I3|refuse"):
                conn.execute("update donto.x_turn_key_vector set model_id = model_id")
            conn.rollback()
            assert conn.execute(
                "select has_table_privilege('donto_reader', 'donto.x_turn_key_vector', "
                "'select')").fetchone()[0]
            conn.rollback()
    finally:
        with psycopg.connect(host=info.host, port=info.port, user=info.user,
                             dbname="postgres", autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


def test_a_retracted_chunk_is_not_returned_through_the_key_arm(keyed):
    """The key arm maps a key to the chunk holding its turn; once that chunk is retracted
    the key stands for nothing (recall never returns a retracted chunk)."""
    db, model, out, rng = keyed
    ctx = out["1"]["ctx"]
    q = rng.standard_normal(DIM).astype(np.float32)
    best = _key_ranks(db, q, ctx, model, 150)[0][0]
    db.execute("select donto.retract(%s, 'test: retracted chunk')", (best,))
    db.commit()
    assert best not in {r[0] for r in _key_ranks(db, q, ctx, model, 150)}
    iri = db.execute("select iri from donto.context where context_id = %s", (ctx,)).fetchone()[0]
    db.execute("set donto.recall_vector_weight = 0")
    db.execute("set donto.recall_key_weight = 1")
    rows = db.execute(
        "select statement_id from donto.recall_by_vector(%s::vector, k => 10, context => %s, "
        "model => 'test-model', arms => 'vector')", (_vec(q), iri)).fetchall()
    db.rollback()
    assert rows and best not in {r[0] for r in rows}
