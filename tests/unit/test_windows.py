"""Projection A windows: concatenation and line-respect properties."""

from __future__ import annotations

from datetime import date

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from donto_pg.core.windows import recall_windows, window_dates

lines = st.lists(st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=300)
                 .map(lambda s: s + "\n"), max_size=40)


@settings(max_examples=200, deadline=None)
@given(lines, st.booleans(), st.integers(min_value=1, max_value=400))
def test_windows_concatenate_to_the_body_and_respect_lines(parts, trailing, window):
    body = "".join(parts)
    if trailing and body:
        body = body[:-1]  # a body that does not end with a newline
    spans = list(recall_windows(body, window))
    assert "".join(body[s:e] for s, e in spans) == body
    assert all(0 < e - s <= window for s, e in spans)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    for s, e in spans[:-1]:
        chunk = body[s:e]
        if not chunk.endswith("\n"):
            # cut inside a line: only allowed when that line alone exceeds the window
            assert "\n" not in chunk and e - s == window
        else:
            # a whole-line window: the next line would not have fitted
            nxt = body.find("\n", e)
            next_line_end = len(body) if nxt < 0 else nxt + 1
            assert next_line_end - s > window


def test_long_line_is_cut_at_the_window():
    body = "x" * 2500 + "\nshort\n"
    assert list(recall_windows(body, 1200)) == [(0, 1200), (1200, 2400), (2400, 2507)]


def test_window_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        list(recall_windows("abc", 0))


def test_window_dates_use_first_overlapping_turn():
    spans = [(0, 10), (10, 20), (20, 30)]
    d1, d2 = date(2024, 3, 1), date(2024, 4, 1)
    got = list(window_dates(spans, [0, 12], [11, 30], [d1, d2]))
    assert got == [(d1, d1, d1), (d1, d1, d2), (d2, d2, d2)]
