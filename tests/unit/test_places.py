"""donto_pg.evaluate.places: recall rows grouped into the k places they take (a chunk row
is one; the rows of the standing block or of a block of user turns share one)."""

from __future__ import annotations

from donto_pg.evaluate import _hits, places

CHUNK_A = (1, 10, 0, 100, 1, None, 1)
ST_1 = (1, 20, 40, 60, None, None, 2)
ST_2 = (1, 21, 500, 520, None, None, 2)
CHUNK_B = (1, 11, 100, 200, None, 3, 3)
TURN_1 = (1, 12, 150, 160, 4, 2, 4)
TURN_2 = (1, 13, 300, 320, 5, None, 4)
TURN_3 = (1, 14, 700, 720, 6, 9, 5)


def test_rows_of_one_place_are_one_place() -> None:
    assert places([CHUNK_A, ST_1, ST_2, CHUNK_B]) == [[CHUNK_A], [ST_1, ST_2], [CHUNK_B]]
    assert places([CHUNK_A, ST_1, ST_2, CHUNK_B, TURN_1, TURN_2, TURN_3]) == [
        [CHUNK_A], [ST_1, ST_2], [CHUNK_B], [TURN_1, TURN_2], [TURN_3]]
    assert places([CHUNK_A, CHUNK_B]) == [[CHUNK_A], [CHUNK_B]]
    assert places([]) == []


def test_a_place_hits_what_any_of_its_rows_overlaps() -> None:
    gold = [(7, 505, 530), (8, 150, 160), (9, 315, 330)]
    spans = [[(rev, start, end) for rev, _sid, start, end, *_ in p]
             for p in places([CHUNK_A, ST_1, ST_2, CHUNK_B, TURN_1, TURN_2])]
    assert _hits(spans, 1, gold) == [set(), {7}, {8}, {8, 9}]
    assert _hits(spans, 2, gold) == [set(), set(), set(), set()]  # another revision
