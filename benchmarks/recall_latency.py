"""Benchmark: latency of donto.recall, with and without embedding the query.

Two settings:

* the loaded database (DONTO_DSN, ``--dsn``, or the embedded cluster), e.g. the
  BEAM 100K set: N probing questions (seeded sample), each searched in its own
  conversation's context;
* ``--synthetic``: a database of its own on the same server (``donto_synth`` by
  default), built once and reused: one context of 434,000 chunks (the size of a
  BEAM-10M conversation), one of 60,000 and twenty of 500 ("many conversations
  loaded"). Chunk texts and their speaker-weighted full-text vectors are real
  BEAM dialogue windows (examples/beam/chats/100K/1 and 13, CC-BY-SA-4.0),
  repeated; their spans are virtual (consecutive 1,200-character windows of a
  revision whose body is a short placeholder) and every fourth chunk opens an
  exchange with a user turn. A chunk's vector is the real model's embedding of its
  text plus gaussian noise (0.02 per dimension, then normalised: the copies of a
  text are distinct points near it), stored under the default model's name, so
  that ``donto.recall`` (which embeds the query with the real model) runs
  unchanged; ``--vectors random`` gives random unit 384-d vectors instead (what
  databases built before this option hold; HNSW finds about a third of the true
  neighbours among them and works three times as long, BENCHMARKS.md). Statements
  and vectors are bulk-loaded with COPY; the HNSW index is built afterwards with
  maintenance_work_mem = 2GB.

For each arm it times ``donto.recall_by_vector`` with a precomputed query vector
(the database work alone) and ``donto.recall`` (which also embeds the query in
the server), and reports p50/p95 in milliseconds, measured by the client over
the unix socket, one query at a time, after an untimed pass over the same
queries (steady state). It checks that every
filtered query returned k rows, all from the asked context, and (``--synthetic``)
shows with auto_explain that the vector arm scans the HNSW index at 434K.

    python benchmarks/recall_latency.py                 # the loaded database
    python benchmarks/recall_latency.py --synthetic     # 434K-chunk context
    python benchmarks/recall_latency.py --synthetic --json
    nice -n 19 python benchmarks/recall_latency.py --layout   # build (once), then measure
    python benchmarks/recall_latency.py --layout --priority -5   # measure ahead of others (root)

``--layout`` (issue 13): two more synthetic databases, built once and kept
(``donto_layout_beam``, ``donto_layout_tenants``): a BEAM-10M-like one, 10
contexts of 43,400 chunks (434K), and many small tenants, 2,000 contexts of 250
chunks plus 5 of 40,000 (700K; ``--tenants`` and ``--tenant-chunks`` scale the
small ones down). Each query is searched in its own context. The new layout
(migration 011: per-context HNSW indexes above donto.recall_exact_max(), exact
scans below) is measured first, then today's access path on the same data in
the same run (setting donto.recall_layout = 'model' and recall_exact_max =
50,000, today's default: contexts of up to 50,000 chunks are scanned exactly
through the statements, larger ones through the per-model HNSW index, which
``--model-index`` builds; none of these contexts is larger).
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
from psycopg import conninfo, sql

from donto_pg import beam, migrate
from donto_pg import db as dbmod
from donto_pg.core.windows import recall_windows
from donto_pg.db import register_vector_if_present

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, prioritize  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "beam" / "chats" / "100K"
MODEL = "all-MiniLM-L6-v2"
DIM = 384
BIG = 434_000
# Chunk vectors (--vectors real): the model's embedding of the chunk's text plus gaussian
# noise of this standard deviation per dimension (then normalised), so that the many
# copies of a text are distinct points near it.
NOISE = 0.02
VECTOR_SOURCES = {"real": "synthetic: BEAM window embeddings + noise 0.02",
                  "random": "synthetic: random unit vectors"}
SYNTH_CONTEXTS: tuple[tuple[str, int], ...] = (
    ("10M/big", BIG), ("1M/mid", 60_000), *((f"100K/{i}", 500) for i in range(1, 21)))
ARMS = ("vector", "lexical", "hybrid")
BEAM_LIKE: tuple[tuple[str, int], ...] = tuple((f"10M/{i}", 43_400) for i in range(1, 11))


# -- the synthetic database --------------------------------------------------------------

def example_windows() -> tuple[list[str], list[str], list[str]]:
    """(chunk texts, their user-turn text, probing questions) of the bundled examples."""
    texts, users, questions = [], [], []
    for conv in ("1", "13"):
        c = next(beam.iter_beam(EXAMPLES / conv))
        body, spans = beam.format_chat(c)
        ut = [(s.char_start, s.char_end) for s in spans if s.role == "user"]
        for start, end in recall_windows(body, 1200):
            texts.append(body[start:end])
            users.append(" ".join(body[max(a, start):min(b, end)]
                                  for a, b in ut if a < end and start < b))
        questions += [q.question for q in c.questions]
    return texts, users, questions


def synth_dsn(dsn: str, dbname: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        exists = conn.execute("select 1 from pg_database where datname = %s",
                              (dbname,)).fetchone()
        if not exists:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(dbname)))
    return conninfo.make_conninfo(dsn, dbname=dbname)


def unit_vectors(n: int, rng: np.random.Generator, base: np.ndarray | None,
                 offset: int = 0) -> np.ndarray:
    """N unit vectors: random (BASE None), or row (offset + i) mod len(BASE) of BASE with
    gaussian noise (NOISE per dimension), so that repeated texts get distinct vectors near
    their text's embedding."""
    if base is None:
        vecs = rng.standard_normal((n, DIM), dtype=np.float32)
    else:
        rows = base[(offset + np.arange(n)) % len(base)]
        vecs = rows + rng.normal(0, NOISE, rows.shape).astype(np.float32)
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def base_vectors(texts: list[str], kind: str) -> np.ndarray | None:
    """The real model's embeddings of TEXTS (--vectors real), or None (random)."""
    if kind == "random":
        return None
    from donto_pg.core import encoder

    return np.asarray(encoder.encode(texts), dtype=np.float32)


def build_context(conn: psycopg.Connection, name: str, n: int, model_id: int,
                  texts: list[str], rng: np.random.Generator, log,
                  base: np.ndarray | None = None) -> bool:
    """Load one synthetic context of N chunks (skipped if present). True if built now."""
    iri = f"ctx:memory/episodic/synth/{name}"
    if conn.execute("select 1 from donto.context where iri = %s", (iri,)).fetchone():
        return False
    t0 = time.perf_counter()
    m = len(texts)
    rev = conn.execute("select donto.register_revision(%s, %s, %s)", (
        f"synth:{name}", f"synthetic conversation {name}: {n} chunks with virtual spans",
        json.dumps({"source": "synthetic", "chunks": n}))).fetchone()[0]
    doc = conn.execute("select document_id from donto.revision where revision_id = %s",
                       (rev,)).fetchone()[0]
    ctx = conn.execute("select donto.ensure_context(%s, 'recall')", (iri,)).fetchone()[0]
    proj = conn.execute(
        "insert into donto.projection (revision_id, kind, strategy, params, context_id) "
        "values (%s, 'recall', 'synthetic', %s, %s) returning projection_id",
        (rev, json.dumps({"chunks": n, "window_chars": 1200}), ctx)).fetchone()[0]
    seq = conn.execute("select pg_get_serial_sequence('donto.statement', 'statement_id')"
                       ).fetchone()[0]
    first = conn.execute("select nextval(%s)", (seq,)).fetchone()[0]
    conn.execute("select setval(%s, %s)", (seq, first + n))
    day0 = datetime.date(2024, 1, 1)

    conn.execute("create temp table _syn_stmt (statement_id bigint, subject text, "
                 "object_lit jsonb, valid_time daterange, char_start int, char_end int) "
                 "on commit drop")
    with conn.cursor().copy("copy _syn_stmt from stdin") as cp:
        for i in range(n):
            text = texts[i % m]
            d = (day0 + datetime.timedelta(days=i * 365 // n)).isoformat()
            cp.write_row((first + i, f"chunk:{rev}/synthetic/{i}",
                          json.dumps({"v": text, "dt": d}), f"[{d},{d}]",
                          i * 1200, i * 1200 + len(text)))
    conn.execute(
        "insert into donto.statement (statement_id, subject, predicate, object_lit, context_id, "
        "valid_time, document_id, derived_from_revision, char_start, char_end) "
        "overriding system value select statement_id, subject, 'mem:episodic/chunk', "
        "object_lit, %s, valid_time, %s, %s, char_start, char_end from _syn_stmt "
        "order by statement_id", (ctx, doc, rev))
    conn.execute(
        "insert into donto.x_memory_record (statement_id, projection_id, revision_id, "
        "chunk_index, char_start, char_end) "
        "select s.statement_id, %s, %s, (s.statement_id - %s)::int, s.char_start, s.char_end "
        "from _syn_stmt s order by s.statement_id", (proj, rev, first))
    conn.execute(
        "insert into donto.x_memory_lexical (statement_id, projection_id, tsv) "
        "select s.statement_id, %s, t.tsv "
        "from _syn_stmt s join _syn_tsv t on t.j = (s.statement_id - %s) %% %s "
        "order by s.statement_id", (proj, first, m))
    # an exchange every 4 chunks: a user turn opens it, the assistant's reply fills it
    conn.execute(
        "insert into donto.turn (revision_id, seq, turn_id, role, session, exchange, "
        "time_anchor, header_start, char_start, char_end) "
        "select %(rev)s, 2 * x + r, 2 * x + r, case r when 0 then 'user' else 'assistant' end, "
        "x / 50 + 1, x, %(day0)s::date + (x * 4 * 365 / %(n)s)::int, "
        "case r when 0 then x * 4800 else x * 4800 + 302 end, "
        "case r when 0 then x * 4800 + 12 else x * 4800 + 318 end, "
        "case r when 0 then x * 4800 + 300 else x * 4800 + 4798 end "
        "from generate_series(0, (%(n)s + 3) / 4 - 1) as x, generate_series(0, 1) as r",
        {"rev": rev, "n": n, "day0": day0})
    with conn.cursor().copy("copy donto.embedding (statement_id, model_id, embedding) "
                            "from stdin with (format binary)") as cp:
        cp.set_types(["int8", "int4", "vector"])
        for lo in range(0, n, 20_000):
            hi = min(n, lo + 20_000)
            vecs = unit_vectors(hi - lo, rng, base, lo)
            for i, v in zip(range(lo, hi), vecs, strict=True):
                cp.write_row((first + i, model_id, v))
    conn.commit()
    log(f"  built {iri}: {n:,} chunks in {time.perf_counter() - t0:.0f} s")
    return True


def build_synthetic(dsn: str, log, contexts: tuple[tuple[str, int], ...] = SYNTH_CONTEXTS,
                    model_index: bool = True, vectors: str = "real") -> None:
    texts, users, _ = example_windows()
    with psycopg.connect(dsn) as conn:
        register_vector_if_present(conn)
        migrate.migrate(conn)
        register_vector_if_present(conn)
        source = VECTOR_SOURCES[vectors]
        model_id = conn.execute("select donto.ensure_embedding_model(%s, %s, %s)",
                                (MODEL, source, DIM)).fetchone()[0]
        built_with = conn.execute("select source from donto.embedding_model "
                                  "where model_id = %s", (model_id,)).fetchone()[0]
        if built_with != source:
            raise SystemExit(f"{conn.info.dbname} holds vectors of another kind ({built_with!r})"
                             f": drop that database (dropdb) or pass --vectors "
                             f"{'random' if vectors == 'real' else 'real'}")
        conn.commit()
        missing = [name for name, _ in contexts if not conn.execute(
            "select 1 from donto.context where iri = %s",
            (f"ctx:memory/episodic/synth/{name}",)).fetchone()]
        base = base_vectors(texts, vectors) if missing else None
        conn.execute("create temp table _syn_tsv (j int primary key, tsv tsvector)")
        conn.cursor().executemany(
            "insert into _syn_tsv values (%s, "
            "setweight(to_tsvector('english', %s), 'D') "
            "|| setweight(to_tsvector('english', %s), 'A'))",
            [(j, t, u) for j, (t, u) in enumerate(zip(texts, users, strict=True))])
        conn.commit()
        rng = np.random.default_rng(20240315)
        built = [build_context(conn, name, n, model_id, texts, rng, log, base)
                 for name, n in contexts]
        if not model_index:
            t0 = time.perf_counter()
            conn.execute("set maintenance_work_mem = '2GB'")
            made = conn.execute("select donto.ensure_context_indexes(%s::integer)",
                                (model_id,)).fetchone()[0]
            conn.commit()
            log(f"  built {made} per-context HNSW indexes in {time.perf_counter() - t0:.0f} s")
            if any(built) or made:
                conn.autocommit = True
                for t in ("embedding", "statement", "x_memory_record", "x_memory_lexical",
                          "turn"):
                    conn.execute(f"vacuum analyze donto.{t}")
            return
        index = f"embedding_hnsw_m{model_id}"
        has_index = conn.execute("select 1 from pg_indexes where indexname = %s",
                                 (index,)).fetchone()
        if any(built) or not has_index:
            t0 = time.perf_counter()
            conn.execute("set maintenance_work_mem = '2GB'")
            conn.execute("select donto.ensure_embedding_index(%s)", (model_id,))
            conn.commit()
            log(f"  built HNSW index {index} in {time.perf_counter() - t0:.0f} s")
            conn.autocommit = True
            conn.execute("vacuum analyze donto.embedding")
            conn.execute("vacuum analyze donto.statement")
            conn.execute("vacuum analyze donto.x_memory_record")
            conn.execute("vacuum analyze donto.x_memory_lexical")
            conn.execute("vacuum analyze donto.turn")


def add_keys(dsn: str, log, vectors: str = "real") -> int:
    """Give every synthetic context without recall keys one key per user turn (--keys).

    A key's text is a real BEAM user turn (the bundled examples, repeated), its full-text
    vector that text's, its vector that text's embedding with noise (--vectors real) or a
    random unit vector; it maps to the chunk that opens
    its exchange. Then the key indexes of the large projections are built
    (donto.ensure_context_indexes). Idempotent: contexts that have keys are left alone.
    Returns the keys added.
    """
    users = [u for u in example_windows()[1] if u.strip()]
    added = 0
    with psycopg.connect(dsn) as conn:
        register_vector_if_present(conn)
        model_id = conn.execute("select donto.embedding_model_id(%s)", (MODEL,)).fetchone()[0]
        projs = conn.execute(
            "select p.projection_id, p.revision_id from donto.projection p "
            "where p.kind = 'recall' and p.strategy = 'synthetic' and not exists ("
            "select 1 from donto.x_turn_key k where k.projection_id = p.projection_id) "
            "order by p.projection_id").fetchall()
        if not projs:
            return 0
        conn.execute("create temp table _syn_users (j int primary key, t text)")
        conn.cursor().executemany("insert into _syn_users values (%s, %s)",
                                  list(enumerate(users)))
        rng = np.random.default_rng(20241202)
        base = base_vectors(users, vectors)
        for proj, rev in projs:
            t0 = time.perf_counter()
            ids = [r[0] for r in conn.execute(
                "insert into donto.x_turn_key (projection_id, revision_id, turn_seq, "
                "header_start, char_start, char_end, key_text, key_tsv) "
                "select %s, t.revision_id, t.seq, t.header_start, t.char_start, t.char_end, "
                "u.t, to_tsvector('english', u.t) from donto.turn t "
                "join _syn_users u on u.j = t.exchange %% %s "
                "where t.revision_id = %s and t.role = 'user' order by t.seq "
                "returning key_id", (proj, len(users), rev)).fetchall()]
            # (the keys come back in turn order: key i is user text i mod len(users))
            with conn.cursor().copy("copy donto.x_turn_key_vector (key_id, model_id, embedding) "
                                    "from stdin with (format binary)") as cp:
                cp.set_types(["int8", "int4", "vector"])
                vecs = unit_vectors(len(ids), rng, base)
                for key_id, v in zip(ids, vecs, strict=True):
                    cp.write_row((key_id, model_id, v))
            conn.commit()
            added += len(ids)
            log(f"  keys for projection {proj}: {len(ids):,} in {time.perf_counter() - t0:.0f} s")
        t0 = time.perf_counter()
        conn.execute("set maintenance_work_mem = '2GB'")
        made = conn.execute("select donto.ensure_context_indexes(%s::integer)",
                            (model_id,)).fetchone()[0]
        conn.commit()
        log(f"  built {made} key indexes in {time.perf_counter() - t0:.0f} s")
        conn.autocommit = True
        conn.execute("vacuum analyze donto.x_turn_key")
        conn.execute("vacuum analyze donto.x_turn_key_vector")
    return added


# -- timing --------------------------------------------------------------------------------

def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


def time_calls(conn: psycopg.Connection, calls: list[tuple[str, tuple]], k: int,
               ctx_of: list[str]) -> dict[str, Any]:
    """Run CALLS one at a time; latency percentiles, rows returned, rows of other contexts."""
    ms, short, foreign = [], 0, 0
    for (query, params), ctx in zip(calls, ctx_of, strict=True):
        t0 = time.perf_counter()
        rows = conn.execute(query, params).fetchall()
        ms.append(1000 * (time.perf_counter() - t0))
        conn.commit()
        short += len(rows) < k
        if rows:
            foreign += conn.execute(
                "select count(*) from donto.statement s join donto.context c using (context_id) "
                "where s.statement_id = any(%s) and c.iri <> %s",
                ([r[0] for r in rows], ctx)).fetchone()[0]
            conn.commit()
    return {"p50_ms": pct(ms, 50), "p95_ms": pct(ms, 95), "mean_ms": round(statistics.mean(ms), 2),
            "n": len(ms), "queries_short_of_k": short, "rows_from_other_contexts": foreign}


def measure(conn: psycopg.Connection, items: list[tuple[str, str]], k: int,
            warmup: int = 3) -> dict[str, Any]:
    """ITEMS: (query text, context IRI). Times every arm, by vector and with embedding.

    Steady state: every call list runs once untimed first (the pages it needs are then
    in shared buffers or the OS cache), then once timed.
    """
    vecs = []
    embed_ms = []
    for q, _ in items:
        t0 = time.perf_counter()
        vecs.append(conn.execute("select donto.embed_query(%s)", (q,)).fetchone()[0])
        embed_ms.append(1000 * (time.perf_counter() - t0))
        conn.commit()
    out: dict[str, Any] = {"embed_query": {"p50_ms": pct(embed_ms[warmup:] or embed_ms, 50),
                                           "p95_ms": pct(embed_ms[warmup:] or embed_ms, 95)}}
    ctxs = [c for _, c in items]
    for arm in ARMS:
        by_vec = [("select statement_id from donto.recall_by_vector(%s, %s, k => %s, "
                   "context => %s, arms => %s)", (v, q, k, c, arm))
                  for v, (q, c) in zip(vecs, items, strict=True)]
        with_embed = [("select statement_id from donto.recall(%s, k => %s, context => %s, "
                       "arms => %s)", (q, k, c, arm)) for q, c in items]
        for label, calls in ((f"{arm} (vector given)", by_vec),
                             (f"{arm} (recall, embeds)", with_embed)):
            if arm == "lexical" and "embeds" in label:
                continue  # the lexical arm never embeds
            time_calls(conn, calls, k, ctxs)  # warm-up
            out[label] = time_calls(conn, calls, k, ctxs)
    return out


def explain_vector_arm(conn: psycopg.Connection, vec, q: str, ctx: str, k: int) -> list[str]:
    """The plan of the vector arm inside recall_by_vector, from auto_explain (superuser)."""
    notes: list[str] = []
    conn.add_notice_handler(lambda d: notes.append(d.message_primary or ""))
    conn.execute("load 'auto_explain'")
    for setting, value in (("log_min_duration", "0"), ("log_nested_statements", "on"),
                           ("log_level", "notice"), ("log_analyze", "on"),
                           ("log_timing", "off")):
        conn.execute(f"set auto_explain.{setting} = {value}")
    conn.execute("select statement_id from donto.recall_by_vector(%s, %s, k => %s, "
                 "context => %s, arms => 'vector')", (vec, q, k, ctx)).fetchall()
    conn.execute("set auto_explain.log_min_duration = -1")
    conn.commit()
    plans = [n for n in notes if "embedding" in n and "<=>" in n]
    lines = plans[-1].splitlines() if plans else notes
    return [re.sub(r"'\[[-0-9e.,]+\]'", "'[...]'", line) for line in lines]


def layout_items(sizes: dict[str, int], qs: list[str], n: int, seed: int
                 ) -> dict[str, list[tuple[str, str]]]:
    """Query sets per context class: each query in its own context (round robin over the
    large contexts, one sampled small context per query)."""
    rnd = random.Random(seed)
    out: dict[str, list[tuple[str, str]]] = {}
    for label, ctxs in (("large", sorted(c for c, k in sizes.items() if k > 10_000)),
                        ("small", sorted(c for c, k in sizes.items() if k <= 10_000))):
        if not ctxs:
            continue
        picked = ctxs if len(ctxs) <= n else rnd.sample(ctxs, n)
        out[label] = [(qs[i % len(qs)], picked[i % len(picked)]) for i in range(n)]
    return out


def measure_layout(dsn: str, name: str, contexts: tuple[tuple[str, int], ...], qs: list[str],
                   args, log) -> dict[str, Any]:
    """Build (once) and measure one --layout database: new layout, then today's."""
    log(f"database {name}: building what is missing")
    build_synthetic(dsn, log, contexts, model_index=False, vectors=args.vectors)
    if args.keys:
        log(f"  recall keys added: {add_keys(dsn, log, args.vectors):,}")
    out: dict[str, Any] = {"load_before": machine()["loadavg"]}
    with dbmod.connect(dsn) as conn:
        prioritize(args.priority, conn)
        sizes = dict(conn.execute(
            "select c.iri, count(*) from donto.statement s join donto.context c "
            "using (context_id) where s.predicate = 'mem:episodic/chunk' "
            "group by c.iri").fetchall())
        conn.commit()
        out["contexts"] = len(sizes)
        out["chunks_total"] = sum(sizes.values())
        sets = layout_items(sizes, qs, args.n, args.seed)
        for label, items in sets.items():
            sz = sorted({sizes[c] for _, c in items})
            log(f"  new layout, {label} contexts ({sz} chunks)")
            out[f"new layout, {label} contexts"] = measure(conn, items, args.k)
            # The same queries with other settings: without the key arms (what the keys
            # cost), and each --also NAME=VALUE.
            variants = (["recall_key_weight=0"] if args.keys else []) + args.also
            for item in variants:
                pairs = [p.partition("=")[::2] for p in item.split(",")]
                for name, value in pairs:
                    conn.execute("select set_config(%s, %s, false)", (f"donto.{name}", value))
                conn.commit()
                log(f"  new layout, {label} contexts, {item}")
                out[f"new layout, {label} contexts, {item}"] = measure(conn, items, args.k)
                for name, _ in pairs:
                    conn.execute(sql.SQL("reset {}").format(sql.Identifier("donto", name)))
                conn.commit()
        vec = conn.execute("select donto.embed_query(%s)", (qs[0],)).fetchone()[0]
        conn.commit()
        big = sets.get("large", sets.get("small"))[0][1]
        out["new layout vector arm plan"] = explain_vector_arm(conn, vec, qs[0], big, args.k)
    if args.model_index:
        build_synthetic(dsn, log, contexts, model_index=True, vectors=args.vectors)
    with dbmod.connect(dsn) as conn:
        prioritize(args.priority, conn)
        conn.execute("set donto.recall_layout = 'model'")
        conn.execute("set donto.recall_exact_max = 50000")
        conn.commit()
        for label, items in sets.items():
            log(f"  today's layout, {label} contexts")
            out[f"today's layout, {label} contexts"] = measure(conn, items, args.k)
    out["load_after"] = machine()["loadavg"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: DONTO_DSN or embedded)")
    ap.add_argument("--synthetic", action="store_true",
                    help="build (once) and measure the synthetic 434K-chunk context")
    ap.add_argument("--synthetic-db", default="donto_synth", help="its database name")
    ap.add_argument("--layout", action="store_true",
                    help="build (once) and measure the BEAM-10M-like and many-tenant databases")
    ap.add_argument("--which", choices=("beam", "tenants", "both"), default="both")
    ap.add_argument("--tenants", type=int, default=2000, help="small contexts (--layout)")
    ap.add_argument("--tenant-chunks", type=int, default=250)
    ap.add_argument("--vectors", choices=("real", "random"), default="real",
                    help="chunk and key vectors of a database built now: the model's "
                         "embedding of the chunk's (key's) text plus noise (default), or "
                         "random unit vectors (on which HNSW finds about a third of the true "
                         "neighbours, BENCHMARKS.md)")
    ap.add_argument("--keys", action="store_true",
                    help="--layout: give the contexts recall keys (one per user turn, vectors "
                         "as --vectors says), so that the key arm searches as many keys as a "
                         "real conversation of that size has (kept once added), and measure "
                         "the new layout with the key arms off too")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=VALUE",
                    help="--layout: measure the new layout once more with these recall "
                         "settings (repeatable; NAME=VALUE[,NAME=VALUE]), e.g. "
                         "recall_pool_max_index=100")
    ap.add_argument("--model-index", action="store_true",
                    help="--layout: also build the per-model HNSW index over every context")
    ap.add_argument("-n", type=int, default=40, help="queries per measurement")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--priority", type=int, default=None,
                    help="--layout: nice value (and autogroup nice) of this process and of "
                         "its server backends while measuring, e.g. -5 (root)")
    args = ap.parse_args(argv)
    prioritize(args.priority)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    dsn = dbmod.resolve_dsn(args.dsn)
    report: dict[str, Any] = {"k": args.k, "n": args.n}
    if args.layout:
        _, _, questions = example_windows()
        qs = random.Random(args.seed).sample(questions, len(questions))
        report["machine"] = machine()
        tenants = (*((f"t/{i}", args.tenant_chunks) for i in range(1, args.tenants + 1)),
                   *((f"t/big{i}", 40_000) for i in range(1, 6)))
        for which, contexts in (("beam", BEAM_LIKE), ("tenants", tenants)):
            if args.which in (which, "both"):
                name = f"donto_layout_{which}"
                report[name] = measure_layout(synth_dsn(dsn, name), name, contexts, qs, args, log)
                log(json.dumps(report[name], indent=1))
        print(json.dumps(report, indent=2))
        return 0
    if args.synthetic:
        dsn = synth_dsn(dsn, args.synthetic_db)
        log(f"synthetic database {args.synthetic_db}: building what is missing")
        build_synthetic(dsn, log, vectors=args.vectors)
        _, _, questions = example_windows()
        rnd = random.Random(args.seed)
        qs = rnd.sample(questions, min(args.n, len(questions)))
        with dbmod.connect(dsn) as conn:
            sizes = dict(conn.execute(
                "select c.iri, count(*) from donto.statement s join donto.context c "
                "using (context_id) where s.predicate = 'mem:episodic/chunk' "
                "group by c.iri").fetchall())
            conn.commit()
            report["contexts"] = len(sizes)
            report["chunks_total"] = sum(sizes.values())
            big = "ctx:memory/episodic/synth/10M/big"
            mid = "ctx:memory/episodic/synth/1M/mid"
            small = "ctx:memory/episodic/synth/100K/7"
            log(f"measuring {big} ({sizes[big]:,} chunks)")
            report["synthetic 434K context"] = measure(conn, [(q, big) for q in qs], args.k)
            log(f"measuring {mid} ({sizes[mid]:,} chunks) and {small} ({sizes[small]:,})")
            report["synthetic 60K context"] = measure(conn, [(q, mid) for q in qs[:20]], args.k)
            report["synthetic 500-chunk context"] = measure(conn, [(q, small) for q in qs[:20]],
                                                            args.k)
            vec = conn.execute("select donto.embed_query(%s)", (qs[0],)).fetchone()[0]
            conn.commit()
            report["vector arm plan at 434K"] = explain_vector_arm(conn, vec, qs[0], big, args.k)
    else:
        with dbmod.connect(dsn) as conn:
            rows = conn.execute(
                "select q.question, donto.recall_context_iri(d.iri) from donto.probe_question q "
                "join donto.document d using (document_id) order by q.question_id").fetchall()
            conn.commit()
            if not rows:
                raise SystemExit("no probing questions: load BEAM first (donto-pg load-beam)")
            items = random.Random(args.seed).sample(rows, min(args.n, len(rows)))
            report["contexts"] = len({c for _, c in rows})
            report["chunks_total"] = conn.execute(
                "select count(*) from donto.x_memory_record").fetchone()[0]
            conn.commit()
            report["loaded database"] = measure(conn, items, args.k)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"k = {args.k}; {report['contexts']} contexts, {report['chunks_total']:,} chunks")
    for key, block in report.items():
        if not isinstance(block, dict):
            continue
        print(f"\n{key}")
        print(f"  {'':34} {'p50 ms':>8} {'p95 ms':>8}  rows<k  foreign")
        for label, m in block.items():
            short, foreign = m.get("queries_short_of_k", ""), m.get("rows_from_other_contexts", "")
            print(f"  {label:34} {m['p50_ms']:8.1f} {m['p95_ms']:8.1f}  {short:>6}  {foreign:>7}")
    plan = report.get("vector arm plan at 434K")
    if plan:
        print("\nvector arm plan at 434K (auto_explain):")
        print("\n".join("  " + line for line in plan))
    return 0


if __name__ == "__main__":
    sys.exit(main())
