"""donto_pg.evaluate.places: recall rows grouped into the k places they take (a chunk row
is one, the standing block - consecutive rows with both ranks null - is one)."""

from __future__ import annotations

from donto_pg.evaluate import _hits, places

CHUNK_A = (1, 10, 0, 100, 1, None)
CHUNK_B = (1, 11, 100, 200, None, 3)
ST_1 = (1, 20, 40, 60, None, None)
ST_2 = (1, 21, 500, 520, None, None)


def test_the_standing_block_is_one_place() -> None:
    assert places([CHUNK_A, ST_1, ST_2, CHUNK_B]) == [[CHUNK_A], [ST_1, ST_2], [CHUNK_B]]
    assert places([ST_1, ST_2, CHUNK_A]) == [[ST_1, ST_2], [CHUNK_A]]
    assert places([CHUNK_A, CHUNK_B]) == [[CHUNK_A], [CHUNK_B]]
    assert places([]) == []


def test_a_place_hits_what_any_of_its_rows_overlaps() -> None:
    gold = [(7, 505, 530), (8, 150, 160)]
    spans = [[(rev, start, end) for rev, _sid, start, end, *_ in p]
             for p in places([CHUNK_A, ST_1, ST_2, CHUNK_B])]
    assert _hits(spans, 1, gold) == [set(), {7}, {8}]
    assert _hits(spans, 2, gold) == [set(), set(), set()]  # another revision
