"""Standing memory on a real server: projection, anchoring, superseding, as_of, recall's
standing block, the payload's standing section, readers' access."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import psycopg
import pytest

from donto_pg import beam, loader
from donto_pg.core import standing
from donto_pg.embed import embed_pending, embed_standing, register_model
from tests.conftest import run_cli, write_chat

pytestmark = pytest.mark.slow

CTX = "ctx:memory/episodic/beam/100K/1"
METRIC = "Always use metric units when I ask about recipes."
VEGGIE = "I prefer vegetarian dishes for dinner."
IMPERIAL = "From now on, when I ask about recipes, always use imperial units."
FILLER = ("Pancakes need flour, milk, eggs and a hot pan. Whisk the batter until smooth, rest "
          "it for ten minutes, then cook each side until golden. ") * 6


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


SESSION1 = _batch(1, "January-10-2024",
                  [f"{METRIC} What is a good pancake recipe? ->-> 1,1",
                   f"Thanks. {VEGGIE} ->-> 1,2",
                   "How long should the batter rest? ->-> 1,3"], 0)
SESSION2 = _batch(2, "February-20-2024",
                  [f"{IMPERIAL} Now, how do I make bread? ->-> 2,1",
                   "What oven temperature works best? ->-> 2,2"], 6)


def _load(conn: psycopg.Connection, root, batches) -> int:
    d = write_chat(root, "1", batches)
    res = loader.load_beam(conn, str(d.parent.parent.parent))
    assert [r.ok for r in res] == [True], res[0].error
    conn.commit()
    return res[0].revision_id


def _body(conn, rev: int) -> str:
    return conn.execute("select body from donto.revision where revision_id = %s",
                        (rev,)).fetchone()[0]


def _standing(conn, as_of=None) -> list[tuple]:
    return conn.execute(
        "select statement_id, revision_id, kind, statement_text, superseded_by, valid_time "
        "from donto.standing(%s, as_of => %s)", (CTX, as_of)).fetchall()


def test_projection_is_anchored_and_idempotent(db, tmp_path) -> None:
    rev = _load(db, tmp_path, [SESSION1, SESSION2])
    body = _body(db, rev)
    rows = db.execute(
        "select s.char_start, s.char_end, s.object_lit ->> 'v', s.predicate, x.kind, t.role, "
        "t.char_start, t.char_end from donto.x_standing as x "
        "join donto.statement as s using (statement_id) "
        "join donto.turn as t on t.revision_id = x.revision_id and t.seq = x.turn_seq "
        "where x.revision_id = %s order by x.ord", (rev,)).fetchall()
    assert [r[2] for r in rows] == [METRIC, VEGGIE, IMPERIAL]
    for start, end, text, pred, kind, role, t_start, t_end in rows:
        assert body[start:end] == text  # offsets give the exact text
        assert db.execute("select substring(body from %s + 1 for %s - %s) from donto.revision "
                          "where revision_id = %s", (start, end, start, rev)).fetchone()[0] == text
        assert pred == f"mem:standing/{kind}" and role == "user"
        assert t_start <= start < end <= t_end
    before = db.execute("select count(*) from donto.statement").fetchone()[0]
    assert db.execute("select donto.project_standing(%s)", (rev,)).fetchone()[0] == 3
    assert _load(db, tmp_path / "again", [SESSION1, SESSION2]) == rev
    assert db.execute("select count(*) from donto.statement").fetchone()[0] == before


def test_a_later_instruction_on_the_same_subject_supersedes(db, tmp_path) -> None:
    _load(db, tmp_path, [SESSION1, SESSION2])
    rows = {r[3]: r for r in _standing(db)}
    assert rows[METRIC][4] == rows[IMPERIAL][0]
    assert rows[IMPERIAL][4] is None and rows[VEGGIE][4] is None
    # Valid time: the metric rule held from its session until the imperial one's date.
    lo, hi = db.execute("select lower(%s::daterange)::text, upper(%s::daterange)::text",
                        (rows[METRIC][5], rows[METRIC][5])).fetchone()
    assert (lo, hi) == ("2024-01-10", "2024-02-20")
    assert str(rows[IMPERIAL][5].upper) == "None"


def test_what_is_said_later_supersedes_whatever_date_the_text_gives(db, tmp_path) -> None:
    """Found by review: donto.standing ordered by date, so a session dated in the future
    (or dates that go back) kept an earlier instruction in force over a later one, while
    the projection's valid times followed the order they were said in."""
    future = dict(SESSION1, turns=[[dict(SESSION1["turns"][0][0], time_anchor="May-1-2030"),
                                    SESSION1["turns"][0][1]], *SESSION1["turns"][1:]])
    _load(db, tmp_path, [future, SESSION2])
    rows = {r[3]: r for r in _standing(db)}
    assert rows[METRIC][4] == rows[IMPERIAL][0]  # said later: takes over
    assert rows[IMPERIAL][4] is None
    assert str(rows[METRIC][5].lower) == "2030-05-01" and rows[IMPERIAL][5].upper is None


def test_between_conversations_only_one_login_s_later_word_supersedes(db, logins) -> None:
    """Found by review: in donto.standing() without a context (what recall reads without
    one), a statement in another conversation superseded by its date, and the date came
    from the text: a writer's chat dated 2099 overrode everyone's instruction. Now only
    a conversation of the same login supersedes, by a date no later than it was recorded."""
    from donto_pg import api

    def chat(text: str, day: str) -> list[dict]:
        return [{"role": "user", "content": text, "timestamp": day},
                {"role": "assistant", "content": "Noted."}]

    api.add_conversation(db, chat(METRIC, "2024-01-10"), "chat:owner/a", embed=False)
    _, as_mallory = logins()
    m = as_mallory()
    m.commit()
    api.add_conversation(m, chat(IMPERIAL, "2099-01-01"), "chat:mallory/a", embed=False)

    def superseded() -> list[tuple[str, str | None]]:  # (statement, superseded by)
        rows = db.execute("select statement_id, statement_text, superseded_by "
                          "from donto.standing()").fetchall()
        db.commit()
        text = {sid: t for sid, t, _ in rows}
        return sorted((t, text.get(by)) for _, t, by in rows)

    assert superseded() == [(METRIC, None), (IMPERIAL, None)]
    # the owner's own later conversation supersedes the owner's earlier one
    api.add_conversation(db, chat(IMPERIAL, "2024-02-20"), "chat:owner/b", embed=False)
    assert superseded() == [(METRIC, IMPERIAL), (IMPERIAL, None), (IMPERIAL, None)]


LOCATIONS = "Always include specific locations when I ask about social events."
TICKETS = "Always include ticket prices when I ask about social events."
VENUES = "Always give the exact location of the venue when I ask about social events."


def test_instructions_asking_for_different_things_on_one_subject_both_stay(db, tmp_path) -> None:
    batches = [_batch(1, "March-1-2024", [f"{LOCATIONS} Any concerts? ->-> 1,1"], 0),
               _batch(2, "March-9-2024", [f"{TICKETS} Any festivals? ->-> 2,1"], 2),
               _batch(3, "March-20-2024", [f"{VENUES} Any plays? ->-> 3,1"], 4)]
    _load(db, tmp_path, batches)
    rows = {r[3]: r for r in _standing(db)}
    subjects = {r[0] for r in db.execute(
        "select x.subject_key from donto.x_standing as x").fetchall()}
    assert subjects == {"event social"}  # one subject ...
    # ... but the ticket prices do not replace the locations; a later rule about the
    # location (the venue's) does, and ends its valid time on its own date.
    assert rows[LOCATIONS][4] == rows[VENUES][0]
    assert rows[TICKETS][4] is None and rows[VENUES][4] is None
    assert str(rows[LOCATIONS][5].upper) == "2024-03-20"
    assert rows[TICKETS][5].upper is None
    assert db.execute("select donto._standing_supersedes(%s, %s, 'event social'), "
                      "donto._standing_supersedes(%s, %s, 'event social'), "
                      "donto._standing_supersedes(%s, %s, 'recip')",
                      (TICKETS, LOCATIONS, VENUES, LOCATIONS, IMPERIAL, METRIC)).fetchone() \
        == (False, True, True)


def test_as_of_sees_what_was_in_force_then(db, tmp_path) -> None:
    rev1 = _load(db, tmp_path / "v1", [SESSION1])
    t1 = db.execute("select clock_timestamp()").fetchone()[0]
    db.commit()
    rev2 = _load(db, tmp_path / "v2", [SESSION1, SESSION2])
    assert rev2 != rev1
    then = {r[3]: r for r in _standing(db, t1)}
    assert set(then) == {METRIC, VEGGIE} and then[METRIC][4] is None
    assert {r[1] for r in then.values()} == {rev1}
    now_in_force = [(r[1], r[3]) for r in _standing(db) if r[4] is None]
    assert sorted(now_in_force) == sorted([(rev2, VEGGIE), (rev2, IMPERIAL)])
    # A retraction is seen from its transaction time on.
    imperial = next(r[0] for r in _standing(db) if r[3] == IMPERIAL)
    db.execute("insert into donto.retraction (statement_id, reason) values (%s, 'test')",
               (imperial,))
    db.commit()
    in_force = {r[3] for r in _standing(db) if r[4] is None}
    assert IMPERIAL not in in_force and METRIC in in_force


@pytest.fixture
def embedded(db, tmp_path):
    _load(db, tmp_path, [SESSION1, SESSION2])
    report = embed_pending(db, progress=False)
    assert report.standing == 3
    assert embed_pending(db, progress=False).standing == 0
    db.execute("set donto.recall_standing_min = '-1'")
    return db


def _recall_rows(db, q: str = "Give me a recipe for lasagna", k: int = 4) -> list[tuple]:
    return db.execute("select statement_id, chunk_text, vector_rank, lexical_rank "
                      "from donto.recall(%s, k => %s, context => %s)", (q, k, CTX)).fetchall()


def test_recall_gives_standing_statements_in_force_in_one_block(embedded) -> None:
    db = embedded  # the defaults: up to 8 statements, 1,200 characters
    rows = _recall_rows(db)
    standing = [r for r in rows if r[2] is None and r[3] is None]
    chunks = [r for r in rows if r not in standing]
    # the block (both statements in force, never the superseded one) right after the best
    # chunk, taking one of the k = 4 places: 3 chunk rows beside it (the chat has 5)
    assert rows[1:3] == standing and rows[0] == chunks[0]
    assert {r[1] for r in standing} == {IMPERIAL, VEGGIE}
    assert METRIC not in {r[1] for r in rows}
    assert len(chunks) == 3 and len(rows) == 5
    db.execute("set donto.recall_standing_after = '0'")
    first = _recall_rows(db)
    assert first[:2] == standing and first[2:] == chunks
    db.execute("reset donto.recall_standing_after")
    # the block holds what fits in donto.recall_standing_chars, most similar first
    best = standing[0][1]
    db.execute("select set_config('donto.recall_standing_chars', %s, false)", (str(len(best)),))
    assert [r for r in _recall_rows(db) if r[2] is None] == standing[:1]
    db.execute("select set_config('donto.recall_standing_chars', %s, false)",
               (str(len(best) - 1),))
    nothing_fits = _recall_rows(db)
    assert nothing_fits[:3] == chunks and len(nothing_fits) == 4  # no block: k chunk rows
    assert all(r[2] is not None or r[3] is not None for r in nothing_fits)
    db.execute("reset donto.recall_standing_chars")
    # one statement: one place, as before the block
    db.execute("set donto.recall_standing_slots = '1'")
    one = _recall_rows(db)
    assert one[1] == standing[0] and len(one) == 4
    assert all(r[2] is not None or r[3] is not None for r in one[:1] + one[2:])
    # k = 1: the best chunk only; k = 2: the block is the second place
    db.execute("reset donto.recall_standing_slots")
    assert _recall_rows(db, k=1) == chunks[:1]
    assert _recall_rows(db, k=2) == [chunks[0], *standing]
    db.execute("set donto.recall_standing_slots = '0'")
    assert all(r[2] is not None or r[3] is not None for r in _recall_rows(db))
    lexical = db.execute("select count(*) from donto.recall('recipe', k => 6, context => %s, "
                         "arms => 'lexical') where lexical_rank is null", (CTX,)).fetchone()[0]
    assert lexical == 0
    for name in ("recall_standing_slots", "recall_standing_chars"):
        db.execute(f"set donto.{name} = '-1'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=name):
            _recall_rows(db)
        db.rollback()


def test_the_cli_numbers_results_by_place(embedded) -> None:
    """donto-pg recall: the standing block is one numbered place, its statements labelled."""
    env = {**os.environ, "PGOPTIONS": "-c donto.recall_standing_min=-1"}
    args = ("recall", "Give me a recipe for lasagna", "--context", CTX, "--k", "4")
    r = run_cli(embedded, *args, "--json", env=env)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["place"] for x in rows] == [1, 2, 2, 3, 4]
    assert {x["text"] for x in rows if x["place"] == 2} == {IMPERIAL, VEGGIE}
    assert all(x["vector_rank"] is None and x["lexical_rank"] is None
               for x in rows if x["place"] == 2)
    text = run_cli(embedded, *args, env=env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line.split()[0] for line in lines if line[:3].strip()] == ["1.", "2.", "3.", "4."]
    # the block's second statement is a row of place 2, not a place of its own
    assert sum("standing, similarity" in line for line in lines) == 2
    assert sum(line.startswith("    [") and "standing" in line for line in lines) == 1


def test_payload_keeps_the_standing_section_until_the_chunks_are_gone(embedded) -> None:
    db = embedded
    q = "Give me a recipe for lasagna"

    def payload(budget: int):
        try:
            p = db.execute("select donto.recall_payload(%s, %s, k => 8, context => %s)",
                           (q, budget, CTX)).fetchone()[0]
        except psycopg.errors.InvalidParameterValue:
            db.rollback()
            db.execute("set donto.recall_standing_min = '-1'")
            return None
        return p

    full = payload(100_000)
    assert [s["text"] for s in full["standing"]] in ([IMPERIAL, VEGGIE], [VEGGIE, IMPERIAL])
    assert all(m["id"] not in {s["id"] for s in full["standing"]} for m in full["memories"])
    seen_cut_chunks = False
    for budget in range(full["tokens"], 0, -max(7, full["tokens"] // 40)):
        p = payload(budget)
        if p is None:
            break
        assert p["tokens"] <= budget
        if p["omitted"].get("standing"):
            # standing statements go only once no memory and no chunk text is left
            assert p["memories"] == [] and p["chunks"] == {}
        else:
            assert len(p["standing"]) == 2
        if p["omitted"].get("memories") and len(p["standing"]) == 2:
            seen_cut_chunks = True
    assert seen_cut_chunks


def test_readers_read_and_recall_standing_but_cannot_write(embedded, connect) -> None:
    reader = connect("donto_reader")
    reader.execute("set donto.recall_standing_min = '-1'")
    texts = [r[0] for r in reader.execute(
        "select statement_text from donto.standing(%s) where superseded_by is null",
        (CTX,)).fetchall()]
    assert sorted(texts) == sorted([VEGGIE, IMPERIAL])
    rows = reader.execute("select chunk_text from donto.recall('recipe', k => 3, context => %s)",
                          (CTX,)).fetchall()
    assert {rows[1][0], rows[2][0]} == {VEGGIE, IMPERIAL}
    p = reader.execute("select donto.recall_payload('recipe', 2000, context => %s)",
                       (CTX,)).fetchone()[0]
    assert len(p["standing"]) == 2
    reader.commit()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select donto.project_standing(1)")
    reader.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("insert into donto.x_standing_vector select statement_id, model_id, "
                       "embedding from donto.x_standing_vector limit 1")
    reader.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select donto.ingest_standing_embeddings(1, '{}', '{}')")
    reader.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select donto.ingest_standing_condition_embeddings(1, '{}', '{}')")
    reader.rollback()


DEADLINES = "Always format dates in the month-day-year style when I ask about deadlines."
EARLY = ("I prefer submitting applications early, which is why I made sure to upload my "
         "graduate school documents ahead of time.")
DUE = "When is the final submission due?"


def test_an_instruction_is_found_by_the_questions_it_names(db, tmp_path) -> None:
    """ "... when I ask about deadlines" applies to "When is the final submission due?",
    whose words are nearer the preference about submitting early: the condition
    ("deadlines", donto._standing_condition) has a vector of its own, and the standing slot
    ranks by (1 - W) x the statement's similarity + W x the condition's (W =
    donto.recall_standing_condition_weight, 0.5); W = 0 ranks by the statement alone."""
    _load(db, tmp_path, [_batch(1, "March-01-2024", [f"{DEADLINES} ->-> 1,1",
                                                     f"{EARLY} ->-> 1,2"], 0)])

    def slot() -> tuple[str, float]:
        rows = db.execute("select chunk_text, score, vector_rank, lexical_rank from "
                          "donto.recall(%s, k => 4, context => %s)", (DUE, CTX)).fetchall()
        standing = [r[:2] for r in rows if r[2] is None and r[3] is None]
        assert len(standing) == 1
        return standing[0]

    assert db.execute("select donto._standing_condition(%s), donto._standing_condition(%s)",
                      (DEADLINES, EARLY)).fetchone() == ("deadlines", None)
    db.execute("set donto.recall_standing_min = '-1'")
    db.execute("set donto.recall_standing_slots = '1'")  # the most similar statement alone
    # Statement vectors only (a database embedded before migration 021): the slot ranks
    # by the whole statements.
    _, model_id, _ = register_model(db, None)
    assert embed_standing(db, None, model_id) == 2
    assert slot()[0] == EARLY
    report = embed_pending(db, progress=False)
    assert (report.standing, report.conditions) == (0, 1)  # only one names a condition
    assert embed_pending(db, progress=False).conditions == 0  # idempotent
    text, score = slot()
    assert text == DEADLINES
    # the score is the mix of the two cosine similarities, from the stored vectors
    expected = db.execute(
        "select 0.5 * (1 - (v.embedding <=> q.e)) + 0.5 * (1 - (c.embedding <=> q.e)) "
        "from donto.x_standing_vector as v "
        "join donto.x_standing_condition_vector as c using (statement_id, model_id) "
        "cross join (select donto.embed_query(%s) as e) as q", (DUE,)).fetchone()[0]
    assert score == pytest.approx(expected, abs=1e-9)
    db.execute("set donto.recall_standing_condition_weight = '0'")
    assert slot()[0] == EARLY  # by the whole statements alone, the preference is nearer


def test_condition_vectors_are_refused_for_what_names_no_condition(db, tmp_path) -> None:
    _load(db, tmp_path, [_batch(1, "March-01-2024", [f"{DEADLINES} ->-> 1,1",
                                                     f"{EARLY} ->-> 1,2"], 0)])
    ids = dict(db.execute("select s.object_lit ->> 'v', x.statement_id from donto.x_standing x "
                          "join donto.statement s using (statement_id)").fetchall())
    embed_pending(db, progress=False)
    model = db.execute("select donto.embedding_model_id()").fetchone()[0]
    stored = db.execute("select embedding::text from donto.x_standing_condition_vector"
                        ).fetchall()
    assert len(stored) == 1
    vec = "[" + ",".join(["0.1"] * 384) + "]"
    for bad_ids, vectors, match in (
            ([ids[EARLY]], [vec], "naming a condition"),     # a preference, no condition
            ([1], [vec], "naming a condition"),              # not a standing statement
            ([None], [vec], "naming a condition"),
            ([ids[DEADLINES]], ["[1,2,3]"], "384 dimensions"),
            ([ids[DEADLINES]], [], "1 ids but 0 vectors")):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=match):
            db.execute("select donto.ingest_standing_condition_embeddings(%s, %s, %s)",
                       (model, bad_ids, vectors))
        db.rollback()
    # a vector that is there already is kept, never replaced (I3)
    assert db.execute("select donto.ingest_standing_condition_embeddings(%s, %s, %s)",
                      (model, [ids[DEADLINES]], [vec])).fetchone()[0] == 0
    assert db.execute("select embedding::text from donto.x_standing_condition_vector"
                      ).fetchall() == stored


def test_a_writer_login_cannot_replace_or_misfile_condition_vectors(db, tmp_path,
                                                                    logins) -> None:
    """donto.ingest_standing_condition_embeddings (a SECURITY DEFINER) attacked by a real
    donto_writer login: a condition vector already filed is never replaced, a statement
    that names no condition (or no standing statement) gets none, the table takes no
    direct INSERT or UPDATE, and the login stays an ordinary role."""
    _load(db, tmp_path, [_batch(1, "March-01-2024", [f"{DEADLINES} ->-> 1,1",
                                                     f"{EARLY} ->-> 1,2"], 0)])
    embed_pending(db, progress=False)
    ids = dict(db.execute("select s.object_lit ->> 'v', x.statement_id from donto.x_standing x "
                          "join donto.statement s using (statement_id)").fetchall())
    model = db.execute("select donto.embedding_model_id()").fetchone()[0]
    state = "select statement_id, model_id, embedding::text from donto.x_standing_condition_vector"
    before = db.execute(state).fetchall()
    db.commit()
    assert len(before) == 1
    _role, connect = logins()
    w = connect()
    vec = "[" + ",".join(["0.5"] * 384) + "]"
    # the owner's statement: refused whose it is (027), so its vector is never replaced
    with pytest.raises(psycopg.errors.InsufficientPrivilege, match="filed by another login"):
        w.execute("select donto.ingest_standing_condition_embeddings(%s, %s, %s)",
                  (model, [ids[DEADLINES]], [vec]))
    w.rollback()
    for bad in (ids[EARLY], 1):
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="naming a condition"):
            w.execute("select donto.ingest_standing_condition_embeddings(%s, %s, %s)",
                      (model, [bad], [vec]))
        w.rollback()
    for sql in ("insert into donto.x_standing_condition_vector values (%s, %s, %s::vector)",
                "update donto.x_standing_condition_vector set embedding = %s::vector "
                "where statement_id = %s and model_id = %s"):
        args = (ids[EARLY], model, vec) if sql.startswith("insert") else (
            vec, ids[DEADLINES], model)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute(sql, args)
        w.rollback()
    assert not w.execute("select rolsuper from pg_roles where rolname = session_user"
                         ).fetchone()[0]
    assert db.execute(state).fetchall() == before


def test_bad_input_is_refused(db, tmp_path) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no revision"):
        db.execute("select donto.project_standing(999999)")
    db.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no context"):
        db.execute("select * from donto.standing('ctx:nope')")
    db.rollback()
    _load(db, tmp_path, [SESSION1])
    embed_pending(db, progress=False)
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="not a standing"):
        db.execute("select donto.ingest_standing_embeddings(1, '{1}', %s)",
                   (["[" + ",".join(["0"] * 384) + "]"],))
    db.rollback()


def _recall_standing(conn, q: str, as_of=None) -> list[tuple]:
    """The standing rows (null ranks) of a hybrid recall in CTX: (statement id, revision, text)."""
    rows = conn.execute(
        "select r.statement_id, r.revision_id, r.chunk_text, r.vector_rank, r.lexical_rank "
        "from donto.recall(%s, k => 8, context => %s, as_of => %s) as r", (q, CTX, as_of)
    ).fetchall()
    conn.commit()
    return [(r[0], r[1], r[2]) for r in rows if r[3] is None and r[4] is None]


def test_standing_statements_come_once_after_append_turns(db, tmp_path) -> None:
    """A conversation loaded with session 1, then grown by donto.append_turns with session 2:
    recall's standing slots hold each statement in force once, from the latest revision,
    never the same sentence of the old and of the new revision side by side; as_of before
    the append answers from the old revision."""
    conv = next(beam.iter_beam(write_chat(tmp_path, "1", [SESSION1, SESSION2])))
    n1 = len(SESSION1["turns"]) * 2
    res = loader.load_conversation(db, dataclasses.replace(conv, messages=conv.messages[:n1],
                                                           questions=[]))
    assert res.ok, res.error
    rev1 = res.revision_id
    assert embed_pending(db, progress=False).standing == 2
    db.execute("set donto.recall_standing_min = '-1'")
    q = "Give me a recipe for lasagna"
    before = _recall_standing(db, q)
    assert sorted(r[2] for r in before) == sorted([METRIC, VEGGIE])
    t0 = db.execute("select clock_timestamp()").fetchone()[0]
    db.commit()

    new = [{"role": m.role, "content": m.content, "turn_id": m.turn_id, "session": m.session,
            "exchange": m.exchange, "date": m.date.isoformat() if m.date else None}
           for m in conv.messages[n1:]]
    rev2 = loader.append_turns(db, loader.document_iri(conv), new)
    db.commit()
    assert rev2 != rev1
    report = embed_pending(db, progress=False)
    assert report.standing == 3  # the new revision's VEGGIE, METRIC and IMPERIAL
    # both revisions hold VEGGIE and METRIC, so a duplicate would show here
    assert db.execute("select count(*) from donto.x_standing where revision_id in (%s, %s)",
                      (rev1, rev2)).fetchone()[0] == 5
    db.commit()

    after = _recall_standing(db, q)
    assert sorted(r[2] for r in after) == sorted([VEGGIE, IMPERIAL])  # METRIC superseded
    assert len({r[0] for r in after}) == len(after) == 2
    assert {r[1] for r in after} == {rev2}
    listed = [r[3] for r in _standing(db) if r[4] is None]
    assert sorted(listed) == sorted([VEGGIE, IMPERIAL])
    assert len(_standing(db)) == 3  # rev1's statements are covered by rev2's
    # as of before the append: the old revision's statements, once each
    assert _recall_standing(db, q, as_of=t0) == before



def _plant(db, rev: int, rules: str, text: str) -> int:
    """A statement as a projection by detector RULES left it (written as it was stored)."""
    ctx, doc = db.execute("select p.context_id, r.document_id from donto.projection p "
                          "join donto.revision r using (revision_id) where p.revision_id = %s "
                          "and p.kind = 'standing'", (rev,)).fetchone()
    proj = db.execute("insert into donto.projection (revision_id, kind, strategy, context_id) "
                      "values (%s, 'standing', %s, %s) returning projection_id",
                      (rev, rules, ctx)).fetchone()[0]
    start = _body(db, rev).index(text)
    sid = db.execute(
        "insert into donto.statement (subject, predicate, object_lit, context_id, document_id, "
        "derived_from_revision, char_start, char_end) values (%s, 'mem:standing/instruction', "
        "jsonb_build_object('v', %s::text, 'subject', 'planted'), %s, %s, %s, %s, %s) "
        "returning statement_id",
        (f"standing:{rules}", text, ctx, doc, rev, start, start + len(text))).fetchone()[0]
    db.execute("insert into donto.x_standing (statement_id, projection_id, revision_id, ord, "
               "kind, subject_key, turn_seq, turn_id, char_start, char_end, detector) "
               "values (%s, %s, %s, 0, 'instruction', 'planted', 4, 4, %s, %s, %s)",
               (sid, proj, rev, start, start + len(text), rules))
    db.commit()
    return sid


def _retracted(db, sid: int):
    row = db.execute("select reason from donto.retraction where statement_id = %s",
                     (sid,)).fetchone()
    db.commit()
    return row and row[0]


def test_newer_rules_replace_what_older_rules_found(db, tmp_path) -> None:
    """A revision projected by an older rules version (rules-v1 read "what if I need a
    break?" as an instruction) is projected again by the current rules: what the old ones
    found is retracted (as_of before still sees it), the current findings stand; a newer
    version's statements are never touched."""
    rev = _load(db, tmp_path, [SESSION1, SESSION2])
    rules = db.execute("select donto.standing_rules()").fetchone()[0]
    assert rules == standing.RULES_VERSION and rules != "rules-v1"
    old = _plant(db, rev, "rules-v1", "How long should the batter rest?")
    newer = _plant(db, rev, "rules-v99", "What oven temperature works best?")
    between = db.execute("select clock_timestamp()").fetchone()[0]
    time.sleep(0.01)
    db.commit()
    # the current rules' projection exists already: asking again retracts the old findings
    assert db.execute("select donto.project_standing(%s)", (rev,)).fetchone()[0] == 3
    db.commit()
    assert _retracted(db, old) == f"superseded: standing rules {rules} replace rules-v1"
    assert _retracted(db, newer) is None
    in_force = [r[3] for r in _standing(db)]
    assert "How long should the batter rest?" not in in_force
    assert "How long should the batter rest?" in [r[3] for r in _standing(db, between)]
    before = db.execute("select count(*) from donto.retraction").fetchone()[0]
    db.execute("select donto.project_standing(%s)", (rev,))
    assert db.execute("select count(*) from donto.retraction").fetchone()[0] == before
    db.commit()


def test_an_append_retracts_what_older_rules_found_in_the_base(db, tmp_path) -> None:
    rev = _load(db, tmp_path, [SESSION1])
    old = _plant(db, rev, "rules-v1", "How long should the batter rest?")
    rev2 = loader.append_turns(db, "beam:100K/1", [
        {"role": "user", "content": "Thanks, that helps."},
        {"role": "assistant", "content": "Glad to help."}])
    db.commit()
    assert rev2 != rev
    assert _retracted(db, old) == (f"superseded: standing rules {standing.RULES_VERSION} "
                                   "replace rules-v1")


def test_a_backend_with_other_rules_projects_nothing(db, connect) -> None:
    """A backend whose donto_pg detects with another version than the schema names (one
    that loaded its donto_pg before a migrate) is refused, and retracts nothing."""
    rev = db.execute("select donto.register_revision('test:stale/rules', %s)",
                     ("[user #0] Always answer in French.\n",)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s::jsonb)", (rev, json.dumps([
        {"seq": 0, "turn_id": 0, "role": "user", "header_start": 0, "char_start": 10,
         "char_end": 33}])))
    db.commit()
    stale = connect()
    stale.execute("select donto._py_boot()")
    stale.execute("do $$ GD['donto_pg'].standing.RULES_VERSION = 'rules-v1' $$ "
                  "language plpython3u")
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState, match="rules-v1"):
        stale.execute("select donto.project_standing(%s)", (rev,))
    stale.rollback()
    assert db.execute("select donto.project_standing(%s)", (rev,)).fetchone()[0] == 1
    db.commit()
