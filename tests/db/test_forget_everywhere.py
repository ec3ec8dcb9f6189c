"""Forgetting is about text (migration 034), with real logins: the document's login
retracts the recall chunk that holds a secret, a donto_reader login asks.

Found by a security review: retracting one chunk hid that chunk alone. Recall's turn
blocks read the whole user turn back from the body around the next chunk, the standing
statement over the same sentence stayed in force (and the next append's standing statement
over it too), and so did the claims extracted from it.
"""

from __future__ import annotations

import pytest
from psycopg import errors

from donto_pg import api, loader
from donto_pg.embed import embed_pending

SECRET = "4417"
TURNS_Q = "Can you list in order what I mentioned about my bank?"


def _long_turn_chat() -> list[dict]:
    """A user turn of ~1,900 characters that starts inside one 1,200-character window and
    ends in the next; only its first sentence holds the PIN."""
    filler = "The weather in the harbour town was mild and the ferries ran on time. " * 18
    rest = ("I also asked the bank about the mortgage rates and the savings account, "
            "and the branch manager explained the fees for the transfers abroad. ") * 12
    return [
        {"role": "user", "content": "I mentioned my bank before: I opened an account at the "
         "harbour bank last spring.", "timestamp": "2024-03-02"},
        {"role": "assistant", "content": filler},
        {"role": "user", "content": f"My bank PIN is {SECRET}, keep it secret. " + rest},
        {"role": "assistant", "content": "Understood, the bank matters are noted. " + filler},
        {"role": "user", "content": "I mentioned my bank card was renewed in May."},
        {"role": "assistant", "content": "Good to know about the card."},
    ]


def _owner_and_reader(logins):
    _, as_alice = logins()
    _, as_reader = logins("donto_reader")
    a = as_alice()
    a.commit()
    return a, as_reader()


def _texts(conn, sql: str, args: tuple) -> list[str]:
    rows = [r[0] for r in conn.execute(sql, args).fetchall()]
    conn.commit()
    return rows


def _now(conn):
    t = conn.execute("select now()").fetchone()[0]
    conn.commit()
    return t


def test_a_forgotten_chunk_is_not_read_back_through_the_turn_blocks(db, logins):
    a, r = _owner_and_reader(logins)
    iri = "chat:forget/pin-turn"
    rev = api.add_conversation(a, _long_turn_chat(), iri, embed=False)
    embed_pending(db, progress=False)
    db.commit()
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    chunks = db.execute("select statement_id, char_start, char_end, chunk_text from "
                        "donto.revision_chunks(%s) order by char_start", (rev,)).fetchall()
    db.commit()
    holding = [c for c in chunks if SECRET in c[3]]
    assert len(holding) == 1
    sid, start, end, _ = holding[0]
    turn = db.execute("select header_start, char_end from donto.turn where revision_id = %s "
                      "and role = 'user' and header_start <= %s order by header_start desc "
                      "limit 1", (rev, start + 20)).fetchone()
    assert turn[1] > end  # the turn runs on into the next chunk
    recall = ("select chunk_text from donto.recall(%s, k => 6, context => %s"
              "{}) order by place")
    payload = "select donto.recall_payload(%s, 2000, k => 6, context => %s{})::text"
    # before: the reader finds the PIN (the bitemporal record of what was known then)
    assert any(SECRET in t for t in _texts(r, recall.format(""), (TURNS_Q, ctx)))
    before = _now(db)

    a.execute("select donto.retract(%s, 'forget my PIN')", (sid,))
    a.commit()
    after = _now(db)
    rows = _texts(r, recall.format(""), (TURNS_Q, ctx))
    assert rows and not any(SECRET in t for t in rows), rows
    # the rest of the long turn is still there (clipped, not dropped)
    assert any("mortgage rates" in t for t in rows), rows
    for q in (TURNS_Q, "what is my bank PIN?", "harbour bank account"):
        for arms in ("hybrid", "lexical"):
            assert not any(SECRET in t for t in _texts(
                r, "select chunk_text from donto.recall(%s, k => 10, context => %s, "
                "arms => %s)", (q, ctx, arms)))
        assert SECRET not in _texts(r, payload.format(""), (q, ctx))[0]
    # as_of: before the retraction the text is there, after it not
    assert any(SECRET in t for t in _texts(r, recall.format(", as_of => %s"),
                                           (TURNS_Q, ctx, before)))
    assert SECRET in _texts(r, payload.format(", as_of => %s"), (TURNS_Q, ctx, before))[0]
    assert not any(SECRET in t for t in _texts(r, recall.format(", as_of => %s"),
                                               (TURNS_Q, ctx, after)))
    assert SECRET not in _texts(r, payload.format(", as_of => %s"), (TURNS_Q, ctx, after))[0]


def test_a_forgotten_chunk_takes_its_standing_statement_now_and_after_an_append(db, logins):
    a, r = _owner_and_reader(logins)
    iri = "chat:forget/pin-standing"
    chat = [{"role": "user", "content": "From now on always remember that my bank PIN is "
             f"{SECRET} when I ask about my bank.", "timestamp": "2024-03-02"},
            {"role": "assistant", "content": "I will remember it."}]
    rev = api.add_conversation(a, chat, iri, embed=False)
    embed_pending(db, progress=False)
    db.commit()
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    standing = "select statement_text from donto.standing(%s)"
    assert any(SECRET in t for t in _texts(r, standing, (ctx,)))
    (sid,) = db.execute("select statement_id from donto.revision_chunks(%s) "
                        "where chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    db.commit()
    a.execute("select donto.retract(%s, 'forget my PIN')", (sid,))
    a.commit()
    assert not any(SECRET in t for t in _texts(r, standing, (ctx,)))
    rows = _texts(r, "select chunk_text from donto.recall('what is my bank PIN?', k => 5, "
                  "context => %s)", (ctx,))
    assert not any(SECRET in t for t in rows), rows
    # carried as the carried ones are (not by hand of its own: it does not widen)
    reasons = _texts(db, "select r.reason from donto.retraction r join donto.x_standing x "
                     "using (statement_id) where x.revision_id = %s", (rev,))
    assert reasons == [f"carried over from statement {sid}: forget my PIN"]

    rev2 = loader.append_turns(a, iri, [{"role": "user", "content": "Also, I like tea."},
                                        {"role": "assistant", "content": "Tea it is."}])
    a.commit()
    assert rev2 != rev
    embed_pending(db, progress=False)
    db.commit()
    assert not any(SECRET in t for t in _texts(r, standing, (ctx,)))
    assert _texts(db, "select count(*) from donto.x_standing x where x.revision_id = %s "
                  "and not exists (select 1 from donto.retraction t where "
                  "t.statement_id = x.statement_id) and x.char_start < 90", (rev2,)) == [0]
    for q in ("what is my bank PIN?", TURNS_Q):
        assert not any(SECRET in t for t in _texts(
            r, "select chunk_text from donto.recall(%s, k => 5, context => %s)", (q, ctx)))
        assert SECRET not in _texts(
            r, "select donto.recall_payload(%s, 2000, k => 5, context => %s)::text",
            (q, ctx))[0]
    # the recall keys over the forgotten words find nothing
    assert _texts(db, "select count(*) from donto._recall_keys(null, 'bank PIN', null, null, "
                  "0, 10, false, true)", ()) == [0]


def test_a_forgotten_chunk_takes_the_claims_over_it_extracted_before_and_after(db, logins):
    import psycopg

    from donto_pg import extract

    a, r = _owner_and_reader(logins)
    iri = "chat:forget/pin-claims"
    chat = [{"role": "user", "content": f"I live in Oslo. My bank PIN is {SECRET}.",
             "timestamp": "2024-05-01"},
            {"role": "assistant", "content": "Noted."}]
    rev = api.add_conversation(a, chat, iri, embed=False)
    info = db.info

    def run() -> extract.ExtractionReport:
        return extract.run_extraction(
            lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                    dbname=info.dbname),
            conversations=[iri], alarm_after=0, concurrency=1)

    assert run().ok
    claims = ("select s.object_lit ->> 'v' from donto.x_claim x join donto.statement_current s "
              "using (statement_id) where s.derived_from_revision = %s")
    assert _texts(r, claims, (rev,))  # the baseline extractor made claims over the turn
    (sid,) = db.execute("select statement_id from donto.revision_chunks(%s)",
                        (rev,)).fetchone()
    db.commit()
    a.execute("select donto.retract(%s, 'forget everything I said there')", (sid,))
    a.commit()
    assert _texts(r, claims, (rev,)) == []
    # the conversation grows and its re-cut block is extracted after the retraction
    rev2 = api.add_conversation(a, chat + [{"role": "user", "content": "Thanks."}], iri,
                                embed=False)
    assert run().ok
    assert _texts(r, claims, (rev2,)) == []


def test_a_writer_cannot_forget_anothers_text(db, logins):
    """Retraction hides only what the retracting login may add to: bob cannot retract
    alice's chunk, and mallory, who registered the start of the owner's text first and
    retracted it, hides nothing of the owner's load."""
    a, r = _owner_and_reader(logins)
    iri = "chat:forget/alice"
    rev = api.add_conversation(a, _long_turn_chat(), iri, embed=False)
    (sid,) = db.execute("select statement_id from donto.revision_chunks(%s) "
                        "where chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    db.commit()
    _, as_bob = logins()
    b = as_bob()
    with pytest.raises(errors.InsufficientPrivilege):
        b.execute("select donto.retract(%s, 'hide it')", (sid,))
    b.rollback()

    _, as_mallory = logins()
    m = as_mallory()
    m.commit()
    chat = _long_turn_chat()
    squat = api.add_conversation(m, chat[:3], "chat:forget/owners", embed=False)
    (msid,) = m.execute("select statement_id from donto.revision_chunks(%s) "
                        "where chunk_text like %s", (squat, f"%{SECRET}%")).fetchone()
    m.execute("select donto.retract(%s, 'hide it')", (msid,))
    m.commit()
    own = api.add_conversation(db, chat, "chat:forget/owners", embed=False)
    db.commit()
    assert _texts(db, "select donto._forgotten_text(%s, null)::text", (own,)) == ["{}"]
    assert _texts(db, "select count(*) from donto.statement s join donto.retraction t "
                  "using (statement_id) where s.derived_from_revision = %s", (own,)) == [0]
    octx = db.execute("select donto.recall_context_iri('chat:forget/owners')").fetchone()[0]
    db.commit()
    assert any(SECRET in t for t in _texts(
        r, "select chunk_text from donto.recall_by_vector(null, 'bank PIN', k => 5, "
        "context => %s, arms => 'lexical')", (octx,)))
    # and the helpers that retract are not a writer's to call
    doc = db.execute("select document_id from donto.revision where revision_id = %s",
                     (rev,)).fetchone()[0]
    db.commit()
    # nor the lock a forgetting takes (a writer holding it would stall the owner's filings)
    for call, arg in (("select donto._forget_in(%s, null)", rev),
                      ("select donto._lock_forgetting(%s)", doc)):
        with pytest.raises(errors.InsufficientPrivilege):
            b.execute(call, (arg,))
        b.rollback()
