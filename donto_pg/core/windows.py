"""Projection A windows: fixed-size, line-respecting, zero-overlap.

``recall_windows(body, window)`` cuts BODY into consecutive spans of at most
WINDOW characters that end at a line end ('\\n' included) whenever possible:
a window takes whole lines while they fit; a line longer than the window is
cut at the window (its remainder starts the next window). The spans cover the
body exactly, in order, so the chunks concatenate back to the body. A long line is
never cut inside the backslashes of an escaped header-like text
(:data:`donto_pg.core.transcript.HEADER_LIKE`), so no chunk starts with a header that
the renderer did not write.
Deterministic: the same body and window give the same spans, bit for bit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from datetime import date

from donto_pg.core.transcript import HEADER_LIKE


def recall_windows(body: str, window: int = 1200, start: int = 0) -> Iterator[tuple[int, int]]:
    """Yield (char_start, char_end) spans; see the module docstring.

    START (a window boundary of BODY, or of any body BODY extends) resumes the cut
    there: the windows are greedy from the start, so those from a boundary on are
    the same whether the cut began at 0 or there. An extended revision is cut
    again only from its old last window (``donto._extend_recall``).
    """
    if window < 1:
        raise ValueError(f"window must be at least 1 character, got {window}")
    n = len(body)
    while start < n:
        limit = min(start + window, n)
        if limit == n:
            yield start, n
            return
        # The last line end inside [start, limit): the window ends just after it.
        cut = body.rfind("\n", start, limit)
        end = cut + 1 if cut >= 0 else _long_line_cut(body, start, limit)
        yield start, end
        start = end


def _long_line_cut(body: str, start: int, limit: int) -> int:
    """Where a line longer than the window is cut: at LIMIT, or before the backslashes
    that LIMIT would part from the header-like text they escape."""
    j = limit
    while j > start and body[j - 1] == "\\":
        j -= 1
    return j if j < limit and j > start and HEADER_LIKE.match(body, j) else limit


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
