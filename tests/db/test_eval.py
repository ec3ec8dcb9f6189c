"""eval recall and donto.recall on a real server with the real embedding model.

One database per module: BEAM 100K/13 (examples/beam) loaded and embedded, plus
the first batch of 100K/1 as a second conversation, so the model loads once.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import psycopg
import pytest

from donto_pg import loader
from donto_pg.core import encoder
from donto_pg.embed import embed_pending
from donto_pg.evaluate import eval_recall, format_table, places
from tests.conftest import EXAMPLES, module_database, write_chat

pytestmark = pytest.mark.slow

CTX13 = "ctx:memory/episodic/beam/100K/13"
CTX1 = "ctx:memory/episodic/beam/100K/1"


def _first_batch(conv: str) -> list:
    batches = json.loads((EXAMPLES / "chats" / "100K" / conv / "chat.json").read_text())
    return batches[:1]


@pytest.fixture(scope="module")
def edb(request, tmp_path_factory):
    """A database with 100K/13 (and its probing questions) and batch 1 of 100K/1, embedded."""
    with module_database(request, "eval") as conn:
        res = loader.load_beam(conn, str(EXAMPLES / "chats" / "100K" / "13"))
        assert [r.ok for r in res] == [True], res[0].error
        d = write_chat(tmp_path_factory.mktemp("eval"), "1", _first_batch("1"))
        res = loader.load_beam(conn, str(d))
        assert [r.ok for r in res] == [True], res[0].error
        conn.commit()
        embed_pending(conn, progress=False)
        conn.commit()
        yield conn


@pytest.fixture(scope="module")
def report(edb):
    return eval_recall(edb, ks=(1, 5, 10), conversations=["100K/13"])


def _vec(text: str):
    return encoder.encode([text])[0]


def _recall(conn, query: str, k: int, *, context: str | None, arms: str = "hybrid",
            as_of=None) -> list[tuple]:
    """recall_by_vector with a client-side vector (the model is loaded once, here)."""
    rows = conn.execute(
        "select r.statement_id, c.iri, r.char_start, r.char_end, r.vector_rank, r.lexical_rank, "
        "r.place from donto.recall_by_vector(%s, %s, k => %s, context => %s, as_of => %s, "
        "arms => %s) r "
        "join donto.statement s using (statement_id) join donto.context c using (context_id)",
        (_vec(query), query, k, context, as_of, arms)).fetchall()
    conn.commit()
    return rows


def test_eval_recall_per_ability_in_unit_range(report):
    arms = ("vector", "lexical", "hybrid", "random")
    assert report["arms"] == list(arms)
    assert report["conversations"] == ["100K/13"]
    assert "abstention" not in report["by_ability"]
    counts = report["counts"]
    assert counts["abstention"]["abstention"] == counts["abstention"]["questions"] == 2
    assert report["excluded_abstention"] == 2
    assert report["evaluated"] + report["excluded_abstention"] + report["excluded_no_gold"] \
        == report["questions_total"] == 20
    assert sum(b["n"] for b in report["by_ability"].values()) == report["evaluated"] >= 15
    for block in [*report["by_ability"].values(), report["overall"], report["macro"]]:
        for arm in arms:
            for metric, value in block[arm].items():
                assert 0.0 <= value <= 1.0, (arm, metric, value)
    # every evaluated question has a first-hit rank per arm, within the largest k or None
    for q in report["questions"]:
        assert q["ability"] != "abstention" and q["gold_turns"]
        for arm in arms:
            first = q["arms"][arm]["first_hit"]
            assert first is None or 1 <= first <= 10
            assert q["arms"][arm]["hit@10"] == (first is not None)
    table = format_table(report)
    assert "overall (micro)" in table and "summarization" not in table.split("\n")[0]


def test_hit_at_k_is_monotone_in_k(report):
    for block in [*report["by_ability"].values(), report["overall"]]:
        for arm in report["arms"]:
            b = block[arm]
            assert b["hit@1"] <= b["hit@5"] <= b["hit@10"]
            assert b["turn_recall@1"] <= b["turn_recall@5"] <= b["turn_recall@10"]
            # a question with a gold turn hit has hit@k = 1
            assert b["turn_recall@10"] <= b["hit@10"]


def test_random_baseline_is_below_hybrid(report, edb):
    overall = report["overall"]
    assert overall["random"]["hit@10"] < overall["hybrid"]["hit@10"]
    assert overall["random"]["hit@5"] < overall["hybrid"]["hit@5"]
    # seeded: the same seed draws the same chunks
    again = eval_recall(edb, ks=(10,), arms=(), conversations=["100K/13"], seed=0)
    assert [q["arms"]["random"] for q in again["questions"]] == \
        [{k: v for k, v in q["arms"]["random"].items() if k.endswith("@10") or k == "first_hit"}
         for q in report["questions"]]


def test_eval_names_the_model_it_recalls_with(report, edb):
    named = eval_recall(edb, ks=(1, 5, 10), arms=("vector",), conversations=["100K/13"],
                        include_random=False, model="all-MiniLM-L6-v2")
    assert named["model"] == "all-MiniLM-L6-v2" and report["model"] is None
    assert named["overall"]["vector"] == report["overall"]["vector"]
    edb.rollback()
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no embedding model"):
        eval_recall(edb, ks=(1,), arms=("vector",), conversations=["100K/13"],
                    include_random=False, model="no-such-model")
    edb.rollback()
    # the session-summary arm resolves its model the same way, before embedding anything
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="no embedding model"):
        edb.execute("select * from donto.recall_summaries('x', model => 'no-such-model')")
    edb.rollback()


def test_gold_chunk_text_queried_verbatim_is_hit_at_1_by_lexical(edb):
    """A probing question whose text is its gold chunk's text: the lexical arm ranks it first.

    The question is recorded on the second conversation (100K/1, which has none), so the
    module's report over 100K/13 is not changed.
    """
    rev, turn_id, text = edb.execute(
        "select t.revision_id, t.turn_id, s.object_lit ->> 'v' "
        "from donto.turn t join donto.x_memory_record m on m.revision_id = t.revision_id "
        "and m.char_start <= t.header_start and t.header_start < m.char_end "
        "join donto.statement s using (statement_id) join donto.context c using (context_id) "
        "where t.role = 'user' and c.iri = %s order by t.seq offset 5 limit 1",
        (CTX1,)).fetchone()
    n = edb.execute("select donto.record_questions(%s, %s)", (rev, json.dumps([{
        "ability": "information_extraction", "index": 99, "question": text, "answer": None,
        "gold": [[turn_id]], "stale": [], "skipped": [], "raw": {}}]))).fetchone()[0]
    edb.commit()
    assert n == 1
    got = eval_recall(edb, ks=(1,), arms=("lexical",), conversations=["100K/1"],
                      include_random=False)
    assert got["evaluated"] == 1 and got["arms"] == ["lexical"]
    (mine,) = got["questions"]
    assert mine["gold_turns"] == [turn_id]
    assert mine["arms"]["lexical"]["first_hit"] == 1
    assert got["overall"]["lexical"]["hit@1"] == 1.0


def _scan(conn, exact: bool) -> None:
    """Exact scans (the default on small contexts), or HNSW and the budgeted lexical arm."""
    for name in ("donto.recall_exact_max", "donto.recall_lexical_exact_max"):
        if exact:
            conn.execute(f"reset {name}")
        else:
            conn.execute("select set_config(%s, '0', false)", (name,))
    conn.commit()


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "hnsw-budgeted"])
@pytest.mark.parametrize("arms", ["vector", "lexical", "hybrid"])
def test_filtered_recall_returns_k_rows_of_the_asked_context(edb, exact, arms):
    _scan(edb, exact)
    try:
        n1 = edb.execute("select count(*) from donto.statement s join donto.context c "
                         "using (context_id) where c.iri = %s", (CTX1,)).fetchone()[0]
        assert n1 >= 10
        query = "How should I structure the budget tracker app and its database?"
        for ctx in (CTX1, CTX13):
            rows = _recall(edb, query, 10, context=ctx, arms=arms)
            assert len(places(rows)) == 10, (ctx, rows)  # the standing block is one place
            # chunk rows of the asked context; a standing slot (hybrid; both ranks null)
            # holds a statement of the same conversation's standing memory
            standing = ctx.replace("ctx:memory/episodic/", "ctx:memory/standing/")
            assert {r[1] for r in rows if r[4] is not None or r[5] is not None} == {ctx}
            assert {r[1] for r in rows if r[4] is None and r[5] is None} <= {standing}
            assert len({r[0] for r in rows}) == len(rows)
        # unfiltered, both conversations can come back
        rows = _recall(edb, query, 10, context=None, arms=arms)
        assert len(places(rows)) == 10
    finally:
        _scan(edb, True)


def test_vector_arm_query_shape_can_use_the_hnsw_index(edb):
    """The vector arm's ORDER BY matches the partial HNSW index; '+ 0' (exact) does not.

    (Whether the planner picks the index on a large context is shown by
    benchmarks/recall_latency.py; here the table is small, so seq scans and sorts are disabled.)
    """
    vec = _vec("budget tracker")
    sql = ("explain select e.statement_id from donto.embedding e "
           "join donto.statement s using (statement_id) where e.model_id = 1 "
           "order by ((e.embedding::vector(384)) <=> %s) {} limit 50")
    edb.execute("set local enable_seqscan = off")
    edb.execute("set local enable_sort = off")
    plan = "\n".join(r[0] for r in edb.execute(sql.format(""), (vec,)).fetchall())
    exact = "\n".join(r[0] for r in edb.execute(sql.format("+ 0"), (vec,)).fetchall())
    edb.rollback()
    assert "embedding_hnsw_m1" in plan
    assert "embedding_hnsw_m1" not in exact


def test_exchange_folding_returns_the_users_words(edb):
    rows = _recall(edb, "Which database did I choose for the budget tracker?", 5, context=CTX13)
    assert len(places(rows)) == 5
    for sid, _, start, end, vector_rank, lexical_rank, _place in rows:
        if vector_rank is None and lexical_rank is None:
            continue  # a standing slot: a statement of the user's, not a chunk
        holds_user_turn = edb.execute(
            "select exists (select 1 from donto.turn t join donto.x_memory_record m "
            "on m.revision_id = t.revision_id where m.statement_id = %s and t.role = 'user' "
            "and t.header_start >= m.char_start and t.header_start < m.char_end)",
            (sid,)).fetchone()[0]
        assert holds_user_turn, (sid, start, end)
    edb.execute("set donto.recall_unit = 'chunk'")
    try:
        chunk_rows = _recall(edb, "Which database did I choose for the budget tracker?", 5,
                             context=CTX13)
        assert len(places(chunk_rows)) == 5
    finally:
        edb.execute("reset donto.recall_unit")
        edb.commit()


def test_user_words_carry_weight_a_in_the_full_text_vector(edb):
    """index_lexical: the A-weighted lexemes of a chunk are exactly those of its user text."""
    rev = edb.execute("select revision_id from donto.revision r join donto.document d "
                      "using (document_id) where d.iri = 'beam:100K/13'").fetchone()[0]
    users = edb.execute("select char_start, char_end from donto.turn where revision_id = %s "
                        "and role = 'user' order by seq", (rev,)).fetchall()
    chunks = edb.execute(
        "select m.char_start, m.char_end, s.object_lit ->> 'v', "
        "tsvector_to_array(ts_filter(l.tsv, '{a}')), tsvector_to_array(l.tsv) "
        "from donto.x_memory_record m join donto.statement s using (statement_id) "
        "join donto.x_memory_lexical l using (statement_id) "
        "where m.revision_id = %s order by m.chunk_index", (rev,)).fetchall()
    with_a = 0
    for start, end, text, a_lexemes, all_lexemes in chunks:
        parts = [text[max(us, start) - start:min(ue, end) - start]
                 for us, ue in users if us < end and start < ue]
        expected = edb.execute("select tsvector_to_array(to_tsvector('english', %s))",
                               (" ".join(parts),)).fetchone()[0]
        assert sorted(a_lexemes) == sorted(expected), (start, end)
        assert set(a_lexemes) <= set(all_lexemes)
        with_a += bool(a_lexemes)
    edb.rollback()
    assert 0 < with_a < len(chunks)


def test_reader_can_call_recall_from_sql(edb):
    edb.execute("set role donto_reader")
    try:
        rows = edb.execute(
            "select statement_id, score, vector_rank, lexical_rank, place from donto.recall("
            "'What did I decide about the budget tracker database?', k => 3, context => %s)",
            (CTX13,)).fetchall()
        assert len(places(rows)) == 3 and all(r[1] > 0 for r in rows)
        # a question about what the user brought up: turn blocks, read as the reader
        rows = edb.execute(
            "select statement_id, score, vector_rank, lexical_rank, place from donto.recall("
            "'Can you list the order in which I brought up the budget tracker features?', "
            "k => 3, context => %s)", (CTX13,)).fetchall()
        blocks = [p for p in places(rows) if len(p) > 1]
        assert len(places(rows)) == 3
        assert any(p[0][2] is not None or p[0][3] is not None for p in blocks)  # turns
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            edb.execute("select donto.project_recall(1, 500)")
    finally:
        edb.rollback()
        edb.execute("reset role")
        edb.commit()


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "hnsw-budgeted"])
def test_as_of_keeps_a_chunk_until_its_retraction(edb, exact):
    query = ("How should I structure the budget tracker app and its database?" if exact
             else "Which Flask routes and database models does the tracker need?")
    _scan(edb, exact)
    try:
        for arms in ("vector", "lexical", "hybrid"):
            top = _recall(edb, query, 1, context=CTX1, arms=arms)[0][0]
            before = edb.execute("select clock_timestamp()").fetchone()[0]
            edb.commit()  # the retraction's transaction time is its own transaction's start
            edb.execute("select donto.retract(%s, 'test: superseded')", (top,))
            edb.commit()
            after = edb.execute("select clock_timestamp()").fetchone()[0]
            edb.commit()
            then = [r[0] for r in _recall(edb, query, 10, context=CTX1, arms=arms, as_of=before)]
            later = [r[0] for r in _recall(edb, query, 10, context=CTX1, arms=arms, as_of=after)]
            now = [r[0] for r in _recall(edb, query, 10, context=CTX1, arms=arms)]
            assert top in then, arms
            assert top not in later and top not in now, arms
            assert len(later) == len(now) == 10
    finally:
        edb.rollback()
        _scan(edb, True)



def test_the_offline_sweep_fuses_as_recall_does(edb):
    """benchmarks/recall_sweep.py replicates donto.recall_by_vector's fusion over dumped
    candidates: on 100K/13 its first hits are donto.recall's, at the defaults and with
    other settings set in the session (a change to the fusion that the replica does not
    follow fails here)."""
    spec = importlib.util.spec_from_file_location(
        "recall_sweep", Path(__file__).resolve().parents[2] / "benchmarks" / "recall_sweep.py")
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    data = sweep.dump(edb, ["100K/13"])
    assert len(data["questions"]) >= 15
    assert sweep.check(edb, data) == []
    other = {"recall_key_lexical_weight": 0, "recall_standing_slots": 2,
             "recall_standing_condition_weight": 0, "recall_rrf_k": 60,
             "recall_origin_slots": 1, "recall_origin_pool": 12,
             "recall_head_min_chunks": 0, "recall_head_share": 0.3}
    assert sweep.check(edb, data, other) == []
    a = sweep.evaluate(data, {})["first_hit"]
    b = sweep.evaluate(data, other)["first_hit"]
    assert a != b  # the settings change the ranking, so the second check means something
