"""donto-pg embed leaves out what recall cannot read: chunks, standing statements (and their
conditions) and recall keys retracted before they were embedded, by hand (forgotten) or by
the database (superseded by a changed conversation). Real PostgreSQL, the real small model.
"""

from __future__ import annotations

import pytest

from donto_pg import api
from donto_pg.embed import (
    count_pending,
    embed_pending,
    register_model,
    store_vectors,
    unembedded,
)

pytestmark = pytest.mark.slow

RULE = "Always include audiobook narrator details when I ask about audiobooks."
SECRET = "My password hint is blue-falcon."
FILLER = "Audiobooks are a fine way to spend a commute, and libraries lend them.\n" * 20


def chat(city: str) -> list[dict]:
    return [{"role": "user", "content": RULE, "timestamp": "2024-03-02"},
            {"role": "assistant", "content": FILLER},
            {"role": "user", "content": f"I live in {city}. {SECRET}"},
            {"role": "assistant", "content": "Noted."}]


def ctx_of(db, iri: str) -> str:
    return db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]


def ids(db, sql: str, *args) -> set[int]:
    return {r[0] for r in db.execute(sql, args).fetchall()}


def retracted(db) -> set[int]:
    return ids(db, "select statement_id from donto.retraction")


def vectors(db) -> dict[str, set[int]]:
    return {"chunks": ids(db, "select statement_id from donto.embedding"),
            "standing": ids(db, "select statement_id from donto.x_standing_vector"),
            "conditions": ids(db, "select statement_id from donto.x_standing_condition_vector"),
            "keys": ids(db, "select key_id from donto.x_turn_key_vector")}


def test_embed_leaves_out_what_was_retracted_before_it_was_embedded(db):
    """A forgotten chunk (and the key of the user turn it holds), a forgotten standing
    instruction (and its condition), and every chunk, standing statement and key of a
    conversation's old text superseded by a changed one get no vector; the reports count
    none of them; running embed again changes nothing."""
    _, model_id, _ = register_model(db, None)
    forgot = "chat:t/forgot"
    rev = api.add_conversation(db, chat("Oslo"), forgot, embed=False)
    ctx = ctx_of(db, forgot)
    secret, = db.execute("select c.statement_id from donto.revision_chunks(%s) c "
                         "where c.chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    rule, = db.execute("select statement_id from donto.standing(%s) where statement_text = %s",
                       (ctx, RULE)).fetchone()
    db.execute("select donto.retract(%s, 'forget my password hint')", (secret,))
    db.execute("select donto.retract(%s, 'stop the narrator details')", (rule,))
    db.commit()
    # a changed conversation: its old text's statements are superseded (retracted)
    moved = "chat:t/moved"
    old = api.add_conversation(db, chat("Oslo"), moved, embed=False)
    new = api.add_conversation(db, chat("Bergen"), moved, embed=False)
    assert old != new
    db.commit()
    gone = retracted(db)
    old_stmts = ids(db, "select statement_id from donto.statement "
                        "where derived_from_revision = %s", old)
    assert old_stmts and old_stmts <= gone  # chunks and standing statements of the old text
    old_keys = ids(db, "select k.key_id from donto.x_turn_key k join donto.projection p "
                       "using (projection_id) where p.revision_id = %s", old)
    secret_key = ids(db, "select k.key_id from donto.x_turn_key k join donto.x_memory_record m "
                         "on m.projection_id = k.projection_id and m.char_start <= "
                         "k.header_start and k.header_start < m.char_end "
                         "where m.statement_id = %s", secret)
    assert old_keys and len(secret_key) == 1
    live_chunks = ids(db, "select statement_id from donto.x_memory_record") - gone
    live_standing = ids(db, "select statement_id from donto.x_standing") - gone
    assert live_chunks and live_standing

    # the reports count what recall can read, and nothing retracted
    assert count_pending(db, model_id) == len(live_chunks)
    in_force = {}
    for iri in (forgot, moved):
        c = ctx_of(db, iri)
        in_force[iri] = len(ids(db, "select m.statement_id from donto.x_memory_record m join "
                                    "donto.statement s using (statement_id) join donto.context "
                                    "x using (context_id) where x.iri = %s", c) - gone)
        n = in_force[iri]
        assert unembedded(db, c) == (n, n, 1 if iri == moved else 0)
        assert count_pending(db, model_id, c, anyone=True) == n

    report = embed_pending(db, progress=False)
    v = vectors(db)
    assert report.embedded == len(live_chunks) and v["chunks"] == live_chunks
    assert v["standing"] == live_standing and not v["standing"] & gone
    assert not v["conditions"] & gone and len(v["conditions"]) == 1  # the new text's rule
    assert not v["keys"] & (old_keys | secret_key)
    assert v["keys"] and report.keys == len(v["keys"])
    for iri in (forgot, moved):
        assert unembedded(db, ctx_of(db, iri)) == (0, in_force[iri], 0)

    # idempotent: nothing more, in the client or in the server
    again = embed_pending(db, progress=False)
    assert (again.embedded, again.standing, again.conditions, again.keys) == (0, 0, 0, 0)
    assert db.execute("select donto.embed_standing()").fetchone()[0] == 0
    assert vectors(db) == v


def test_a_context_of_retracted_chunks_only_has_nothing_pending(db):
    """Every chunk of a context forgotten before embedding: 0 pending, 0 in force, and embed
    (client and server side) stores no vector of it."""
    _, model_id, _ = register_model(db, None)
    iri = "chat:t/all-forgotten"
    rev = api.add_conversation(db, chat("Oslo"), iri, embed=False)
    ctx = ctx_of(db, iri)
    for sid in ids(db, "select statement_id from donto.statement s join donto.context c "
                       "using (context_id) where c.iri in (%s, %s)",
                   ctx, ctx.replace("/episodic/", "/standing/")):
        db.execute("select donto.retract(%s, 'forget all of it')", (sid,))
    db.commit()
    assert ids(db, "select statement_id from donto.revision_chunks(%s)", rev) <= retracted(db)
    assert count_pending(db, model_id, ctx, anyone=True) == 0
    assert unembedded(db, ctx) == (0, 0, 0)
    assert db.execute("select donto.embed_standing()").fetchone()[0] == 0
    report = embed_pending(db, progress=False, context=ctx)
    assert (report.embedded, report.standing, report.conditions, report.keys) == (0, 0, 0, 0)
    assert vectors(db) == {"chunks": set(), "standing": set(), "conditions": set(),
                           "keys": set()}


def test_a_chunk_forgotten_while_embed_encoded_gets_no_vector(db):
    """The ingest functions skip a statement retracted after embed read it (while it
    encoded): what was forgotten meanwhile is not stored."""
    _, model_id, _ = register_model(db, None)
    iri = "chat:t/race"
    rev = api.add_conversation(db, chat("Oslo"), iri, embed=False)
    rows = db.execute("select statement_id, chunk_text from donto.revision_chunks(%s) "
                      "order by chunk_position", (rev,)).fetchall()
    rule, = db.execute("select statement_id from donto.standing(%s) where statement_text = %s",
                       (ctx_of(db, iri), RULE)).fetchone()
    db.execute("select donto.retract(%s, 'forget it')", (rows[-1][0],))
    db.execute("select donto.retract(%s, 'forget it')", (rule,))
    db.commit()
    assert store_vectors(db, rows, None, model_id) == len(rows) - 1
    assert vectors(db)["chunks"] == {r[0] for r in rows[:-1]}
    vec = "[" + ",".join(["0.1"] * 384) + "]"
    for fn in ("ingest_standing_embeddings", "ingest_standing_condition_embeddings"):
        assert db.execute(f"select donto.{fn}(%s, %s, %s)",
                          (model_id, [rule], [vec])).fetchone()[0] == 0
    db.commit()
    assert vectors(db)["standing"] == vectors(db)["conditions"] == set()


def test_a_chunk_retracted_after_it_was_embedded_is_not_recalled(db):
    """Its vector stays (append-only), and recall (vector, lexical, key and hybrid arms)
    no longer returns it."""
    iri = "chat:t/later"
    rev = api.add_conversation(db, chat("Oslo"), iri)  # embedded
    ctx = ctx_of(db, iri)
    secret, = db.execute("select c.statement_id from donto.revision_chunks(%s) c "
                         "where c.chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    assert secret in vectors(db)["chunks"]
    query = "what is my password hint? blue-falcon"

    def hits(arms: str) -> list[int]:
        return [r[0] for r in db.execute(
            "select statement_id from donto.recall(%s, k => 5, context => %s, arms => %s)",
            (query, ctx, arms)).fetchall()]

    for arms in ("vector", "lexical", "hybrid"):
        assert hits(arms)[0] == secret, arms
    db.execute("select donto.retract(%s, 'forget my password hint')", (secret,))
    db.commit()
    for arms in ("vector", "lexical", "hybrid"):
        assert secret not in hits(arms), arms
    db.execute("set donto.recall_vector_weight = '0'")  # the key arms alone find it no more
    db.execute("set donto.recall_lexical_weight = '0'")
    db.execute("set donto.recall_key_lexical_weight = '0'")
    assert secret not in hits("vector")
    assert secret in vectors(db)["chunks"]  # the vector is kept (I3), only not read
    db.commit()
