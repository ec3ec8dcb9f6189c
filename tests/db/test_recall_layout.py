"""Recall's vector layout (migration 011): each context searched through its own vectors.

Many contexts are loaded with projection A and random unit vectors; contexts
above donto.recall_exact_max() get an HNSW index of their own
(donto.ensure_context_indexes), smaller ones are scanned exactly. Every query,
each in its own context, returns k rows of that context; the exact path equals
a brute-force top-k; retractions and as_of hold on the per-context index; and an
upgrade from the 007 schema with vectors in it moves them over unchanged.
"""

from __future__ import annotations

import uuid

import numpy as np
import psycopg
import pytest

from donto_pg import migrate

DIM = 8
K = 10
SMALL, SMALL_CHUNKS = 24, 30
LARGE, LARGE_CHUNKS = 3, 400
EXACT_MAX = 100


def _load_context(conn: psycopg.Connection, name: str, chunks: int, model_id: int,
                  rng: np.random.Generator) -> tuple[str, dict[int, np.ndarray]]:
    """A conversation of CHUNKS 100-char lines, projected into windows of one line each,
    with a random unit vector per chunk (inserted as the owner; the trigger sets the
    context). Returns its context IRI and {statement_id: vector}."""
    body = "".join(f"[user] line {i:05d} of {name} ".ljust(99, "x") + "\n"
                   for i in range(chunks))
    rev = conn.execute("select donto.register_revision(%s, %s)",
                       (f"test:{name}", body)).fetchone()[0]
    assert conn.execute("select donto.project_recall(%s, 100)", (rev,)).fetchone()[0] == chunks
    ids = [r[0] for r in conn.execute(
        "select statement_id from donto.x_memory_record where revision_id = %s "
        "order by chunk_index", (rev,)).fetchall()]
    vecs = rng.standard_normal((chunks, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    with conn.cursor().copy("copy donto.embedding (statement_id, model_id, embedding) "
                            "from stdin") as cp:
        for sid, v in zip(ids, vecs, strict=True):
            cp.write_row((sid, model_id, "[" + ",".join(map(str, v.tolist())) + "]"))
    ctx = conn.execute("select donto.recall_context_iri(%s)", (f"test:{name}",)).fetchone()[0]
    return ctx, dict(zip(ids, vecs, strict=True))


def _top_k(vectors: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[int]:
    ids = list(vectors)
    m = np.stack([vectors[i] for i in ids])
    d = 1 - (m @ q) / (np.linalg.norm(m, axis=1) * np.linalg.norm(q))
    return [ids[j] for j in sorted(range(len(ids)), key=lambda j: (d[j], ids[j]))[:k]]


def _recall(conn: psycopg.Connection, q: np.ndarray, ctx: str, k: int = K,
            as_of=None) -> list[int]:
    return [r[0] for r in conn.execute(
        "select statement_id from donto.recall_by_vector(%s::vector, k => %s, context => %s, "
        "as_of => %s, model => 'test-model', arms => 'vector')",
        ("[" + ",".join(map(str, q.tolist())) + "]", k, ctx, as_of)).fetchall()]


@pytest.fixture
def loaded(db):
    """SMALL contexts of SMALL_CHUNKS and LARGE of LARGE_CHUNKS, indexes built."""
    rng = np.random.default_rng(11)
    db.execute(f"set donto.recall_exact_max = {EXACT_MAX}")
    db.execute("set donto.recall_unit = 'chunk'")
    model_id = db.execute("select donto.ensure_embedding_model('test-model', 'random', %s)",
                          (DIM,)).fetchone()[0]
    contexts = {}
    for i in range(SMALL):
        contexts[f"s{i}"] = _load_context(db, f"s{i}", SMALL_CHUNKS, model_id, rng)
    for i in range(LARGE):
        contexts[f"L{i}"] = _load_context(db, f"L{i}", LARGE_CHUNKS, model_id, rng)
    db.execute("select donto.ensure_embedding_index(%s)", (model_id,))
    db.commit()
    return db, model_id, contexts, rng


def test_vectors_carry_their_statements_context(loaded):
    db, model_id, contexts, _ = loaded
    assert db.execute("select count(*) from donto.embedding e join donto.statement s "
                      "using (statement_id) where e.context_id <> s.context_id").fetchone()[0] == 0
    assert db.execute("select count(*) from donto.embedding").fetchone()[0] == \
        SMALL * SMALL_CHUNKS + LARGE * LARGE_CHUNKS


def test_large_contexts_get_an_index_of_their_own_once(loaded):
    db, model_id, contexts, _ = loaded
    own = {r[0] for r in db.execute(
        "select indexname from pg_indexes where schemaname = 'donto' "
        "and indexname like %s", (f"embedding_hnsw_m{model_id}_c%",)).fetchall()}
    large_ids = {db.execute("select context_id from donto.context where iri = %s",
                            (contexts[f"L{i}"][0],)).fetchone()[0] for i in range(LARGE)}
    assert own == {f"embedding_hnsw_m{model_id}_c{c}" for c in large_ids}
    assert db.execute("select donto.ensure_context_indexes(%s)", (model_id,)).fetchone()[0] == 0


def test_every_context_returns_k_rows_of_its_own(loaded):
    db, model_id, contexts, rng = loaded
    for name, (ctx, vectors) in contexts.items():
        for _ in range(3):
            q = rng.standard_normal(DIM).astype(np.float32)
            got = _recall(db, q, ctx)
            assert len(got) == K, name
            assert set(got) <= set(vectors), f"{name}: rows of another context"
            exact = _top_k(vectors, q, K)
            if name.startswith("s"):  # scanned exactly
                assert got == exact, name
            else:  # its own HNSW index: approximate, but on 400 vectors nearly exact
                assert len(set(got) & set(exact)) >= K - 2, name
        db.commit()


def test_today_s_layout_setting_answers_the_same_contexts(loaded):
    """donto.recall_layout = 'model' (the per-model index, post-filtered) stays correct."""
    db, model_id, contexts, rng = loaded
    db.execute("set donto.recall_layout = 'model'")
    for name in ("s0", "L0"):
        ctx, vectors = contexts[name]
        got = _recall(db, rng.standard_normal(DIM).astype(np.float32), ctx)
        assert len(got) == K and set(got) <= set(vectors)
    db.execute("set donto.recall_layout = 'partitioned'")
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="recall_layout"):
        _recall(db, rng.standard_normal(DIM).astype(np.float32), contexts["s0"][0])
    db.rollback()


def test_a_context_grown_past_the_bound_before_its_index_is_built(loaded):
    """Until ensure_context_indexes runs, a large context is searched through the model's
    index over every context: still k rows of its own."""
    db, model_id, contexts, rng = loaded
    db.execute(f"set donto.recall_exact_max = {EXACT_MAX}")
    ctx, vectors = _load_context(db, "late", LARGE_CHUNKS, model_id, rng)
    db.commit()
    cid = db.execute("select context_id from donto.context where iri = %s", (ctx,)).fetchone()[0]
    assert db.execute("select to_regclass(%s)",
                      (f"donto.embedding_hnsw_m{model_id}_c{cid}",)).fetchone()[0] is None
    for _ in range(3):
        got = _recall(db, rng.standard_normal(DIM).astype(np.float32), ctx)
        assert len(got) == K and set(got) <= set(vectors)
    assert db.execute("select donto.ensure_context_indexes(%s)", (model_id,)).fetchone()[0] == 1
    db.commit()
    got = _recall(db, rng.standard_normal(DIM).astype(np.float32), ctx)
    assert len(got) == K and set(got) <= set(vectors)


def test_retraction_and_as_of_on_a_context_index(loaded):
    db, model_id, contexts, _ = loaded
    ctx, vectors = contexts["L1"]
    sid = next(iter(vectors))
    q = vectors[sid]
    assert _recall(db, q, ctx)[0] == sid
    before = db.execute("select clock_timestamp()").fetchone()[0]
    db.commit()
    db.execute("select donto.retract(%s, 'test: retracted')", (sid,))
    db.commit()
    now = _recall(db, q, ctx)
    assert sid not in now and len(now) == K
    assert _recall(db, q, ctx, as_of=before)[0] == sid


def test_upgrade_from_007_moves_the_vectors_unchanged(db):
    """A database at migration 007 with vectors (two contexts, the per-model HNSW index)
    upgrades to head: the same vectors, each with its statement's context, the index
    rebuilt, and recall works in both contexts."""
    info = db.info
    name = f"donto_up011_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres",
                         autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    try:
        with psycopg.connect(host=info.host, port=info.port, user=info.user,
                             dbname=name) as conn:
            migrate.migrate(conn, upto="007")
            conn.execute("""
                insert into donto.embedding_model (name, source, dimension)
                values ('test-model', 'random', 3);
                insert into donto.document (iri) values ('test:a'), ('test:b');
                insert into donto.revision (document_id, sha256, body, body_chars)
                select document_id, sha256(iri::bytea), 'body of ' || iri, 10
                from donto.document;
                insert into donto.context (iri, kind)
                values ('ctx:memory/episodic/test/a', 'recall'),
                       ('ctx:memory/episodic/test/b', 'recall');
                insert into donto.projection (revision_id, kind, strategy, params, context_id)
                select r.revision_id, 'recall', 'fixed-window', '{"window_chars": 1}',
                       c.context_id
                from donto.revision as r
                join donto.document as d using (document_id)
                join donto.context as c on c.iri = 'ctx:memory/episodic/test/' || substr(d.iri, 6);
                insert into donto.statement (subject, predicate, object_lit, context_id,
                                             document_id, derived_from_revision,
                                             char_start, char_end)
                select 'chunk:' || p.revision_id || '/' || g, 'mem:episodic/chunk',
                       jsonb_build_object('v', 'chunk ' || g), p.context_id,
                       r.document_id, p.revision_id, g, g + 1
                from donto.projection as p join donto.revision as r using (revision_id),
                     generate_series(0, 19) as g;
                insert into donto.x_memory_record (statement_id, projection_id, revision_id,
                                                   chunk_index, char_start, char_end)
                select s.statement_id, p.projection_id, p.revision_id, s.char_start,
                       s.char_start, s.char_end
                from donto.statement as s join donto.projection as p
                     on p.revision_id = s.derived_from_revision;
                insert into donto.embedding (statement_id, model_id, embedding)
                select s.statement_id, 1,
                       ('[' || sin(s.statement_id) || ',' || cos(s.statement_id) || ','
                        || (s.statement_id % 7 + 1) || ']')::vector
                from donto.statement as s order by s.statement_id desc;
                create index embedding_hnsw_m1 on donto.embedding using hnsw
                    ((embedding::vector(3)) vector_cosine_ops) where model_id = 1;
            """)
            before = conn.execute("select statement_id, model_id, embedding::text, created_at "
                                  "from donto.embedding order by 1, 2").fetchall()
            conn.commit()
            assert "011-recall-layout.sql" in migrate.migrate(conn)
            after = conn.execute("select statement_id, model_id, embedding::text, created_at "
                                 "from donto.embedding order by 1, 2").fetchall()
            assert after == before and len(after) == 40
            assert conn.execute(
                "select count(*) from donto.embedding e join donto.statement s "
                "using (statement_id) where e.context_id = s.context_id").fetchone()[0] == 40
            indexes = dict(conn.execute(
                "select indexname, indexdef from pg_indexes where tablename = 'embedding'"
            ).fetchall())
            assert "embedding_hnsw_m1" in indexes and "embedding_context_idx" in indexes
            assert migrate.migrate(conn) == []  # a second run changes nothing
            conn.execute("set donto.recall_exact_max = 10")
            conn.execute("select donto.ensure_embedding_index(1)")
            for ctx in ("a", "b"):
                rows = conn.execute(
                    "select s.context_id, c.iri from donto.recall_by_vector('[1,0,1]', k => 5, "
                    "context => %s, model => 'test-model', arms => 'vector') as r "
                    "join donto.statement s using (statement_id) "
                    "join donto.context c using (context_id)",
                    (f"ctx:memory/episodic/test/{ctx}",)).fetchall()
                assert len(rows) == 5 and {r[1] for r in rows} == {
                    f"ctx:memory/episodic/test/{ctx}"}
            conn.rollback()
    finally:
        with psycopg.connect(host=info.host, port=info.port, user=info.user,
                             dbname="postgres", autocommit=True) as admin:
            admin.execute(f'drop database if exists "{name}" with (force)')


WORDS = ("berlin flat rent deadline budget garden recipe lasagna database frontend framework "
         "invoice holiday train ticket museum concert guitar lesson doctor appointment "
         "marathon training knee coffee bakery novel chapter editor").split()
LEXICAL_QUERIES = ["when is the deadline for the invoice", "my guitar lesson and the concert",
                   "knee pain after marathon training", "rent for the flat in berlin",
                   "which framework for the frontend database"]


def test_large_contexts_get_a_full_text_index_of_their_own(db):
    """Above donto.recall_lexical_exact_max chunks the lexical arm is budgeted; once
    ensure_context_indexes gave the context's projection its own GIN index, the arm reads
    it and answers exactly as through the index over every context."""
    rng = np.random.default_rng(5)
    db.execute("set donto.recall_lexical_exact_max = 100")
    model_id = db.execute("select donto.ensure_embedding_model('test-model', 'random', %s)",
                          (DIM,)).fetchone()[0]
    revs = {}
    for name, n in (("big", 300), ("other", 300), ("tiny", 40)):
        body = "".join(("[user] " + " ".join(rng.choice(WORDS, size=12)))[:98] + "\n"
                       for _ in range(n))
        revs[name] = db.execute("select donto.register_revision(%s, %s)",
                                (f"test:{name}", body)).fetchone()[0]
        assert db.execute("select donto.project_recall(%s, 100)",
                          (revs[name],)).fetchone()[0] == n
    db.commit()
    db.autocommit = True
    db.execute("analyze donto.x_memory_lexical")
    db.autocommit = False
    ctx = "ctx:memory/episodic/test/big"

    def lexical() -> list[list[tuple]]:
        out = [db.execute("select statement_id, score, lexical_rank from donto.recall_by_vector("
                          "null, %s, k => 10, context => %s, arms => 'lexical')",
                          (q, ctx)).fetchall() for q in LEXICAL_QUERIES]
        db.commit()
        return out

    before = lexical()
    assert all(len(rows) == 10 for rows in before)
    # one index per projection of a context above the bound, none for the small one
    assert db.execute("select donto.ensure_context_indexes(%s)", (model_id,)).fetchone()[0] == 2
    assert db.execute("select donto.ensure_context_indexes(%s)", (model_id,)).fetchone()[0] == 0
    projs = {name: db.execute("select projection_id from donto.projection "
                              "where revision_id = %s", (rev,)).fetchone()[0]
             for name, rev in revs.items()}
    have = {r[0] for r in db.execute(
        "select indexname from pg_indexes where schemaname = 'donto' "
        "and indexname like 'x_memory_lexical_tsv_p%'").fetchall()}
    assert have == {f"x_memory_lexical_tsv_p{projs[n]}" for n in ("big", "other")}
    db.commit()
    assert lexical() == before
    own = db.execute("select statement_id from donto.x_memory_record "
                     "where projection_id = %s", (projs["big"],)).fetchall()
    assert {r[0] for rows in before for r in rows} <= {r[0] for r in own}


def test_a_context_s_projections_are_found_by_index(loaded):
    """Recall looks up the searched context's projections on every call: by index
    (migration 020), so that the lookup does not read every context's projections."""
    db, _, contexts, _ = loaded
    ctx = db.execute("select context_id from donto.context where iri = %s",
                     (contexts["s3"][0],)).fetchone()[0]
    db.execute("set enable_seqscan = off")
    plan = db.execute("explain (format json) select p.projection_id from donto.projection p "
                      "where p.kind = 'recall' and p.context_id = %s", (ctx,)).fetchone()[0]
    db.rollback()
    assert "projection_context_idx" in str(plan)
