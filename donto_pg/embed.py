"""Embed recall chunks that have no vector yet for a model (resumable): the client that
stores vectors in the database (``donto-pg embed``). The vectors themselves come from
:mod:`donto_pg.core.encoder`, the in-process sentence-transformers model that the
server's ``donto.embed_query`` uses too.

Pages of pending chunks are embedded in length-sorted batches (less padding)
and written by binary COPY into a staging table, then moved into
donto.embedding by donto.ingest_embeddings in the page's own transaction.
Killing the process loses at most the page in flight; running again finishes
the rest, with no duplicate and no missing vector (the primary key is
(statement_id, model_id) and ingestion skips what exists).
"""

from __future__ import annotations

import hashlib
import sys
from dataclasses import dataclass

import psycopg

from donto_pg.core import encoder
from donto_pg.db import register_vector_if_present
from donto_pg.errors import InputError

# The chunks without a vector for the model that recall can read: a retracted chunk
# (forgotten by hand, superseded by a longer or changed text) is left out, recalled by
# no one, and what was forgotten is never turned into a vector.
PENDING = """
select m.statement_id, s.object_lit ->> 'v'
from donto.x_memory_record as m
join donto.statement as s using (statement_id)
where not exists (select 1 from donto.embedding as e
                  where e.statement_id = m.statement_id and e.model_id = %(model)s)
  and not exists (select 1 from donto.retraction as r where r.statement_id = m.statement_id)
  and (%(anyone)s or donto._may_embed(s.login_role, s.document_id, s.context_id))
  and (%(context)s::text is null
       or s.context_id = (select context_id from donto.context where iri = %(context)s))
order by m.statement_id
limit %(limit)s
"""


@dataclass
class EmbedReport:
    model: str
    model_id: int
    dimension: int
    embedded: int
    already: int
    seconds: float
    index: str
    encoded: int = 0  # texts the model encoded (the others came from the cache)
    standing: int = 0
    keys: int = 0  # recall keys (user turns, donto.x_turn_key) embedded
    conditions: int = 0  # conditions of standing statements ("when I ask about X")
    others: int = 0  # chunks still without a vector that other logins filed (theirs to embed)
    standing_reused: int = 0  # standing and condition vectors of an earlier revision, reused

    @property
    def rate(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0


def register_model(conn: psycopg.Connection, model: str | None) -> tuple[str, int, int]:
    name, source = encoder.resolve(model)
    try:
        dim = encoder.dimension(model)
    except (OSError, ValueError) as exc:
        raise InputError(
            f"cannot load the embedding model {model!r}",
            "it is not a local sentence-transformers directory, and models are not downloaded "
            "(offline: HF_HUB_OFFLINE=1)",
            fix=f"give a local model directory, or leave --model out for {encoder.DEFAULT_MODEL} "
                "(shipped)") from exc
    mid = conn.execute("select donto.ensure_embedding_model(%s, %s, %s)",
                       (name, source, dim)).fetchone()[0]
    conn.commit()
    return name, mid, dim


def _read(conn: psycopg.Connection, sql: str, params: object) -> list[tuple]:
    """The rows of SQL. A transaction the read opened itself (none was open) ends before the
    caller encodes for seconds: left idle, it would hold the as_of horizon back and be
    what idle_in_transaction_session_timeout ends; the caller's own stays open."""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    rows = conn.execute(sql, params).fetchall()
    if idle:
        conn.commit()
    return rows


def content_key(text: str) -> bytes:
    """The key of a text in donto.embedding_cache: SHA-256 of its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def store_vectors(conn: psycopg.Connection, rows: list[tuple[int, str]], model: str | None,
                  model_id: int, *, batch: int = 16,
                  ingest: str = "ingest_embeddings", counts: dict[str, int] | None = None,
                  cache: bool = True) -> int:
    """Embed ROWS (statement id, text) in length-sorted batches (less padding) and move the
    vectors in, in one transaction: binary COPY into the staging table, then INGEST
    (``ingest_embeddings`` for recall chunks, ``ingest_measure_embeddings`` for A/B units
    and session summaries). Returns how many were added (existing ones are skipped).

    Texts whose vector is in donto.embedding_cache (same model, same SHA-256) are not
    encoded again: identical text is embedded once, across revisions, projections and
    arms (CACHE=False encodes every text: benchmarks of the whole work).
    COUNTS, if given, gains ``encoded`` and ``cached`` (texts of each kind).
    """
    if ingest not in ("ingest_embeddings", "ingest_measure_embeddings"):
        raise ValueError(f"unknown ingest function {ingest!r}")
    rows = sorted(rows, key=lambda r: len(r[1]))
    keys = [content_key(r[1]) for r in rows]
    register_vector_if_present(conn)  # binary COPY needs the vector type's loaders
    cached = dict(_read(conn, "select sha256, embedding from donto.cached_embeddings(%s, %s)",
                        (model_id, list(set(keys))))) if rows and cache else {}
    todo = sorted({k: r[1] for k, r in zip(keys, rows, strict=True) if k not in cached}.items(),
                  key=lambda kv: len(kv[1]))
    if todo:
        vecs = encoder.encode([t for _, t in todo], model, batch_size=batch)
        cached.update({k: v for (k, _), v in zip(todo, vecs, strict=True)})
    if counts is not None:
        counts["encoded"] = counts.get("encoded", 0) + len(todo)
        counts["cached"] = counts.get("cached", 0) + len(rows) - len(todo)
    with conn.transaction():
        conn.execute("create temp table if not exists _donto_embedding_stage "
                     "(statement_id bigint, embedding vector) on commit delete rows")
        with conn.cursor().copy("copy _donto_embedding_stage (statement_id, embedding) "
                                "from stdin with (format binary)") as cp:
            cp.set_types(["int8", "vector"])
            for (sid, _), key in zip(rows, keys, strict=True):
                cp.write_row((sid, cached[key]))
        return conn.execute(f"select donto.{ingest}(%s)", (model_id,)).fetchone()[0]


def count_pending(conn: psycopg.Connection, model_id: int, context: str | None = None, *,
                  anyone: bool = False) -> int:
    """Chunks without a vector for MODEL_ID (in CONTEXT): those this session may embed
    (``donto._may_embed``: the owner's session any, another login only what it filed), or,
    ANYONE, all of them."""
    return conn.execute(
        f"select count(*) from ({PENDING.replace('limit %(limit)s', '')}) as p",
        {"model": model_id, "context": context, "anyone": anyone}).fetchone()[0]


def unembedded(conn: psycopg.Connection, context: str) -> tuple[int, int, int]:
    """What ``donto-pg embed`` still has to do in CONTEXT for the model recall uses by
    default (``donto.embedding_model_id()``): its chunks in force (not retracted) without
    a vector, all its chunks in force, and its standing statements in force without a
    vector (the standing block leaves them out). Retracted ones are nothing to do: embed
    leaves them out as recall does."""
    (model_id,) = conn.execute("select donto.embedding_model_id()").fetchone()
    total = conn.execute(
        "select count(*) from donto.x_memory_record as m "
        "join donto.statement as s using (statement_id) "
        "where s.context_id = (select context_id from donto.context where iri = %s) "
        "and not exists (select 1 from donto.retraction as r "
        "where r.statement_id = m.statement_id)",
        (context,)).fetchone()[0]
    standing = conn.execute(
        f"select count(*) from ({STANDING_PENDING}) as p",
        {"model": model_id, "context": context, "anyone": True}).fetchone()[0]
    return count_pending(conn, model_id, context, anyone=True), total, standing


def embed_pending(conn: psycopg.Connection, model: str | None = None, *, batch: int = 16,
                  page: int = 1024, context: str | None = None, progress: bool = True,
                  max_pages: int | None = None, cache: bool = True,
                  chunks: bool = True) -> EmbedReport:
    """Embed every chunk, recall key and standing statement without a vector for MODEL
    (CHUNKS=False: only the keys and standing statements); returns what was done. A session
    that is not the owner's embeds only what its own login filed (``donto._may_embed``);
    ``others`` counts the chunks it left for the logins that filed them."""
    import time

    from tqdm import tqdm

    if context is not None and conn.execute(
            "select 1 from donto.context where iri = %s", (context,)).fetchone() is None:
        raise InputError(f"no context {context}",
                         fix="contexts are named ctx:memory/episodic/<document with / for :> "
                             "(select iri from donto.context)")
    name, model_id, dim = register_model(conn, model)
    total = count_pending(conn, model_id, context) if chunks else 0
    done_before = conn.execute(
        "select count(*) from donto.embedding as e where e.model_id = %(m)s and "
        "(%(c)s::text is null or e.context_id = "
        "(select context_id from donto.context where iri = %(c)s))",
        {"m": model_id, "c": context}).fetchone()[0]
    conn.commit()
    bar = tqdm(total=total, unit="chunk", desc=f"embed {name}", disable=not progress,
               file=sys.stderr, dynamic_ncols=True)
    started = time.perf_counter()
    embedded = pages = 0
    counts: dict[str, int] = {}
    try:
        while chunks and (max_pages is None or pages < max_pages):
            rows = _read(conn, PENDING, {"model": model_id, "context": context,
                                         "limit": page, "anyone": False})
            if not rows:
                break
            n = store_vectors(conn, rows, model, model_id, batch=batch, counts=counts,
                              cache=cache)
            embedded += n
            pages += 1
            bar.update(len(rows))
    finally:
        bar.close()
    seconds = time.perf_counter() - started
    index = conn.execute("select donto.ensure_embedding_index(%s)", (model_id,)).fetchone()[0]
    conn.commit()
    sc: dict[str, int] = {}
    standing = embed_standing(conn, model, model_id, context=context, batch=batch, counts=sc)
    conditions = embed_standing_conditions(conn, model, model_id, context=context,
                                           batch=batch, counts=sc)
    keys = embed_turn_keys(conn, model, model_id, context=context, batch=batch, page=page)
    others = (count_pending(conn, model_id, context, anyone=True)
              - count_pending(conn, model_id, context)) if chunks else 0
    conn.commit()
    return EmbedReport(name, model_id, dim, embedded, done_before, seconds, index,
                       counts.get("encoded", 0), standing, keys, conditions, others,
                       sc.get("reused", 0))


# The standing statements of the context (null: all) in force (not retracted: forgotten,
# or superseded by newer rules or a changed text) that have no vector of the kind asked
# for: of the statement (STANDING_PENDING) or of its condition (CONDITIONS_PENDING).
_STANDING_OF = """
from donto.x_standing as x
inner join donto.statement as s on s.statement_id = x.statement_id
where not exists (select 1 from donto.{table} as v
                  where v.statement_id = x.statement_id and v.model_id = %(model)s)
      and not exists (select 1 from donto.retraction as r
                      where r.statement_id = x.statement_id)
      and (%(anyone)s or donto._may_embed(s.login_role, s.document_id, s.context_id))
      and (%(context)s::text is null or x.revision_id in (
          select p.revision_id from donto.projection as p
          inner join donto.context as c on c.context_id = p.context_id
          where c.iri = %(context)s))
"""
# Rows: statement id, the text to encode, its document, the statement's own text.
STANDING_PENDING = ("select x.statement_id, s.object_lit ->> 'v', s.document_id, "
                    "s.object_lit ->> 'v'"
                    + _STANDING_OF.format(table="x_standing_vector")
                    + "order by x.statement_id")
CONDITIONS_PENDING = ("select c.statement_id, c.cond, c.document_id, c.v from (select "
                      "x.statement_id, donto._standing_condition(s.object_lit ->> 'v') as cond, "
                      "s.document_id, s.object_lit ->> 'v' as v"
                      + _STANDING_OF.format(table="x_standing_condition_vector")
                      + ") as c where c.cond is not null order by c.statement_id")
# The vectors the same document's statements of the same text already have (of the
# revision a conversation grew from: its standing statements are cut again for the longer
# one): reused, not encoded again. Same document only: who may store a vector there is
# who may store this one (donto._may_embed), so no one's vector reaches another's document.
_STANDING_REUSE = """
select distinct on (s.document_id, s.object_lit ->> 'v')
       s.document_id, s.object_lit ->> 'v', v.embedding::text
from donto.{table} as v
inner join donto.statement as s on s.statement_id = v.statement_id
where v.model_id = %(model)s and s.document_id = any(%(docs)s)
      and s.object_lit ->> 'v' = any(%(texts)s)
order by s.document_id, s.object_lit ->> 'v', v.statement_id
"""


def _embed_standing(conn: psycopg.Connection, model: str | None, model_id: int, pending: str,
                    ingest: str, *, context: str | None, batch: int,
                    counts: dict[str, int] | None = None) -> int:
    rows = _read(conn, pending, {"model": model_id, "context": context, "anyone": False})
    if not rows:
        return 0
    table = ("x_standing_vector" if ingest == "ingest_standing_embeddings"
             else "x_standing_condition_vector")
    have = {(doc, txt): vec for doc, txt, vec in _read(
        conn, _STANDING_REUSE.format(table=table),
        {"model": model_id, "docs": sorted({r[2] for r in rows}),
         "texts": sorted({r[3] for r in rows})})}
    todo = [r for r in rows if (r[2], r[3]) not in have]
    vecs = encoder.encode([r[1] for r in todo], model, batch_size=batch) if todo else []
    for r, vec in zip(todo, vecs, strict=True):
        have[(r[2], r[3])] = "[" + ",".join(f"{x:.7g}" for x in vec) + "]"
    if counts is not None:
        counts["encoded"] = counts.get("encoded", 0) + len(todo)
        counts["reused"] = counts.get("reused", 0) + len(rows) - len(todo)
    n = conn.execute(f"select donto.{ingest}(%s, %s, %s)",
                     (model_id, [r[0] for r in rows],
                      [have[(r[2], r[3])] for r in rows])).fetchone()[0]
    conn.commit()
    return n


def embed_standing(conn: psycopg.Connection, model: str | None, model_id: int, *,
                   context: str | None = None, batch: int = 16,
                   counts: dict[str, int] | None = None) -> int:
    """Embed the standing statements without a vector for MODEL (recall's standing slots);
    CONTEXT: only those of the revisions projected into it. A statement whose text a
    statement of the same document has a vector for (the revision it grew from) gets that
    one. Returns how many were added; COUNTS gains ``encoded`` and ``reused``."""
    return _embed_standing(conn, model, model_id, STANDING_PENDING,
                           "ingest_standing_embeddings", context=context, batch=batch,
                           counts=counts)


def embed_standing_conditions(conn: psycopg.Connection, model: str | None, model_id: int, *,
                              context: str | None = None, batch: int = 16,
                              counts: dict[str, int] | None = None) -> int:
    """Embed the conditions ("when I ask about X": X, ``donto._standing_condition``) of the
    standing statements that name one and have no condition vector for MODEL; CONTEXT,
    reuse and COUNTS as in :func:`embed_standing`. Returns how many were added."""
    return _embed_standing(conn, model, model_id, CONDITIONS_PENDING,
                           "ingest_standing_condition_embeddings", context=context,
                           batch=batch, counts=counts)


# The recall keys without a vector for the model that recall can read
# (donto._recall_keys): not of a projection a changed conversation superseded, and
# standing for a chunk that is not retracted (the chunk of their projection holding the
# turn's header, not superseded by a longer text). A key left out now is asked about again
# on the next run (its conversation may grow past the window that hid it).
KEYS_PENDING = """
select k.key_id, k.key_text
from donto.x_turn_key as k
where not exists (select 1 from donto.x_turn_key_vector as v
                  where v.key_id = k.key_id and v.model_id = %(model)s)
      and not exists (select 1 from donto.projection_superseded as ps
                      where ps.projection_id = k.projection_id)
      and exists (
          select 1 from (
              select m.statement_id from donto.x_memory_record as m
              where m.projection_id = k.projection_id and m.char_start <= k.header_start
                    and not exists (select 1 from donto.projection_extension as pe
                                    where pe.superseded_statement_id = m.statement_id)
              order by m.char_start desc, m.statement_id desc
              limit 1) as hm
          where not exists (select 1 from donto.retraction as rt
                            where rt.statement_id = hm.statement_id))
      and donto._may_embed(k.login_role, (select r.document_id from donto.revision as r
                                          where r.revision_id = k.revision_id), null)
      and (%(context)s::text is null or k.projection_id in (
          select p.projection_id from donto.projection as p
          inner join donto.context as c on c.context_id = p.context_id
          where c.iri = %(context)s))
order by k.key_id
limit %(limit)s
"""


def embed_turn_keys(conn: psycopg.Connection, model: str | None, model_id: int, *,
                    context: str | None = None, batch: int = 16, page: int = 1024) -> int:
    """Embed the recall keys (user turns, donto.x_turn_key) without a vector for MODEL, a
    page per transaction (resumable: a killed run loses at most its page); CONTEXT: only
    the keys of its projections. Returns how many were added."""
    added = 0
    while True:
        rows = _read(conn, KEYS_PENDING, {"model": model_id, "context": context,
                                          "limit": page})
        if not rows:
            return added
        vecs = encoder.encode([r[1] for r in rows], model, batch_size=batch)
        texts = ["[" + ",".join(f"{x:.7g}" for x in vec) + "]" for vec in vecs]
        n = conn.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                         (model_id, [r[0] for r in rows], texts)).fetchone()[0]
        conn.commit()
        if n == 0:  # nothing stored (cannot happen unless ingestion refuses): stop
            return added
        added += n
