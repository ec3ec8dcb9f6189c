"""Conversations that grow: appending turns is incremental and exact.

A conversation loaded short, then appended to, must give the same recall chunks
(text, spans, valid time), vectors, extraction blocks and recall answers as the
longer conversation loaded from scratch, while only the new text is cut again
and embedded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid

import numpy as np
import psycopg
import pytest

from donto_pg import beam, loader, migrate
from donto_pg.core import encoder
from donto_pg.core.windows import recall_windows
from donto_pg.embed import content_key, embed_pending
from tests.conftest import EXAMPLES, module_database

CONV13 = EXAMPLES / "chats" / "100K" / "13"
OLD, NEW = 64, 74  # messages: the 10 appended ones cross from session 1 into session 2
IRI = "beam:100K/13"
QUERIES = ["what database did we choose", "deadline for the project", "how do I fix the test",
           "what is my budget", "which framework should I use for the frontend",
           "Can you give me a summary of my project plans?"]  # session heads (below)


def conversation(n: int) -> beam.Conversation:
    conv = next(beam.iter_beam(CONV13))
    return dataclasses.replace(conv, messages=conv.messages[:n], questions=[])


def messages(conv: beam.Conversation, start: int) -> list[dict[str, object]]:
    return [{"role": m.role, "content": m.content, "turn_id": m.turn_id, "session": m.session,
             "exchange": m.exchange, "date": m.date.isoformat() if m.date else None}
            for m in conv.messages[start:]]


def load(conn: psycopg.Connection, conv: beam.Conversation) -> int:
    res = loader.load_conversation(conn, conv)
    assert res.ok, res.error
    conn.execute("select donto.project_extraction(%s)", (res.revision_id,))
    conn.commit()
    return res.revision_id


def chunks(conn: psycopg.Connection, rev: int) -> list[tuple]:
    return conn.execute(
        "select c.chunk_position, c.char_start, c.char_end, c.chunk_text, s.valid_time::text, "
        "s.object_lit ->> 'dt' from donto.revision_chunks(%s) as c "
        "join donto.statement as s using (statement_id) order by c.chunk_position",
        (rev,)).fetchall()


def vectors(conn: psycopg.Connection, rev: int) -> np.ndarray:
    rows = conn.execute(
        "select e.embedding from donto.revision_chunks(%s) as c "
        "join donto.embedding as e using (statement_id) order by c.chunk_position",
        (rev,)).fetchall()
    return np.array([np.asarray(r[0].to_numpy()) for r in rows])


def blocks(conn: psycopg.Connection, rev: int) -> list[tuple]:
    return conn.execute(
        "select b.seq, b.kind, b.char_start, b.char_end, b.turns, b.prefix_start, b.prefix_end, "
        "b.prefix_turn_seq, b.split, b.valid_time::text from donto.extraction_block as b "
        "join donto.projection as p using (projection_id) where p.revision_id = %s "
        "order by b.seq", (rev,)).fetchall()


def recall(conn: psycopg.Connection, qvecs, as_of=None, arms="hybrid",
           head_weight: float = 2, head_min: int = 0) -> list[list[tuple]]:
    """Recall of QUERIES; session heads on whatever the (small) context's size, by default."""
    conn.execute("select set_config('donto.recall_head_min_chunks', %s, false), "
                 "set_config('donto.recall_head_weight', %s, false)",
                 (str(head_min), str(head_weight)))
    out = []
    for q, v in zip(QUERIES, qvecs, strict=True):
        out.append(conn.execute(
            "select char_start, char_end, chunk_text from donto.recall_by_vector("
            "%s::vector, %s, k => 10, as_of => %s, arms => %s)",
            (list(map(float, v)), q, as_of, arms)).fetchall())
    conn.commit()
    return out


def counts(conn: psycopg.Connection) -> dict[str, int]:
    tables = ["revision", "revision_extension", "turn", "statement", "retraction",
              "x_memory_record", "x_memory_lexical", "embedding", "embedding_cache",
              "projection", "projection_extension", "extraction_block"]
    return {t: conn.execute(f"select count(*) from donto.{t}").fetchone()[0] for t in tables}


@pytest.fixture(scope="module")
def qvecs():
    return encoder.encode(QUERIES)


def test_append_equals_loading_from_scratch(db, request, qvecs):
    old, new = conversation(OLD), conversation(NEW)
    rev1 = load(db, old)
    first = embed_pending(db, progress=False)
    before = recall(db, qvecs)
    lexical_before = recall(db, qvecs, arms="lexical")
    t0 = db.execute("select now()").fetchone()[0]
    db.commit()
    n_old = len(chunks(db, rev1))

    rev2 = loader.append_turns(db, IRI, messages(new, OLD))
    db.commit()
    assert rev2 != rev1
    assert db.execute("select extends_revision_id, prefix_chars from donto.revision_extension "
                      "where revision_id = %s", (rev2,)).fetchone() == (
        rev1, len(beam.format_chat(old)[0]))
    report = embed_pending(db, progress=False)

    body, spans = beam.format_chat(new)
    assert db.execute("select donto.revision_body(%s)",
                      (rev2,)).fetchone()[0] == body
    assert db.execute("select count(*) from donto.turn where revision_id = %s",
                      (rev2,)).fetchone()[0] == len(spans)
    got = chunks(db, rev2)
    assert [(c[1], c[2]) for c in got] == list(recall_windows(body, 1200))
    assert "".join(c[3] for c in got) == body
    # only the old last window was superseded; only the new chunks were embedded
    new_chunks = db.execute("select new_chunks, reused_chunks, superseded_statement_id "
                            "from donto.projection_extension where revision_id = %s",
                            (rev2,)).fetchone()
    assert new_chunks[1] == n_old - 1 and new_chunks[2] is not None
    assert new_chunks[0] + new_chunks[1] == len(got)
    assert report.embedded == new_chunks[0] and report.encoded <= new_chunks[0]
    # identical chunks of the conversation itself are encoded once
    assert first.embedded == n_old
    assert first.encoded == len({c[3] for c in chunks(db, rev1)})

    with module_database(request, "scratch") as scratch:
        rev_s = load(scratch, new)
        embed_pending(scratch, progress=False)
        assert chunks(scratch, rev_s) == got
        np.testing.assert_allclose(vectors(db, rev2), vectors(scratch, rev_s), atol=2e-6)
        assert vectors(db, rev2).shape == (len(got), 384)
        assert blocks(db, rev2) == blocks(scratch, rev_s)
        # ... session heads too: a chunk kept from the first revision (one session) is
        # placed in the sessions of the text it grew into, as the fresh load places it.
        assert recall(db, qvecs) == recall(scratch, qvecs)
        assert recall(db, qvecs)[-1] != recall(db, qvecs, head_weight=0)[-1]
        assert recall(db, qvecs, arms="lexical") == recall(scratch, qvecs, arms="lexical")

    # as_of before the append answers from the old revision, as recall did then
    assert recall(db, qvecs, as_of=t0) == before
    assert recall(db, qvecs, as_of=t0, arms="lexical") == lexical_before
    # nothing returned twice: the superseded window never comes back now
    sup = db.execute("select s.char_start, s.char_end from donto.statement as s "
                     "where s.statement_id = %s", (new_chunks[2],)).fetchone()
    for rows in recall(db, qvecs):
        assert len({(r[0], r[1]) for r in rows}) == len(rows)
        assert tuple(sup) not in {(r[0], r[1]) for r in rows if r[1] == sup[1]}


def test_as_of_searches_the_chunks_known_then(db, qvecs):
    """What recall counts as searched (its pool, the session heads' gate) is what was known
    at AS_OF: neither the chunks appended later nor the windows cut again."""
    rev1 = load(db, conversation(NEW))  # two sessions
    embed_pending(db, progress=False)
    t1 = db.execute("select now()").fetchone()[0]
    db.commit()
    n1 = len(chunks(db, rev1))
    loader.append_turns(db, IRI, messages(conversation(NEW + 30), NEW))
    db.commit()
    embed_pending(db, progress=False)
    n2 = db.execute("select reused_chunks + new_chunks, superseded_statement_id is not null "
                    "from donto.projection_extension").fetchone()
    assert n2[1] and n2[0] > n1  # one window was cut again
    # Gated just above what was known at t1: no heads then (as with weight 0), heads now.
    assert recall(db, qvecs, as_of=t1, head_min=n1 + 1) \
        == recall(db, qvecs, as_of=t1, head_weight=0)
    assert recall(db, qvecs, as_of=t1, head_min=n1)[-1] \
        != recall(db, qvecs, as_of=t1, head_weight=0)[-1]
    assert recall(db, qvecs, head_min=n2[0])[-1] != recall(db, qvecs, head_weight=0)[-1]
    # The window cut again is not counted: n2 live chunks, one more ever recorded.
    assert recall(db, qvecs, head_min=n2[0] + 1) == recall(db, qvecs, head_weight=0)


def test_append_is_idempotent_and_refuses_what_does_not_extend(db, connect):
    old, new = conversation(OLD), conversation(NEW)
    rev1 = load(db, old)
    rev2 = loader.append_turns(db, IRI, messages(new, OLD))
    db.commit()
    snap = counts(db)
    # the same append again, and loading the longer conversation: nothing new
    assert loader.append_turns(db, IRI, messages(new, OLD)) == rev2
    db.commit()
    res = loader.load_conversation(db, new)
    assert res.ok and res.revision_id == rev2, res.error
    db.execute("select donto.project_extraction(%s)", (rev2,))
    db.commit()
    assert counts(db) == snap

    body2 = db.execute("select donto.revision_body(%s)",
                       (rev2,)).fetchone()[0]
    turns2 = json.dumps(db.execute(
        "select jsonb_agg(to_jsonb(t) - 'revision_id' order by seq) from donto.turn as t "
        "where revision_id = %s", (rev2,)).fetchone()[0])
    db.commit()
    # a body that changes old text is refused, with nothing left behind
    changed = body2[:100] + "X" + body2[101:] + "\n[user #999] more\n"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="differs from it at char 100"):
        db.execute("select donto.extend_revision(%s, %s, %s::jsonb)", (IRI, changed, turns2))
    db.rollback()
    # a shorter body (the revision it extends) is refused too
    body1 = db.execute("select donto.revision_body(%s)",
                       (rev1,)).fetchone()[0]
    db.commit()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="does not extend"):
        db.execute("select donto.extend_revision(%s, %s, '[]')", (IRI, body1 + "tail"))
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no document"):
        loader.append_turns(db, "beam:nope", [{"role": "user", "content": "hi"}])
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="content must be a string"):
        loader.append_turns(db, IRI, [{"role": "user", "content": 5}])
    db.rollback()
    # new turns must start after the old body; old turns must stay as they were
    bad_turns = json.loads(turns2)
    bad_turns[0]["role"] = "assistant"
    longer = body2 + "\n[user #999] more\n"
    more = bad_turns + [{"seq": len(bad_turns), "turn_id": 999, "role": "user",
                         "header_start": len(body2) + 1, "char_start": len(body2) + 13,
                         "char_end": len(longer) - 1}]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="turn seq 0 of revision"):
        db.execute("select donto.extend_revision(%s, %s, %s::jsonb)",
                   (IRI, longer, json.dumps(more)))
    db.rollback()
    assert counts(db) == snap
    # one test of an append (donto._extension_fault) for the function and the loaders
    same = [dict(t, date=t["time_anchor"]) for t in json.loads(turns2)]
    inside = same + [dict(more[-1], header_start=len(body2) - 1)]
    fault = {name: db.execute("select donto._extension_fault(%s, %s, %s::jsonb)",
                              (rev2, b, json.dumps(t))).fetchone()[0]
             for name, b, t in [("ok", longer, same + more[-1:]),
                                ("changed", changed, same),
                                ("old turn", longer, more),
                                ("inside", longer, inside)]}
    db.commit()
    assert fault["ok"] is None
    assert fault["changed"].startswith(f"the new body does not extend revision {rev2} ")
    assert fault["old turn"].startswith(f"turn seq 0 of revision {rev2} differs")
    assert fault["inside"].startswith(f"new turn seq {len(more) - 1} starts inside the old")
    assert loader.extends_latest(db, IRI, longer, same + more[-1:])
    assert not loader.extends_latest(db, IRI, longer, more)
    db.commit()

    # appending within one session: user turn with defaults (turn id, session, exchange)
    rev3 = loader.append_turns(db, IRI, [{"role": "user", "content": "One more question."},
                                         {"role": "assistant", "content": "Sure."}])
    db.commit()
    last = db.execute("select turn_id, role, session, exchange from donto.turn "
                      "where revision_id = %s order by seq desc limit 2", (rev3,)).fetchall()
    prev = db.execute("select turn_id, session, exchange from donto.turn "
                      "where revision_id = %s order by seq desc limit 1", (rev2,)).fetchone()
    assert last == [(prev[0] + 2, "assistant", prev[1], prev[2] + 1),
                    (prev[0] + 1, "user", prev[1], prev[2] + 1)]
    body3 = db.execute("select donto.revision_body(%s)",
                       (rev3,)).fetchone()[0]
    assert body3.startswith(body2) and body3.endswith(f"\n[assistant #{last[0][0]}] Sure.\n")
    got = db.execute("select char_start, char_end, chunk_text from donto.revision_chunks(%s) "
                     "order by chunk_position", (rev3,)).fetchall()
    assert [(s, e) for s, e, _ in got] == list(recall_windows(body3, 1200))
    assert all(t == body3[s:e] for s, e, t in got)
    # projection B of the third revision equals a whole segmentation of it
    fresh = db.execute("select seq, kind, char_start, char_end, turns, prefix_start, prefix_end, "
                       "prefix_turn_seq, split from donto._extraction_blocks(%s, "
                       "donto._extraction_params('{}')) order by seq", (rev3,)).fetchall()
    assert [b[:9] for b in blocks(db, rev3)] == fresh
    # the writer role appends through the function; the reader cannot
    writer = connect("donto_writer")
    rev4 = loader.append_turns(writer, IRI, [{"role": "user", "content": "Thanks."}])
    writer.commit()
    assert rev4 > rev3
    reader = connect("donto_reader")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        loader.append_turns(reader, IRI, [{"role": "user", "content": "Hi."}])


def test_identical_text_is_embedded_once(db):
    rev = load(db, conversation(OLD))
    first = embed_pending(db, progress=False)
    assert 0 < first.encoded <= first.embedded
    # the same revision projected into another context: every vector from the cache
    n = db.execute("select donto.project_recall(%s, 1200, 'ctx:test/copy')",
                   (rev,)).fetchone()[0]
    db.commit()
    again = embed_pending(db, progress=False)
    assert (again.embedded, again.encoded) == (n, 0)
    same = db.execute(
        "select count(*) from donto.x_memory_record as a "
        "join donto.x_memory_record as b using (revision_id, chunk_index) "
        "join donto.embedding as ea on ea.statement_id = a.statement_id "
        "join donto.embedding as eb on eb.statement_id = b.statement_id "
        "where a.projection_id < b.projection_id and ea.embedding = eb.embedding").fetchone()[0]
    assert same == n


@pytest.fixture
def empty_db(db):
    """An empty database on the test server (dropped afterwards)."""
    info = db.info
    name = f"donto_append_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres",
                            autocommit=True)
    admin.execute(f'create database "{name}"')
    conn = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=name)
    yield conn
    conn.close()
    admin.execute(f'drop database if exists "{name}" with (force)')
    admin.close()


def test_upgrade_to_014_caches_the_stored_vectors(empty_db):
    """014 keys every stored vector of a recall chunk by its text; 023 marks what it finds
    untrusted (who stored a vector was not recorded: it may be a writer's) and hands it out
    no more, while a trusted entry for the same text may stand beside it."""
    conn = empty_db
    migrate.migrate(conn, upto="013")
    conn.execute("""
        with d as (insert into donto.document (iri) values ('test:014') returning document_id),
        r as (insert into donto.revision (document_id, sha256, body, body_chars)
              select document_id, sha256('abab'::bytea), 'abab', 4 from d
              returning revision_id, document_id),
        c as (insert into donto.context (iri) values ('ctx:test/014') returning context_id),
        p as (insert into donto.projection (revision_id, kind, strategy, context_id)
              select revision_id, 'recall', 'fixed-window', context_id from r, c
              returning projection_id, revision_id),
        m as (insert into donto.embedding_model (name, source, dimension)
              values ('toy', 'toy', 3) returning model_id),
        s as (insert into donto.statement (subject, predicate, object_lit, context_id,
                                           derived_from_revision, char_start, char_end)
              select 'chunk:' || g, 'mem:episodic/chunk', jsonb_build_object('v', 'ab'),
                     context_id, r.revision_id, 2 * g, 2 * g + 2
              from c, r, generate_series(0, 1) as g returning statement_id),
        x as (insert into donto.x_memory_record (statement_id, projection_id, revision_id,
                                                 chunk_index, char_start, char_end)
              select s.statement_id, p.projection_id, p.revision_id,
                     row_number() over (order by s.statement_id) - 1, 0, 2
              from s, p)
        insert into donto.embedding (statement_id, model_id, context_id, embedding)
        select s.statement_id, m.model_id, c.context_id, '[1,0,0]' from s, m, c""")
    conn.commit()
    assert migrate.migrate(conn)[0] == "014-append.sql"
    rows = conn.execute("select encode(sha256, 'hex'), embedding::text "
                        "from donto.embedding_cache").fetchall()
    assert rows == [(hashlib.sha256(b"ab").hexdigest(), "[1,0,0]")]
    assert content_key("ab") == hashlib.sha256(b"ab").digest()
    # the cache is append-only like every fact table
    with pytest.raises(psycopg.Error, match="append-only") as err:
        conn.execute("delete from donto.embedding_cache")
    assert err.value.sqlstate == "DI003"
    conn.rollback()
    mid, key = conn.execute("select model_id, sha256 from donto.embedding_cache").fetchone()
    assert conn.execute("select trusted from donto.embedding_cache").fetchall() == [(False,)]
    assert conn.execute("select * from donto.cached_embeddings(%s, %s)",
                        (mid, [key])).fetchall() == []
    conn.execute("insert into donto.embedding_cache (model_id, sha256, embedding) "
                 "values (%s, %s, '[0,1,0]')", (mid, key))
    assert conn.execute("select embedding::text from donto.cached_embeddings(%s, %s)",
                        (mid, [key])).fetchall() == [("[0,1,0]",)]
    conn.rollback()


def test_a_changed_conversation_supersedes_the_old_one_in_recall(db):
    """A conversation whose old text changed is a new revision beside the old one; its
    projections retract the old one's chunks and standing statements (not those of the
    revisions it extends), so recall answers from it, and as_of from before still finds
    the old text."""
    from donto_pg import api

    def chat(city: str, lang: str) -> list[dict]:
        return [{"role": "user", "content": f"I live in {city} now.", "timestamp": "2024-03-02"},
                {"role": "assistant", "content": "Noted."},
                {"role": "user", "content": f"Always answer me in {lang}."},
                {"role": "assistant", "content": "Sure."}]

    def live(kind: str) -> list[str]:
        return [r[0] for r in db.execute(
            "select s.object_lit ->> 'v' from donto.statement s join donto.context c "
            "using (context_id) where c.iri = %s and not exists (select 1 from "
            "donto.retraction r where r.statement_id = s.statement_id) order by 1",
            (f"ctx:memory/{kind}/chat/t/moved",)).fetchall()]

    old = api.add_conversation(db, chat("Oslo", "French"), "chat:t/moved", embed=False)
    grown = api.add_conversation(db, chat("Oslo", "French") + [
        {"role": "user", "content": "My cat is called Tom."}], "chat:t/moved", embed=False)
    assert any("Tom" in t for t in live("episodic")) and any("Oslo" in t for t in live("episodic"))
    # the grown text superseded its old last window: the database's own retraction, which
    # is not carried over (donto._carry_retractions carries those asked for by hand)
    assert db.execute("select count(*) filter (where by_hand), count(*) from donto.retraction"
                      ).fetchone() == (0, 1)
    before = db.execute("select now()").fetchone()[0]
    db.commit()
    new = api.add_conversation(db, chat("Bergen", "German"), "chat:t/moved", embed=False)
    assert len({old, grown, new}) == 3
    chunks = live("episodic")
    assert chunks and all("Oslo" not in t and "Tom" not in t for t in chunks)
    assert any("Bergen" in t for t in chunks)
    assert live("standing") == ["Always answer me in German."]
    hits = api.recall(db, "where do I live", document="chat:t/moved", arms="lexical")
    assert hits and {h.revision_id for h in hits} == {new}
    then = api.recall(db, "where do I live", document="chat:t/moved", arms="lexical",
                      as_of=before)
    assert then and {h.revision_id for h in then} <= {old, grown}
    reasons = {r[0] for r in db.execute(
        "select reason from donto.retraction where reason like 'superseded: the conversation%'")}
    assert reasons == {f"superseded: the conversation changed (revision {new}, the latest, does "
                       f"not extend revision {r})" for r in (old, grown)}
    # the same text again is the same revision: nothing changes; an older text again is
    # that older revision, and projecting it anew (another window) adds nothing current
    n = db.execute("select count(*) from donto.retraction").fetchone()[0]
    db.commit()
    assert api.add_conversation(db, chat("Bergen", "German"), "chat:t/moved", embed=False) == new
    assert db.execute("select count(*) from donto.retraction").fetchone()[0] == n
    db.commit()
    assert api.add_conversation(db, chat("Oslo", "French"), "chat:t/moved", embed=False,
                                window_chars=30) == old
    assert live("episodic") == chunks and live("standing") == ["Always answer me in German."]
    hits = api.recall(db, "where do I live", document="chat:t/moved", arms="lexical")
    assert {h.revision_id for h in hits} == {new}
    db.commit()


def test_a_changed_conversation_ranks_as_a_fresh_load_of_its_text(db):
    """The projections a changed conversation superseded are recorded (with as_of) and
    recall reads neither their keys nor their lexical rows: the key arm's pool holds only
    keys of the latest text, and the lexical arm scores the latest text exactly as a
    fresh load of it (same N, same df)."""
    from donto_pg import api

    def chat(first: str) -> list[dict]:
        turns = [first] + [f"Day {i}: I watered the garden and planted {w}."
                           for i, w in enumerate(["tulips", "roses", "basil", "mint", "kale",
                                                  "leeks", "beans", "peas", "chard"])]
        return [m for t in turns for m in ({"role": "user", "content": t},
                                           {"role": "assistant", "content": "Lovely " * 40})]

    old = api.add_conversation(db, chat("I have a small garden."), "chat:t/edited", embed=False)
    before = db.execute("select now()").fetchone()[0]
    db.commit()
    new = api.add_conversation(db, chat("I have a big garden."), "chat:t/edited", embed=False)
    fresh = api.add_conversation(db, chat("I have a big garden."), "chat:t/fresh", embed=False)
    db.commit()
    ctx = {d: db.execute("select context_id from donto.context where iri = %s",
                         (f"ctx:memory/episodic/chat/t/{d}",)).fetchone()[0]
           for d in ("edited", "fresh")}
    assert db.execute(
        "select p.revision_id, p.kind, s.latest_revision_id from donto.projection_superseded s "
        "join donto.projection p using (projection_id) join donto.revision r "
        "on r.revision_id = p.revision_id join donto.document d using (document_id) "
        "where d.iri = 'chat:t/edited' order by 2").fetchall() == [
        (old, "recall", new), (old, "standing", new)]

    def key_arm(context: int, pool: int, as_of=None) -> list[tuple]:
        return db.execute(
            "select m.char_start, k.key_lexical_rank from donto._recall_keys(null, 'garden', "
            "%s, %s, 0, %s, false, true) k join donto.x_memory_record m using (statement_id) "
            "order by 2", (context, as_of, pool)).fetchall()

    # the old text's keys (lower ids, so first among equal scores) no longer take the pool
    assert key_arm(ctx["edited"], 3) and key_arm(ctx["edited"], 3) == key_arm(ctx["fresh"], 3)
    assert key_arm(ctx["edited"], 3, before)  # as_of before: the old text's keys

    def lexical(context: int, as_of=None) -> list[tuple]:
        return db.execute(
            "select m.char_start, round(l.score::numeric, 9) from donto._recall_lexical("
            "'big garden basil', %s, %s, 10) l join donto.x_memory_record m "
            "using (statement_id) order by 2 desc, 1", (context, as_of)).fetchall()

    assert lexical(ctx["edited"]) == lexical(ctx["fresh"])
    assert lexical(ctx["edited"], before) != lexical(ctx["fresh"])
    assert {r[0] for r in db.execute(
        "select revision_id from donto.recall('garden', k => 5, context => %s, "
        "arms => 'lexical')", ("ctx:memory/episodic/chat/t/edited",))} == {new}
    assert fresh != new


def test_upgrade_to_024_records_the_projections_already_superseded(empty_db):
    """024 finds the projections whose statements a changed conversation retracted before
    it (by the reason donto._retract_superseded gives) and records them, with the latest
    revision and the time of the retraction; a projection with other retractions is not."""
    conn = empty_db
    migrate.migrate(conn, upto="023")
    conn.execute("""
        with d as (insert into donto.document (iri) values ('test:024') returning document_id),
        r as (insert into donto.revision (document_id, sha256, body, body_chars)
              select document_id, sha256(b::bytea), b, 4 from d, (values ('abab'), ('cdcd'),
              ('efef')) as v (b) returning revision_id),
        c as (insert into donto.context (iri) values ('ctx:test/024') returning context_id),
        p as (insert into donto.projection (revision_id, kind, strategy, context_id)
              select revision_id, 'recall', 'fixed-window', context_id from r, c
              returning projection_id, revision_id, context_id)
        insert into donto.statement (subject, predicate, object_lit, context_id,
                                     derived_from_revision, char_start, char_end)
        select 'chunk:' || revision_id, 'mem:episodic/chunk', '{"v": "ab"}', context_id,
               revision_id, 0, 2 from p""")
    revs = [r[0] for r in conn.execute("select revision_id from donto.revision order by 1")]
    conn.execute("insert into donto.retraction (statement_id, reason) select statement_id, %s "
                 "from donto.statement where derived_from_revision = %s",
                 (f"superseded: the conversation changed (revision {revs[2]}, the latest, does "
                  f"not extend revision {revs[0]})", revs[0]))
    conn.execute("insert into donto.retraction (statement_id, reason) select statement_id, "
                 "'wrong' from donto.statement where derived_from_revision = %s", (revs[1],))
    at = conn.execute("select now()").fetchone()[0]
    conn.commit()
    assert "024-projection-superseded.sql" in migrate.migrate(conn)
    assert conn.execute(
        "select p.revision_id, s.latest_revision_id, s.created_at from "
        "donto.projection_superseded s join donto.projection p using (projection_id)"
    ).fetchall() == [(revs[0], revs[2], at)]
    assert migrate.migrate(conn) == []  # idempotent


def test_a_last_message_that_grew_is_a_changed_conversation(db):
    """A streamed reply saved early and again when complete (or a "P.S." added to the last
    message) keeps the old text as a prefix of the new one but changes the last turn: it
    is loaded as a changed conversation (a new revision that supersedes the old one), not
    refused as a bad append; a real append still appends."""
    from donto_pg import api

    first = [{"role": "user", "content": "I live in Berlin.", "timestamp": "2024-03-01"},
             {"role": "assistant", "content": "Nice."}]
    grown = first[:1] + [{"role": "assistant", "content": "Nice.\nActually I moved to Paris."}]
    old = api.add_conversation(db, first, "chat:t/streamed", embed=False)
    new = api.add_conversation(db, grown, "chat:t/streamed", embed=False)
    assert new != old
    assert db.execute("select count(*) from donto.revision_extension where revision_id = %s",
                      (new,)).fetchone() == (0,)
    hits = api.recall(db, "where do I live", document="chat:t/streamed", arms="lexical")
    assert hits and {h.revision_id for h in hits} == {new} and "Paris" in hits[0].text
    db.commit()
    longer = api.add_conversation(db, grown + [{"role": "user", "content": "Thanks!"}],
                                  "chat:t/streamed", embed=False)
    assert db.execute("select extends_revision_id from donto.revision_extension "
                      "where revision_id = %s", (longer,)).fetchone() == (new,)
    db.commit()


def test_a_load_that_raced_a_changed_conversation_registers_a_new_revision(db, connect,
                                                                           monkeypatch):
    """Between a load's check that its text extends the latest revision and its append,
    another load may commit a text that changes the conversation: the append is refused
    (22023) and the load registers its text as a changed conversation instead of failing."""
    from donto_pg import api, loader

    first = [{"role": "user", "content": "I live in Berlin.", "timestamp": "2024-03-01"},
             {"role": "assistant", "content": "Nice."}]
    changed = [{"role": "user", "content": "I live in Rome.", "timestamp": "2024-03-01"},
               {"role": "assistant", "content": "Nice."}]
    old = api.add_conversation(db, first, "chat:t/raced", embed=False)
    db.commit()
    other = connect()
    other.commit()
    checked = loader.extends_latest

    def then_another_load_commits(conn, *args):  # a real second session, in between
        extends = checked(conn, *args)
        if conn is db:
            api.add_conversation(other, changed, "chat:t/raced", embed=False)
        return extends

    monkeypatch.setattr(loader, "extends_latest", then_another_load_commits)
    new = api.add_conversation(db, first + [{"role": "user", "content": "Thanks!"}],
                               "chat:t/raced", embed=False)
    revisions = [r for (r,) in db.execute(
        "select revision_id from donto.revision join donto.document using (document_id) "
        "where iri = 'chat:t/raced' order by revision_id")]
    assert revisions[0] == old and revisions[-1] == new and len(revisions) == 3
    assert db.execute("select count(*) from donto.revision_extension").fetchone() == (0,)
    assert db.execute("select count(*) from donto.turn where revision_id = %s",
                      (new,)).fetchone() == (3,)
    hits = api.recall(db, "where do I live", document="chat:t/raced", arms="lexical")
    assert hits and {h.revision_id for h in hits} == {new} and "Berlin" in hits[0].text
    db.commit()


def test_undated_appended_turns_are_dated_as_a_load_dates_them(db):
    """Turns appended without a date take the latest date of their session, as
    add_conversation dates them: appending and then adding the whole conversation is one
    revision (same text, same turn table), and adding it longer still appends."""
    from donto_pg import api, loader

    u0 = {"role": "user", "content": "I live in Berlin.", "timestamp": "2024-03-02"}
    a1 = {"role": "assistant", "content": "Nice."}
    u2 = {"role": "user", "content": "I moved to Paris."}
    first = api.add_conversation(db, [u0, a1], "chat:t/dates", embed=False)
    appended = loader.append_turns(db, "chat:t/dates", [{"role": "user",
                                                        "content": u2["content"]}])
    db.commit()
    assert db.execute("select time_anchor::text from donto.turn where revision_id = %s "
                      "order by seq", (appended,)).fetchall() == [("2024-03-02",)] * 3
    db.commit()
    assert api.add_conversation(db, [u0, a1, u2], "chat:t/dates", embed=False) == appended
    longer = api.add_conversation(db, [u0, a1, u2, a1], "chat:t/dates", embed=False)
    assert db.execute("select extends_revision_id from donto.revision_extension "
                      "where revision_id = %s", (longer,)).fetchone() == (appended,)
    assert first != appended
    db.commit()


def test_a_session_dated_only_after_its_first_appended_turns_keeps_them_undated(db):
    """Dates are fixed when turns are stored. A whole load dates a session's undated first
    turns by the session's first date after them; turns appended before that date was
    known stay undated. So the whole conversation loaded afterwards is another text: a
    changed conversation, which supersedes the appended one (README, "Conversations that
    grow")."""
    from donto_pg import api, loader

    u0 = {"role": "user", "content": "I live in Berlin."}
    a1 = {"role": "assistant", "content": "Nice."}
    u2 = {"role": "user", "content": "I moved to Paris.", "timestamp": "2024-03-02"}
    api.add_conversation(db, [u0, a1], "chat:t/late-date", embed=False)
    appended = loader.append_turns(db, "chat:t/late-date", [
        {"role": "user", "content": u2["content"], "date": "2024-03-02"}])
    db.commit()
    anchors = "select time_anchor::text from donto.turn where revision_id = %s order by seq"
    assert db.execute(anchors, (appended,)).fetchall() == [(None,), (None,), ("2024-03-02",)]
    db.commit()
    whole = api.add_conversation(db, [u0, a1, u2], "chat:t/late-date", embed=False)
    assert whole != appended
    assert db.execute(anchors, (whole,)).fetchall() == [("2024-03-02",)] * 3
    assert db.execute("select count(*) from donto.revision_extension where revision_id = %s",
                      (whole,)).fetchone() == (0,)
    db.commit()


def test_a_grown_conversation_reuses_its_standing_vectors(db):
    """An append cuts the standing statements of the longer revision again (the ones
    recall reads); `embed` gives each the vector the same document's statement of the
    same text already has and encodes only the new ones. Another document's vector for
    the same words is not taken (its writer is not this document's)."""
    from donto_pg import api
    from donto_pg.embed import embed_pending

    rule = "Always answer me in French when I ask about recipes."
    chat = [{"role": "user", "content": rule, "timestamp": "2024-03-02"},
            {"role": "assistant", "content": "D'accord."}]
    api.add_conversation(db, chat, "chat:t/rules", embed=False)
    first = embed_pending(db, progress=False)
    assert (first.standing, first.conditions, first.standing_reused) == (1, 1, 0)
    more = chat + [{"role": "user", "content": "Never use metric units when I ask about "
                                               "baking."}]
    api.add_conversation(db, more, "chat:t/rules", embed=False)
    grown = embed_pending(db, progress=False)
    assert (grown.standing, grown.conditions, grown.standing_reused) == (2, 2, 2)
    vectors = db.execute(
        "select count(distinct v.embedding::text), count(*) from donto.x_standing_vector as v "
        "join donto.statement as s using (statement_id) where s.object_lit ->> 'v' = %s",
        (rule,)).fetchone()
    assert vectors == (1, 2)  # the same vector for the same words in both revisions
    db.commit()
    api.add_conversation(db, chat, "chat:t/other", embed=False)
    other = embed_pending(db, progress=False)
    assert (other.standing, other.standing_reused) == (1, 0)
    hits = api.recall(db, "a recipe for soup", document="chat:t/rules")
    assert [h.text for h in hits if h.vector_rank is None and h.lexical_rank is None
            ] == [rule]  # the standing block, by the reused vector
    db.commit()


def test_extracting_a_grown_conversation_extracts_only_its_new_blocks(db):
    """Found by review: an append copies the blocks before the last session under new
    ids, so the next `extract` sent every block of the conversation to the provider again
    and stored every claim twice."""
    from donto_pg import extract

    rev1 = load(db, conversation(OLD))
    info = db.info

    def factory() -> psycopg.Connection:
        return psycopg.connect(host=info.host, port=info.port, user=info.user,
                               dbname=info.dbname)

    def run() -> extract.ExtractionReport:
        return extract.run_extraction(factory, conversations=[IRI], alarm_after=0,
                                      concurrency=1)

    first = run()
    assert first.ok and first.progress.done == len(blocks(db, rev1)) > 0
    rev2 = loader.append_turns(db, IRI, messages(conversation(NEW), OLD))
    db.commit()
    old_spans = {b[1:4] + b[5:7] for b in blocks(db, rev1)}
    new_spans = [b[1:4] + b[5:7] for b in blocks(db, rev2)]
    fresh = [s for s in new_spans if s not in old_spans]
    assert 0 < len(fresh) < len(new_spans)
    second = run()
    assert second.run_id == first.run_id and second.ok
    assert second.progress.done == len(fresh)  # the new blocks only
    assert run().progress.total == 0
    current = db.execute(
        "select s.subject, s.predicate, s.object_lit ->> 'v', s.char_start "
        "from donto.x_claim as x join donto.statement_current as s using (statement_id) "
        "join donto.extraction_block as b using (block_id) where b.revision_id in (%s, %s)",
        (rev1, rev2)).fetchall()
    assert current and len(current) == len(set(current))  # no claim twice
    db.commit()


def test_what_was_retracted_by_hand_stays_retracted_when_the_conversation_grows(db):
    """Found by review: the next message brought a retracted chunk and a retracted standing
    instruction back (the re-cut last window and the longer revision's standing statements
    are new statements)."""
    from donto_pg import api

    iri = "chat:t/forget"
    rule = "Always include audiobook narrator details when I ask about audiobooks."
    secret = "My password hint is blue-falcon."
    filler = "Audiobooks are a fine way to spend a commute, and libraries lend them.\n" * 20
    rev1 = api.add_conversation(db, [
        {"role": "user", "content": rule, "timestamp": "2024-03-02"},
        {"role": "assistant", "content": filler},
        {"role": "user", "content": secret},
        {"role": "assistant", "content": "Noted."}], iri, embed=False)
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    chunk, = db.execute("select c.statement_id from donto.revision_chunks(%s) c "
                        "where c.chunk_text like %s", (rev1, f"%{secret}%")).fetchone()
    instruction, = db.execute("select statement_id from donto.standing(%s) "
                              "where statement_text = %s", (ctx, rule)).fetchone()
    kept, = db.execute("select c.statement_id from donto.revision_chunks(%s) c "
                       "where c.chunk_text like %s", (rev1, f"%{rule}%")).fetchone()
    assert kept != chunk  # two windows: the secret's is the last
    db.execute("select donto.retract(%s, 'forget my password hint')", (chunk,))
    db.execute("select donto.retract(%s, 'stop the narrator details')", (instruction,))
    db.commit()
    before = db.execute("select now()").fetchone()[0]
    db.commit()

    rev2 = loader.append_turns(db, iri, [{"role": "user", "content": "Also, I like tea."},
                                         {"role": "assistant", "content": "Tea it is."}])
    db.commit()
    assert rev2 != rev1
    current = db.execute("select c.chunk_text, c.statement_id = %s from "
                         "donto.revision_chunks(%s) c join donto.statement_current s "
                         "using (statement_id)", (kept, rev2)).fetchall()
    assert current and not any(secret in text for text, _ in current)
    assert [k for _, k in current] == [True]  # the untouched window is kept as it was
    carried = db.execute(
        "select r.reason, r.by_hand, s.predicate from donto.retraction r "
        "join donto.statement s using (statement_id) where s.derived_from_revision = %s "
        "and r.reason like 'carried over%%' order by s.predicate", (rev2,)).fetchall()
    assert carried == [
        (f"carried over from statement {chunk}: forget my password hint", True,
         "mem:episodic/chunk"),
        (f"carried over from statement {instruction}: stop the narrator details", True,
         "mem:standing/instruction")]
    assert not db.execute("select 1 from donto.standing(%s) where statement_text = %s",
                          (ctx, rule)).fetchall()
    assert db.execute("select count(*) from donto.retraction where by_hand").fetchone() == (4,)
    hits = db.execute("select chunk_text from donto.recall_by_vector(null, 'password hint', "
                      "k => 5, context => %s, arms => 'lexical')", (ctx,)).fetchall()
    assert not any(secret in h[0] for h in hits)
    # growing it again carries the retraction on; as_of before the first append still
    # sees the old revision's statements as they were then (retracted by then)
    rev3 = loader.append_turns(db, iri, [{"role": "user", "content": "And coffee."}])
    db.commit()
    assert not any(secret in t for t, in db.execute(
        "select c.chunk_text from donto.revision_chunks(%s) c "
        "join donto.statement_current s using (statement_id)", (rev3,)).fetchall())
    assert not db.execute("select 1 from donto.standing(%s, as_of => %s) "
                          "where statement_text = %s", (ctx, before, rule)).fetchall()
    db.commit()


def test_a_grown_last_session_is_extracted_again_without_its_forgotten_or_doubled_claims(db):
    """Found by review: an append inside the last session cuts its block again, and the
    run extracted it again; the claim retracted by hand ("forget where I live") came back
    as a current claim, and every other claim of the block was current twice."""
    from donto_pg import api, extract

    iri = "chat:t/forget-claims"
    rev1 = api.add_conversation(db, [
        {"role": "user", "content": "I live in Oslo. My dog is named Rex.",
         "timestamp": "2024-05-01"},
        {"role": "assistant", "content": "Nice."}], iri, embed=False)
    info = db.info

    def run() -> extract.ExtractionReport:
        return extract.run_extraction(
            lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                    dbname=info.dbname),
            conversations=[iri], alarm_after=0, concurrency=1)

    def current() -> list[tuple]:
        rows = db.execute(
            "select s.object_lit ->> 'v', s.char_start, s.derived_from_revision "
            "from donto.x_claim as x join donto.statement_current as s using (statement_id) "
            "order by 2, 1").fetchall()
        db.commit()
        return rows

    assert run().ok
    first = current()
    assert {o for o, _, _ in first} == {"Oslo", "named Rex"}, first
    oslo, = db.execute("select x.statement_id from donto.x_claim as x join "
                       "donto.statement as s using (statement_id) "
                       "where s.object_lit ->> 'v' = 'Oslo'").fetchone()
    db.execute("select donto.retract(%s, 'forget where I live')", (oslo,))
    db.commit()
    rev2 = loader.append_turns(db, iri, [{"role": "user", "content": "Thanks."},
                                         {"role": "assistant", "content": "Sure."}])
    db.commit()
    again = run()
    assert again.ok and again.progress.done >= 1  # the re-cut block of the last session
    now = current()
    assert "Oslo" not in {o for o, _, _ in now}, now
    assert [(o, c) for o, c, _ in now] == [(o, c) for o, c, _ in first if o != "Oslo"]
    assert {r for _, _, r in now} == {rev2}  # the re-cut block's claims replace rev1's
    reasons = dict(db.execute(
        "select s.object_lit ->> 'v', r.reason from donto.retraction as r "
        "join donto.statement as s using (statement_id) join donto.x_claim using "
        "(statement_id) where s.derived_from_revision = %s", (rev2,)).fetchall())
    assert reasons["Oslo"] == f"carried over from statement {oslo}: forget where I live"
    superseded = db.execute(
        "select count(*) from donto.retraction as r join donto.statement as s "
        "using (statement_id) where s.derived_from_revision = %s and r.reason like "
        "'superseded: block %% was cut again as block %%'", (rev1,)).fetchone()[0]
    assert superseded == len(first) - 1
    assert run().progress.total == 0 and current() == now  # idempotent


def test_what_was_retracted_by_hand_stays_retracted_when_the_conversation_changes(db):
    """Found by review: loading the conversation again with one character changed
    elsewhere ("Okay." -> "Okay!") is a changed conversation, a new revision that
    supersedes the old one; its chunks, standing statements and claims are new statements,
    and what was retracted by hand came back current (the password hint at place 1 of
    recall, the retracted instruction in standing memory, the claim after extract)."""
    from donto_pg import api, extract

    iri = "chat:t/forget-changed"
    rule = "Always use imperial units when I ask about recipes."
    secret = "My password hint is blue dog."

    def chat(reply: str) -> list[dict]:
        # (the secret in a chunk of its own: forgetting a chunk forgets every claim and
        # standing statement over its words, migration 034)
        return [{"role": "user", "content": "I live in Oslo.", "timestamp": "2024-05-01"},
                {"role": "assistant", "content": "Fine. " * 220},
                {"role": "user", "content": secret},
                {"role": "assistant", "content": reply + " " + "Noted. " * 190},
                {"role": "user", "content": rule},
                {"role": "assistant", "content": "Okay."}]

    info = db.info

    def extract_all() -> extract.ExtractionReport:
        return extract.run_extraction(
            lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                    dbname=info.dbname),
            conversations=[iri], alarm_after=0, concurrency=1)

    rev1 = api.add_conversation(db, chat("Okay."), iri, embed=False)
    assert extract_all().ok
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    chunk, = db.execute("select c.statement_id from donto.revision_chunks(%s) c "
                        "where c.chunk_text like %s", (rev1, f"%{secret}%")).fetchone()
    instruction, = db.execute("select statement_id from donto.standing(%s) "
                              "where statement_text = %s", (ctx, rule)).fetchone()
    oslo, = db.execute("select statement_id from donto.x_claim join donto.statement "
                       "using (statement_id) where object_lit ->> 'v' = 'Oslo'").fetchone()
    for sid, why in ((chunk, "forget my password hint"), (instruction, "forget imperial"),
                     (oslo, "forget where I live")):
        db.execute("select donto.retract(%s, %s)", (sid, why))
    db.commit()

    rev2 = api.add_conversation(db, chat("Okay!"), iri, embed=False)  # an edit elsewhere
    assert rev2 != rev1 and extract_all().ok
    assert not any(secret in t for t, in db.execute(
        "select c.chunk_text from donto.revision_chunks(%s) c "
        "join donto.statement_current s using (statement_id)", (rev2,)).fetchall())
    assert not db.execute("select 1 from donto.recall_by_vector(null, 'password hint', k => 5, "
                          "context => %s, arms => 'lexical') where chunk_text like %s",
                          (ctx, f"%{secret}%")).fetchall()
    assert not db.execute("select 1 from donto.standing(%s) where statement_text = %s",
                          (ctx, rule)).fetchall()
    claims = db.execute("select s.object_lit ->> 'v' from donto.x_claim join "
                        "donto.statement_current as s using (statement_id) "
                        "where s.derived_from_revision = %s", (rev2,)).fetchall()
    # none current: Oslo carried from its claim, the password hint from its chunk, whose
    # words are forgotten (migration 034; before it the hint's claim stayed current)
    assert claims == []
    # a block of rev2 that holds the forgotten hint is done with: not extracted (forget-3)
    held = [b for b, in db.execute(
        "select b.block_id from donto.extraction_block b where b.revision_id = %s and "
        "(donto._forgotten_text(%s, null) && int4range(b.char_start, b.char_end) or "
        "(b.prefix_start is not null and donto._forgotten_text(%s, null) && "
        "int4range(b.prefix_start, b.prefix_end)))", (rev2, rev2, rev2)).fetchall()]
    assert held
    assert db.execute("select count(*) from donto.x_claim where block_id = any(%s)",
                      (held,)).fetchone() == (0,)
    extracted = db.execute("select count(*) from donto.x_claim join donto.statement s using "
                           "(statement_id) where s.derived_from_revision = %s",
                           (rev2,)).fetchone()[0]
    carried = sorted(r for r, in db.execute(
        "select r.reason from donto.retraction r join donto.statement s using (statement_id) "
        "where s.derived_from_revision = %s and r.by_hand", (rev2,)).fetchall())
    assert set(carried) == {f"carried over from statement {chunk}: forget my password hint",
                            f"carried over from statement {instruction}: forget imperial"} | (
        {f"carried over from statement {oslo}: forget where I live"} if extracted else set())
    db.commit()


def test_a_forgotten_window_edited_hides_its_own_place_only_and_does_not_widen(db):
    """Found by review: a chunk forgotten, then a one-character edit inside it, hid 173
    chunks of a BEAM-500K conversation: its line "### Example Conversation" was looked
    for all over the text. And each later edit hid more (624 -> 664 -> 685 -> 700
    chunks), since carried retractions were carried again. A line diff maps the
    forgotten text to where it stands now, from the text it was forgotten in."""
    from donto_pg import api

    iri = "chat:t/forget-edit"

    def chat(verb: str, tail: str) -> list[dict]:
        msgs = []
        for i in range(40):
            msgs.append({"role": "user", "content": f"Question {i} about the garden.\n"
                         "### Example Conversation\nthe roses and the hedge.",
                         "timestamp": "2024-05-01"})
            msgs.append({"role": "assistant", "content": f"Answer {i}:\n"
                         "### Example Conversation\n"
                         + f"Answer {i}: prune in March, water in the evening. " * 8})
        msgs[41]["content"] += f"\nso Scott {verb} comfortable sharing his thoughts"
        msgs[-1]["content"] += tail
        return msgs

    rev1 = api.add_conversation(db, chat("feels", ""), iri, embed=False)
    (chunk,) = db.execute("select statement_id from donto.revision_chunks(%s) "
                          "where chunk_text like '%%so Scott feels%%'", (rev1,)).fetchone()
    db.execute("select donto.retract(%s, 'forget the Scott advice')", (chunk,))
    total = db.execute("select count(*) from donto.revision_chunks(%s)", (rev1,)).fetchone()[0]
    db.commit()
    hidden = []
    for k, (verb, tail) in enumerate((("feel", ""), ("feel", " ok"), ("feel", " ok ok"))):
        rev = api.add_conversation(db, chat(verb, tail), iri, embed=False)
        gone = db.execute("select c.chunk_text from donto.revision_chunks(%s) c join "
                          "donto.retraction r using (statement_id) where r.by_hand",
                          (rev,)).fetchall()
        db.commit()
        assert any("so Scott feel comfortable" in t for t, in gone), k
        hidden.append(len(gone))
    assert total >= 15 and 1 <= hidden[0] <= 2, hidden  # its place, not every heading
    assert hidden == [hidden[0]] * 3  # and no wider at every edit


def test_claims_reconciled_across_runs_and_revisions_extracted_out_of_order(db):
    """Found by review: (1) a retraction of one run's wrong claim was carried onto another
    run's claim with another predicate on the same quote; (2) extracting a later revision
    of a grown conversation, then an earlier one, left the run's claims current twice."""
    from donto_pg import api, extract

    iri = "chat:t/reconcile"
    rev1 = api.add_conversation(db, [
        {"role": "user", "content": "I live in Oslo. My dog is named Rex.",
         "timestamp": "2024-05-01"}, {"role": "assistant", "content": "Nice."}], iri,
        embed=False)
    rev2 = loader.append_turns(db, iri, [{"role": "user", "content": "I prefer tea."},
                                         {"role": "assistant", "content": "Sure."}])
    db.commit()
    info = db.info

    def run(rev: int) -> extract.ExtractionReport:
        return extract.run_extraction(
            lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                    dbname=info.dbname),
            revision_ids=[rev], alarm_after=0, concurrency=1)

    assert run(rev2).ok and run(rev1).ok  # the later revision first
    current = db.execute(
        "select s.object_lit ->> 'v', s.char_start from donto.x_claim join "
        "donto.statement_current as s using (statement_id)").fetchall()
    assert current and len(current) == len(set(current)), current
    stale = db.execute("select count(*) from donto.retraction where reason like "
                       "'superseded: block %% of revision %%, extracted before it'"
                       ).fetchone()[0]
    assert stale > 0
    # (1) another run (an arm, as a second model makes) on the same quote
    oslo, = db.execute("select statement_id from donto.x_claim join donto.statement_current "
                       "using (statement_id) where object_lit ->> 'v' = 'Oslo'").fetchone()
    db.execute("select donto.retract(%s, 'wrong: not a city')", (oslo,))
    params = db.execute("select params from donto.extraction_run").fetchone()[0]
    other = db.execute("select run_id from donto.start_extraction_run(%s, %s)", (json.dumps(
        [{"name": "fake", "model": "fake-llm-1", "base_url": "http://127.0.0.1:9"}]),
        json.dumps(params))).fetchone()[0]
    block, = db.execute("select block_id from donto.extraction_block where revision_id = %s "
                        "order by seq desc limit 1", (rev2,)).fetchone()
    db.execute("select donto.ingest_extraction(%s, %s, %s)", (block, other, json.dumps([
        {"subject": "user", "predicate": "resides in", "object": "Oslo",
         "quote": "I live in Oslo.", "turn": 0, "hypothesis": False}])))
    db.commit()
    assert db.execute("select count(*) from donto.x_claim join donto.statement_current "
                      "using (statement_id) where run_id = %s", (other,)).fetchone() == (1,)
    db.commit()
