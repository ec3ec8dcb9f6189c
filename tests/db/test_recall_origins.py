"""Origin rows: a question about how something went over time ("summarize how ... developed",
"in order", "throughout our conversations") gets the beginning of the story, the earliest
of recall's top exchanges, right after its best row (donto.recall_origin_slots and
donto.recall_origin_pool; the question is recognised by donto.recall_origin_pattern). Turn
blocks: a question about what the user brought up gets the user's own turns, several to a
place (donto.recall_turns_pattern, donto.recall_turns_chars, donto.recall_turns_pool). Session
heads: a summary question weighs up the exchanges that open their sessions
(donto.recall_head_pattern, _weight, _share, _min_chunks)."""

from __future__ import annotations

import json
import re

import psycopg
import pytest

from donto_pg.evaluate import places
from tests.conftest import EXAMPLES, ROOT, embedded_module_database

pytestmark = pytest.mark.slow

CTX = "ctx:memory/episodic/beam/100K/1"
HISTORY = "Can you summarize how my reading budget and book purchases developed over time?"
PLAIN = "How much did I spend on books and subscriptions in January?"


@pytest.fixture(scope="module")
def odb(request, tmp_path_factory):
    """Three sessions (three dates) of BEAM 100K/13, embedded once."""
    batches = json.loads((EXAMPLES / "chats" / "100K" / "13" / "chat.json").read_text())
    with embedded_module_database(request, tmp_path_factory, "origins", batches[:3]) as conn:
        yield conn


def _rows(conn, q: str, k: int, arms: str = "hybrid", **settings) -> list[tuple]:
    for name, value in settings.items():
        conn.execute("select set_config(%s, %s, true)", (f"donto.{name}", str(value)))
    rows = conn.execute(
        "select statement_id, lower(valid_time), char_start, score, vector_rank, lexical_rank "
        "from donto.recall(%s, k => %s, context => %s, arms => %s)", (q, k, CTX, arms)).fetchall()
    conn.rollback()
    return rows


def test_a_history_question_gets_the_earliest_of_its_top_rows_after_the_best(odb) -> None:
    ranked = _rows(odb, HISTORY, 50, recall_standing_slots=0, recall_origin_slots=0)
    assert len(ranked) == 50
    early = sorted(ranked[1:50], key=lambda r: (r[1], r[2], r[0]))
    # The story's beginning is not what ranks best here: the test would pass without origins
    # otherwise.
    assert ranked[1] != early[0]

    def moved(rows: list[tuple], n: int) -> list[tuple]:
        return rows[:1] + early[:n] + [r for r in rows[1:] if r not in early[:n]]

    # The default: the earliest of rows 2..50 right after the best row.
    assert _rows(odb, HISTORY, 10, recall_standing_slots=0) == moved(ranked, 1)[:10]
    # Origin rows are chunk rows: they keep their own scores and ranks.
    assert early[0][4] is not None or early[0][5] is not None
    # Two slots: the two earliest, in conversation order.
    assert _rows(odb, HISTORY, 10, recall_standing_slots=0, recall_origin_slots=2) \
        == moved(ranked, 2)[:10]
    # A narrower pool looks less far down for the beginning.
    near = sorted(ranked[1:5], key=lambda r: (r[1], r[2], r[0]))[0]
    assert _rows(odb, HISTORY, 10, recall_standing_slots=0, recall_origin_pool=5) \
        == (ranked[:1] + [near] + [r for r in ranked[1:] if r != near])[:10]


def test_the_standing_block_stays_right_after_the_best_row(odb) -> None:
    off = _rows(odb, HISTORY, 10, recall_origin_slots=0)
    on = _rows(odb, HISTORY, 10)
    standing = [r for r in off if r[4] is None and r[5] is None]
    n = len(standing)
    assert n >= 1 and off[1:1 + n] == standing  # the fixture has standing statements
    assert on[0] == off[0] and on[1:1 + n] == standing
    assert on[1 + n] != off[1 + n]


def test_other_questions_are_untouched(odb) -> None:
    assert _rows(odb, PLAIN, 15) == _rows(odb, PLAIN, 15, recall_origin_slots=0)
    # ... unless the pattern says they ask about history.
    assert _rows(odb, PLAIN, 15, recall_origin_pattern="spend") \
        != _rows(odb, PLAIN, 15, recall_origin_slots=0)
    # Only the hybrid arm has origin rows (as only it has the standing block).
    for arms in ("vector", "lexical"):
        assert _rows(odb, HISTORY, 10, arms) == _rows(odb, HISTORY, 10, arms,
                                                      recall_origin_slots=0)


@pytest.mark.parametrize("name, value", [("recall_origin_slots", "-1"),
                                         ("recall_origin_pool", "0")])
def test_bad_origin_settings_are_refused(odb, name, value) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="recall_origin"):
        _rows(odb, HISTORY, 10, **{name: value})
    odb.rollback()


# --- session heads: a summary question weighs up the exchanges that open their sessions ------

SUMMARY = "Can you summarize how my reading budget and book purchases developed?"
ISOLATED = {"recall_standing_slots": 0, "recall_origin_slots": 0}  # chunk rows only


def _scored(conn, q: str, k: int, **settings) -> list[tuple]:
    return [(r[0], r[3]) for r in _rows(conn, q, k, **settings)]


def _opens_its_session(conn, statement_id: int, share: float) -> bool:
    """The rule of donto._opens_session, from the turns themselves."""
    rev, end = conn.execute("select revision_id, char_end from donto.x_memory_record "
                            "where statement_id = %s", (statement_id,)).fetchone()
    turns = conn.execute("select role, session, header_start, char_end from donto.turn "
                         "where revision_id = %s order by header_start", (rev,)).fetchall()
    user = [t for t in turns if t[0] == "user" and t[2] < end][-1]
    own = [t for t in turns if t[1] == user[1]]
    first, last = own[0][2], own[-1][3]
    return len({t[1] for t in turns}) > 1 and user[2] - first < share * (last - first)


def _weighed(plain: list[tuple], weighed: list[tuple], heads: set[int], factor: float) -> bool:
    """Whether each row of both has its plain score times FACTOR when it opens its session,
    else its plain score (rows below the plain top move in; the rows in common are checked)."""
    before, after = dict(plain), dict(weighed)
    common = before.keys() & after.keys()
    assert len(common) >= len(weighed) // 2
    return {sid: round(after[sid], 9) for sid in common} == {
        sid: round(before[sid] * (factor if sid in heads else 1), 9) for sid in common}


def test_a_summary_question_weighs_up_the_exchanges_that_open_their_sessions(odb) -> None:
    # The fixture is three sessions of ~100 chunks: below recall_head_min_chunks (1,000), so
    # nothing changes at the defaults ...
    plain = _scored(odb, SUMMARY, 60, recall_head_weight=0, **ISOLATED)
    assert _scored(odb, SUMMARY, 60, **ISOLATED) == plain
    # ... and with the gate at 0 every exchange that opens its session scores 1 + 2 times
    # its fused score, the others as before, and the order follows the new scores.
    heads = {sid for sid, _ in plain if _opens_its_session(odb, sid, 0.2)}
    assert 0 < len(heads) < len(plain)
    weighed = _scored(odb, SUMMARY, 60, recall_head_min_chunks=0, **ISOLATED)
    assert _weighed(plain, weighed, heads, 3)
    assert [score for _, score in weighed] == sorted((score for _, score in weighed),
                                                     reverse=True)
    top = [sid for sid, _ in weighed[:10]]
    assert top != [sid for sid, _ in plain[:10]]  # the point: heads moved into the top 10
    assert sum(sid in heads for sid in top) > sum(sid in heads for sid, _ in plain[:10])
    # The share and the weight are settings; weight 0 is off.
    wider = _scored(odb, SUMMARY, 60, recall_head_min_chunks=0, recall_head_share=0.5,
                    recall_head_weight=1, **ISOLATED)
    half = {sid for sid, _ in plain if _opens_its_session(odb, sid, 0.5)}
    assert half > heads
    assert _weighed(plain, wider, half, 2)


def test_a_reader_gets_the_same_session_heads(odb) -> None:
    owner = _scored(odb, SUMMARY, 20, recall_head_min_chunks=0, **ISOLATED)
    assert owner != _scored(odb, SUMMARY, 20, recall_head_weight=0, **ISOLATED)
    odb.execute("set local role donto_reader")  # _rows rolls it back
    assert _scored(odb, SUMMARY, 20, recall_head_min_chunks=0, **ISOLATED) == owner


def test_session_heads_leave_other_questions_and_arms_alone(odb) -> None:
    for q in (PLAIN, "How did my reading budget and book purchases evolve over time?"):
        assert _rows(odb, q, 15, recall_head_min_chunks=0) == _rows(odb, q, 15)
    for arms in ("vector", "lexical"):
        assert _rows(odb, SUMMARY, 15, arms, recall_head_min_chunks=0) \
            == _rows(odb, SUMMARY, 15, arms)


@pytest.mark.parametrize("name, value", [("recall_head_weight", "-1"),
                                         ("recall_head_weight", "NaN"),
                                         ("recall_head_weight", "Infinity"),
                                         ("recall_head_share", "1.5"),
                                         ("recall_head_share", "NaN"),
                                         ("recall_head_min_chunks", "-1")])
def test_bad_head_settings_are_refused(odb, name, value) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="recall_head"):
        _rows(odb, SUMMARY, 10, **{name: value})
    odb.rollback()


def test_a_bad_head_pattern_fails_whatever_the_context_size(odb) -> None:
    # The context is below recall_head_min_chunks: the pattern is matched all the same.
    # It is read, and refused by name, whatever the arm (donto._recall_pattern).
    for arms in ("hybrid", "vector"):
        with pytest.raises(psycopg.errors.InvalidRegularExpression,
                           match=r"setting donto\.recall_head_pattern"):
            _rows(odb, SUMMARY, 10, arms, recall_head_pattern="(x")
        odb.rollback()


# --- turn blocks: a question about what the user brought up --------------------------------

BROUGHT_UP = "Can you list the order in which I brought up my reading budget and book purchases?"


def _places(conn, q: str, k: int, **settings) -> list[list[tuple]]:
    for name, value in settings.items():
        conn.execute("select set_config(%s, %s, true)", (f"donto.{name}", str(value)))
    rows = conn.execute(
        "select statement_id, revision_id, char_start, char_end, chunk_text, "
        "donto.span_text(revision_id, char_start, char_end), vector_rank, lexical_rank, place "
        "from donto.recall(%s, k => %s, context => %s)", (q, k, CTX)).fetchall()
    conn.rollback()
    assert [r[-1] for r in rows] == sorted(r[-1] for r in rows)
    return places(rows)


def _user_turn(conn, revision: int, chunk_end: int) -> tuple[int, int]:
    """The latest user turn that starts before a chunk ends: its header start and end."""
    return conn.execute("select header_start, char_end from donto.turn where revision_id = %s "
                        "and role = 'user' and header_start < %s order by header_start desc "
                        "limit 1", (revision, chunk_end)).fetchone()


def test_a_question_about_what_i_brought_up_gets_blocks_of_my_own_turns(odb) -> None:
    pool = 12
    chunks = [p[0] for p in _places(odb, BROUGHT_UP, 1 + pool + 10, recall_standing_slots=0,
                                    recall_turns_chars=0)]
    got = _places(odb, BROUGHT_UP, 4, recall_standing_slots=0, recall_turns_pool=pool)
    assert len(got) == 4 and got[0] == [chunks[0]]  # the best chunk row first, whole
    # The others: the user turns of chunk rows 2 .. 1 + pool, each once, in that order, as
    # many to a place as fit in 1,200 characters, each row a span of the chunk's revision.
    expected, seen = [], set()
    for row in chunks[1:1 + pool]:
        turn = _user_turn(odb, row[1], row[3])
        if turn not in seen:
            seen.add(turn)
            expected.append((row[0], row[1], turn[0], min(turn[1], turn[0] + 1200)))
    rows = [r for p in got[1:] for r in p]
    assert [r[:4] for r in rows] == expected[:len(rows)]  # all turns (the pool is not used up)
    assert any(len(p) > 1 for p in got)  # the point: several turns in one place
    for p in got[1:]:
        assert sum(r[3] - r[2] for r in p) <= 1200
        for r in p:
            assert r[4] == r[5] and r[4].startswith("[user #")  # the user's own words
            assert r[6] is not None or r[7] is not None  # the chunk row's ranks
    # Unfolded (recall_unit 'chunk'), a chunk row need not hold its user turn: the turn's
    # text then comes from the revision, not the chunk, and is the same bytes.
    unfolded = [r for p in _places(odb, BROUGHT_UP, 8, recall_standing_slots=0,
                                   recall_unit="chunk")[1:] for r in p]
    outside = [r for r in unfolded if not odb.execute(
        "select char_start <= %s and %s <= char_end from donto.x_memory_record "
        "where statement_id = %s", (r[2], r[3], r[0])).fetchone()[0]]
    assert outside and all(r[4] == r[5] and r[4].startswith("[user #") for r in unfolded)
    # A place's budget: 400 characters packs fewer turns to a place (a longer turn, cut).
    small = _places(odb, BROUGHT_UP, 4, recall_standing_slots=0, recall_turns_pool=pool,
                    recall_turns_chars=400)
    assert all(sum(r[3] - r[2] for r in p) <= 400 for p in small[1:])
    assert [r[:2] for p in small[1:] for r in p] == [e[:2] for e in expected][:sum(
        len(p) for p in small[1:])]
    # Past the turns pool, the chunk rows follow in their order.
    tail = _places(odb, BROUGHT_UP, 20, recall_standing_slots=0, recall_turns_pool=2)
    two = expected[:2] if expected[1][0] == chunks[2][0] else expected[:1]
    m = 1 + (1 if sum(e[3] - e[2] for e in two) <= 1200 else len(two))
    assert [r[:4] for p in tail[1:m] for r in p] == two
    assert [p[0][:8] for p in tail[m:]] == [c[:8] for c in chunks[3:3 + len(tail) - m]]
    # The standing block keeps its place, right after the best row.
    with_block = _places(odb, BROUGHT_UP, 4, recall_turns_pool=pool)
    assert all(r[6] is None and r[7] is None for r in with_block[1])
    assert with_block[0] == got[0] and with_block[2:] == [
        [r[:-1] + (r[-1] + 1,) for r in p] for p in got[1:3]]


def test_other_questions_and_arms_get_no_turn_blocks(odb) -> None:
    for q in (PLAIN, HISTORY):
        assert _rows(odb, q, 15) == _rows(odb, q, 15, recall_turns_chars=0)
    for arms in ("vector", "lexical"):
        assert _rows(odb, BROUGHT_UP, 10, arms) == _rows(odb, BROUGHT_UP, 10, arms,
                                                         recall_turns_chars=0)
    assert _rows(odb, BROUGHT_UP, 10) != _rows(odb, BROUGHT_UP, 10, recall_turns_chars=0)


@pytest.mark.parametrize("name, value", [("recall_turns_chars", "-1"),
                                         ("recall_turns_pool", "-5")])
def test_bad_turn_settings_are_refused(odb, name, value) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="recall_turns"):
        _rows(odb, BROUGHT_UP, 10, **{name: value})
    odb.rollback()


def test_the_payload_gives_turn_rows_their_turns(odb) -> None:
    rows = [r for p in _places(odb, BROUGHT_UP, 6) for r in p]
    payload = odb.execute("select donto.recall_payload(%s, 20000, k => 6, context => %s)",
                          (BROUGHT_UP, CTX)).fetchone()[0]
    odb.rollback()
    # Each statement once, in recall's order, with the span recall gave it (the standing
    # statements have a section of their own): a turn row's span is its turn, not its chunk.
    first: dict[int, tuple[int, tuple[int, int]]] = {}
    for r in rows:
        if r[6] is not None or r[7] is not None:
            first.setdefault(r[0], (r[0], (r[2], r[3])))
    memories = [(m["id"], tuple(m["span"])) for m in payload["memories"]]
    assert len(memories) >= 3 and memories == list(first.values())[:len(memories)]
    assert any(odb.execute(
        "select char_start <> %s or char_end <> %s from donto.x_memory_record "
        "where statement_id = %s", (span[0], span[1], sid)).fetchone()[0]
        for sid, span in memories)


# --- every numeric setting, named when its value is none -------------------------------------

NUMERIC = sorted(set(re.findall(
    r"_recall_(number|integer)\(\s*'(\w+)',\s*'([^']*)'",
    "".join(p.read_text(encoding="utf-8") for p in (ROOT / "sql").glob("*.sql")))))


def test_the_numeric_settings_are_found() -> None:
    names = {n for _k, n, _d in NUMERIC}
    assert len(names) == len(NUMERIC) >= 25
    assert {"recall_rrf_k", "recall_head_weight", "recall_exact_max",
            "recall_standing_condition_weight", "recall_key_lexical_max"} <= names


@pytest.mark.parametrize("kind, name, default", NUMERIC)
def test_a_setting_that_is_no_number_is_refused_by_name(odb, kind, name, default) -> None:
    """Before, a bare cast said only 'invalid input syntax for type double precision'."""
    bad = ["lots", "1e400x", "1e400", "1e-400", "3\u2003", "\u30003"] + (
        ["1.5", "99999999999999999999"] if kind == "integer" else [])
    for value in bad:
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=rf"setting donto\.{name} must be an? "
                                 rf"{kind}( from \S+ to \S+)?, not "):
            _rows(odb, HISTORY, 10, **{name: value})
        odb.rollback()
    # a value that is one is taken as it is written, spaces and sign included
    assert _rows(odb, HISTORY, 10) == _rows(odb, HISTORY, 10, **{name: f" +{default} "})


@pytest.mark.parametrize("name, value", [
    ("recall_pool_share", "1.5"), ("recall_pool_share", "NaN"), ("recall_pool_share", "-0.1"),
    ("recall_rrf_k", "-1"), ("recall_rrf_k", "Infinity"),
    ("recall_lexical_scaffold_weight", "NaN"), ("recall_lexical_scaffold_weight", "1e308"),
    ("recall_lexical_budget", "-1"), ("recall_key_lexical_max", "-2147483648"),
    ("recall_vector_weight", "-1"), ("recall_standing_min", "2"),
    ("recall_standing_condition_weight", "1.5"), ("recall_pool_min", "2147483648")])
def test_a_setting_out_of_its_range_is_refused_by_name(odb, name, value) -> None:
    """Each was a number that failed later, unnamed (integer out of range, division by
    zero, a negative LIMIT, 'column "nan" does not exist')."""
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match=rf"setting donto\.{name} must be an? \w+ from \S+ to \S+, not "):
        _rows(odb, HISTORY, 10, **{name: value})
    odb.rollback()


def test_the_exact_scan_bounds_take_values_past_the_integers(odb) -> None:
    """They were read as bigint before: a database set above 2^31 still recalls."""
    big = {"recall_exact_max": "3000000000", "recall_lexical_exact_max": "3000000000",
           "recall_key_lexical_max": "3000000000"}
    assert _rows(odb, HISTORY, 10, **big) == _rows(odb, HISTORY, 10)


@pytest.mark.parametrize("name, value", [
    ("recall_origin_pattern", "("), ("recall_head_pattern", "(x"),
    ("recall_turns_pattern", "[")])
def test_a_pattern_that_does_not_compile_is_refused_by_name(odb, name, value) -> None:
    with pytest.raises(psycopg.errors.InvalidRegularExpression,
                       match=rf"setting donto\.{name} is no regular expression"):
        _rows(odb, HISTORY, 10, **{name: value})
    odb.rollback()


@pytest.mark.parametrize("value", ["remind", "{remind,{x}}", "{{a,b},{c,d}}", "{remind,NULL}"])
def test_a_scaffold_that_is_no_array_of_words_is_refused_by_name(odb, value) -> None:
    """It was cast where it was read: 'malformed array literal', no word of the setting."""
    for arms in ("hybrid", "lexical"):
        with pytest.raises(psycopg.errors.InvalidParameterValue,
                           match=r"setting donto\.recall_lexical_scaffold must be an array"):
            _rows(odb, HISTORY, 10, arms, recall_lexical_scaffold=value)
        odb.rollback()
    # none at all is one: the question's words all weigh the same
    q = "Can you remind me what I mentioned earlier about my reading budget?"
    assert _rows(odb, q, 10, "lexical", recall_lexical_scaffold="{}") \
        != _rows(odb, q, 10, "lexical")


@pytest.mark.parametrize("value", ["x", "{1,2}", "{NaN,0,0,1}", "{0.1,0.2,0.4,2}",
                                   "{-1,0,0,1}", "{{1,1},{1,1}}", "{1e99,0,0,1}"])
def test_lexical_weights_that_are_not_four_are_refused_by_name(odb, value) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue,
                       match=r"setting donto\.recall_lexical_weights must be four weights"):
        _rows(odb, HISTORY, 10, recall_lexical_weights=value)
    odb.rollback()
    assert _rows(odb, HISTORY, 10, recall_lexical_weights="{0.1, 0.2, 0.4, 1.0}") \
        == _rows(odb, HISTORY, 10)
