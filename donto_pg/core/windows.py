"""Projection A windows: fixed-size, line-respecting, zero-overlap.

``recall_windows(body, window)`` cuts BODY into consecutive spans of at most
WINDOW characters that end at a line end ('\\n' included) whenever possible:
a window takes whole lines while they fit; a line longer than the window is
cut at the window (its remainder starts the next window). The spans cover the
body exactly, in order, so the chunks concatenate back to the body.
Deterministic: the same body and window give the same spans, bit for bit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from datetime import date


def recall_windows(body: str, window: int = 1200) -> Iterator[tuple[int, int]]:
    """Yield (char_start, char_end) spans; see the module docstring."""
    if window < 1:
        raise ValueError(f"window must be at least 1 character, got {window}")
    n = len(body)
    start = 0
    while start < n:
        limit = min(start + window, n)
        if limit == n:
            yield start, n
            return
        # The last line end inside [start, limit): the window ends just after it.
        cut = body.rfind("\n", start, limit)
        end = cut + 1 if cut >= 0 else limit  # no line end: the line is longer than the window
        yield start, end
        start = end


def window_dates(spans: Sequence[tuple[int, int]], turn_starts: Sequence[int],
                 turn_ends: Sequence[int], turn_dates: Sequence[date | None]
                 ) -> Iterator[tuple[date | None, date | None, date | None]]:
    """For each span: (date of its first turn, earliest date, latest date) of the turns it overlaps.

    Turns are given in body order by their full spans (header start, content end).
    """
    for start, end in spans:
        lo = bisect_right(turn_ends, start)          # first turn ending after start
        hi = bisect_left(turn_starts, end)           # turns starting before end
        dates = [d for d in turn_dates[lo:hi] if d is not None]
        first = next((d for d in turn_dates[lo:hi] if d is not None), None)
        yield first, (min(dates) if dates else None), (max(dates) if dates else None)
