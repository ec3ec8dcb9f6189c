"""Recall keys per user turn (migration 017): the projection is anchored, idempotent and
append-only, `donto-pg embed` gives it vectors (resumably), and recall's key arms find a
chunk by the short user turn it holds."""

from __future__ import annotations

import psycopg
import pytest

from donto_pg import loader
from donto_pg.core import encoder
from donto_pg.embed import embed_pending
from tests.conftest import write_chat

pytestmark = pytest.mark.slow

CTX = "ctx:memory/episodic/beam/100K/1"
IRI = "beam:100K/1"
FILLER = ("The weather report covered rain in the north, sun in the south and wind along the "
          "coast for the whole of next week, with temperatures near the seasonal average. ") * 8
NEEDLE = "My sister Margarethe adopted a grey parrot called Biscuit last spring."


def _batch(n: int, date: str, user_texts: list[str], first_id: int) -> dict:
    turns, i = [], first_id
    for text in user_texts:
        turns.append([
            {"role": "user", "id": i, "content": text, "question_type": "main_question",
             **({"time_anchor": date} if not turns else {})},
            {"role": "assistant", "id": i + 1, "content": FILLER},
        ])
        i += 2
    return {"batch_number": n, "time_anchor": None, "turns": turns}


USERS = ["What should I pack for a week of hiking? ->-> 1,1",
         f"{NEEDLE} What do parrots eat? ->-> 1,2",
         "Can you suggest a light dinner? ->-> 1,3",
         "Which bus goes to the harbour? ->-> 1,4"]


def _load(conn: psycopg.Connection, root) -> int:
    d = write_chat(root, "1", [_batch(1, "January-10-2024", USERS, 0)])
    res = loader.load_beam(conn, str(d.parent.parent.parent))
    assert [r.ok for r in res] == [True], res[0].error
    conn.commit()
    return res[0].revision_id


def _keys(conn, rev: int) -> list[tuple]:
    return conn.execute(
        "select k.key_id, k.header_start, k.char_start, k.char_end, k.key_text, t.role, "
        "t.header_start, t.char_start, t.char_end from donto.x_turn_key as k "
        "join donto.turn as t on t.revision_id = k.revision_id and t.seq = k.turn_seq "
        "where k.revision_id = %s order by k.turn_seq", (rev,)).fetchall()


def test_keys_are_anchored_idempotent_and_embedded(db, tmp_path) -> None:
    rev = _load(db, tmp_path)
    body = db.execute("select body from donto.revision where revision_id = %s",
                      (rev,)).fetchone()[0]
    keys = _keys(db, rev)
    assert len(keys) == len(USERS)  # one per user turn, none for the assistant's
    for _, hs, cs, ce, text, role, t_hs, t_cs, t_ce in keys:
        assert role == "user" and (hs, cs, ce) == (t_hs, t_cs, t_ce)
        assert body[cs:ce] == text  # offsets give the exact text
    assert NEEDLE in keys[1][4]
    # Idempotent: again, directly or through project_recall, adds nothing.
    assert db.execute("select donto.project_turn_keys(%s)", (rev,)).fetchone()[0] == 0
    db.execute("select donto.project_recall(%s)", (rev,))
    assert len(_keys(db, rev)) == len(USERS)
    db.commit()
    # Append-only (I3): a key cannot be changed.
    with pytest.raises(psycopg.Error):
        db.execute("update donto.x_turn_key set key_text = 'x'")
    db.rollback()

    rep = embed_pending(db, progress=False)
    assert rep.keys == len(USERS)
    assert embed_pending(db, progress=False).keys == 0  # resumable: nothing left to do
    n = db.execute("select count(*) from donto.x_turn_key_vector").fetchone()[0]
    assert n == len(USERS)
    db.commit()


def test_ingest_refuses_what_is_not_a_key(db, tmp_path) -> None:
    rev = _load(db, tmp_path)
    embed_pending(db, progress=False)
    mid = db.execute("select donto.embedding_model_id()").fetchone()[0]
    key = _keys(db, rev)[0][0]
    vec = "[" + ",".join(["0.1"] * 384) + "]"
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a recall key"):
        db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                   (mid, [-5], [vec]))
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="384 dimensions"):
        db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)", (mid, [key], ["[1,2]"]))
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="1 ids but 2 vectors"):
        db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                   (mid, [key], [vec, vec]))
    db.rollback()
    # An existing vector is kept.
    assert db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                      (mid, [key], [vec])).fetchone()[0] == 0
    db.rollback()


def _hit(conn, query: str, **settings) -> list[tuple]:
    for name, value in settings.items():
        conn.execute("select set_config(%s, %s, false)", (f"donto.{name}", str(value)))
    vec = list(map(float, encoder.encode([query])[0]))
    rows = conn.execute(
        "select char_start, char_end, vector_rank, lexical_rank from donto.recall_by_vector("
        "%s::vector, %s, k => 4, context => %s, arms => 'vector', pool => 4)",
        (vec, query, CTX)).fetchall()
    conn.rollback()
    return rows


def test_key_arm_finds_the_chunk_holding_the_user_turn(db, tmp_path) -> None:
    rev = _load(db, tmp_path)
    embed_pending(db, progress=False)
    needle = _keys(db, rev)[1]
    q = "What pet does my sister Margarethe have?"
    # The key arm alone: its best key is the needle's turn, reported as the chunk holding
    # the turn's header.
    rows = _hit(db, q, recall_vector_weight=0, recall_key_weight=1)
    assert rows[0][0] <= needle[1] < rows[0][1]
    assert rows[0][2] == 1
    k = db.execute(
        "select statement_id, key_vector_rank, key_lexical_rank from donto._recall_keys("
        "%s::vector, %s, (select context_id from donto.context where iri = %s), null, "
        "donto.embedding_model_id(), 10, true, true) order by key_vector_rank",
        (list(map(float, encoder.encode([q])[0])), q, CTX)).fetchall()
    assert k[0][1] == 1 and k[0][2] == 1  # first by vector and by words ("margareth", ...)
    span = db.execute("select char_start, char_end from donto.statement where statement_id = %s",
                      (k[0][0],)).fetchone()
    assert span[0] <= needle[1] < span[1]
    # As of before the keys existed, the key arms find nothing.
    before = db.execute("select min(created_at) - interval '1 second' "
                        "from donto.x_turn_key").fetchone()[0]
    assert db.execute(
        "select count(*) from donto._recall_keys(%s::vector, %s, null, %s, "
        "donto.embedding_model_id(), 10, true, true)",
        (list(map(float, encoder.encode([q])[0])), q, before)).fetchone()[0] == 0
    db.rollback()


def test_the_lexical_key_arm_is_left_out_above_its_bound(db, tmp_path) -> None:
    """The lexical key arm reads every key of the context: above
    donto.recall_key_lexical_max keys (default 2,500) it is left out, the vector key arm
    stays."""
    _load(db, tmp_path)
    embed_pending(db, progress=False)
    q = "What pet does my sister Margarethe have?"
    call = ("select count(key_vector_rank), count(key_lexical_rank) from donto._recall_keys("
            "%s::vector, %s, (select context_id from donto.context where iri = %s), null, "
            "donto.embedding_model_id(), 10, true, true)")
    args = (list(map(float, encoder.encode([q])[0])), q, CTX)
    vec, lex = db.execute(call, args).fetchone()
    assert vec == len(USERS) and lex >= 1  # 4 keys: both arms
    db.execute("set donto.recall_key_lexical_max = 4")  # still within the bound
    assert db.execute(call, args).fetchone() == (vec, lex)
    db.execute("set donto.recall_key_lexical_max = 3")
    assert db.execute(call, args).fetchone() == (vec, 0)
    db.rollback()


def test_appended_turns_get_keys_of_their_own(db, tmp_path) -> None:
    rev = _load(db, tmp_path)
    first = _keys(db, rev)
    rev2 = loader.append_turns(db, IRI, [
        {"role": "user", "content": "I switched my phone plan to a cheaper one today."},
        {"role": "assistant", "content": "Good choice."}])
    db.commit()
    new = _keys(db, rev2)
    assert len(new) == 1 and "phone plan" in new[0][4]
    # The old keys are unchanged and not repeated in the grown projection.
    assert _keys(db, rev) == first
    n = db.execute("select count(*) from donto.x_turn_key").fetchone()[0]
    assert n == len(USERS) + 1
    db.commit()
