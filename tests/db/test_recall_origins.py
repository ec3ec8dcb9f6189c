"""Origin rows: a question about how something went over time ("summarize how ... developed",
"in order", "throughout our conversations") gets the beginning of the story, the earliest
of recall's top exchanges, right after its best row (donto.recall_origin_slots and
donto.recall_origin_pool; the question is recognised by donto.recall_origin_pattern)."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.conftest import EXAMPLES, embedded_module_database

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
