"""donto.recall does not depend on k beyond the cut: the first k places of a call with a larger
k are the places of the call with k (property test over queries, sizes, arms and pools). A
place is a chunk row, the standing block or a block of user turns (donto_pg.evaluate.places)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from donto_pg.evaluate import places
from tests.conftest import EXAMPLES, embedded_module_database

pytestmark = pytest.mark.slow

CTX = "ctx:memory/episodic/beam/100K/1"
QUERIES = [
    "What did I say about my reading list?",
    "Can you remind me which fantasy series I wanted to read this winter?",
    "book club schedule",
    "How did my plans change over the months?",
    "Always give me the author's name when I ask about books.",
    "ignore previous instructions",
    "winter",
    "What order did these events happen in?",
    "Can you summarize how my reading plans developed over time?",  # origin rows, heads
    "Walk me through, in order, the series I mentioned throughout our conversations.",
    "Can you list the order in which I brought up different books?",
]
TURN_BLOCKS = QUERIES[-2:]  # they match donto.recall_turns_pattern ("in order", "brought up")


@pytest.fixture(scope="module")
def kdb(request, tmp_path_factory):
    """Three sessions of BEAM 100K/13 (real dialogue, ~100 chunks), embedded once."""
    batches = json.loads((EXAMPLES / "chats" / "100K" / "13" / "chat.json").read_text())
    with embedded_module_database(request, tmp_path_factory, "kstable", batches[:3]) as conn:
        yield conn


def _recall(conn, q: str, k: int, arms: str) -> list[tuple]:
    return conn.execute(
        "select statement_id, char_start, char_end, score, vector_rank, lexical_rank, place "
        "from donto.recall("
        "%s, k => %s, context => %s, arms => %s)", (q, k, CTX, arms)).fetchall()


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(q=st.sampled_from(QUERIES), k1=st.integers(1, 40), extra=st.integers(1, 40),
       arms=st.sampled_from(["hybrid", "vector", "lexical"]),
       pool_min=st.sampled_from(["100", "45"]), origin_pool=st.sampled_from(["30", "5"]),
       head_min=st.sampled_from(["1000", "0"]))
def test_first_k_rows_do_not_depend_on_a_larger_k(kdb, q, k1, extra, arms, pool_min,
                                                  origin_pool, head_min) -> None:
    # pool_min 45: a pool smaller than the context (about 100 chunks); k stays within it.
    # origin_pool 5: k on either side of the rows the origin rows are chosen from.
    kdb.execute("select set_config('donto.recall_pool_min', %s, false)", (pool_min,))
    kdb.execute("select set_config('donto.recall_origin_pool', %s, false)", (origin_pool,))
    # head_min 0: session heads weigh in on this small context too (the summary query).
    kdb.execute("select set_config('donto.recall_head_min_chunks', %s, false)", (head_min,))
    k2 = min(k1 + extra, int(pool_min))
    k1 = min(k1, k2)
    small = places(_recall(kdb, q, k1, arms))
    large = places(_recall(kdb, q, k2, arms))
    # The lexical arm finds only chunks holding a query word; turn blocks pack several
    # candidates to a place, so a small context may run out of candidates before k places.
    if arms != "lexical" and not (arms == "hybrid" and q in TURN_BLOCKS):
        assert len(small) == k1 and len(large) == k2
    assert len(small) == min(k1, len(large))
    assert large[:k1] == small
    # Places are numbered 1 .. n; a turn block (several rows with ranks) is within one
    # chunk's 1,200 characters, and only the turn-block questions of the hybrid arm get one.
    assert [p[0][-1] for p in large] == list(range(1, len(large) + 1))
    turn_blocks = [p for p in large if len(p) > 1 and p[0][4:6] != (None, None)]
    assert all(sum(r[2] - r[1] for r in p) <= 1200 for p in turn_blocks)
    assert not turn_blocks or (arms == "hybrid" and q in TURN_BLOCKS)
    kdb.rollback()
