"""Where the text of a span of one revision stands in another revision of the same
conversation that changed (an edit somewhere, not an append): for carrying what was
retracted by hand ("forget my password hint") onto a changed conversation
(``donto._forgotten_spans``). Pure functions, no database.

The two texts are compared as a diff does: their common prefix and common suffix are
the same text (a span there keeps its place, shifted after the edit), and the lines
between them are matched with :class:`difflib.SequenceMatcher`. A span's lines that the
diff keeps map to where they stand now; its lines that the edit replaced map to the lines
that replaced them (leaning towards forgetting: the edited text is the forgotten text,
changed); its lines that the edit deleted map to nothing. So a forgotten text is found
where it survives and nowhere else: a line that occurs all over the conversation
("### Example Conversation") is not taken for it. When the changed middle is longer than
:data:`MAX_DIFF_LINES` lines on either side (a conversation rewritten, not edited), a span
that reaches into it maps to the whole changed middle.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Sequence
from itertools import accumulate

#: The longest changed middle (in lines, either text) that is diffed line by line.
MAX_DIFF_LINES = 200_000


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of A and B (a binary search of slice
    comparisons: memcmp in C, not a character loop in Python)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def common_suffix(a: str, b: str, limit: int) -> int:
    """The length of the longest common suffix of A and B, at most LIMIT."""
    lo, hi = 0, min(len(a), len(b), limit)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[len(a) - mid:len(a) - lo] == b[len(b) - mid:len(b) - lo]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _middle_map(old: str, new: str, o0: int, o1: int, n0: int, n1: int
                ) -> list[tuple[int, int, int, int, bool]]:
    """The changed middle old[o0:o1] / new[n0:n1] (whole lines) as pieces (old start,
    old end, new start, new end, kept): a kept piece is the same text in both."""
    old_lines = old[o0:o1].splitlines(keepends=True)
    new_lines = new[n0:n1].splitlines(keepends=True)
    if max(len(old_lines), len(new_lines)) > MAX_DIFF_LINES:
        return [(o0, o1, n0, n1, False)]
    at_old = list(accumulate((len(x) for x in old_lines), initial=o0))  # line starts
    at_new = list(accumulate((len(x) for x in new_lines), initial=n0))
    # (autojunk: lines found all over a long middle anchor nothing, as in any diff tool;
    # without it, 18,000 lines of a BEAM-500K conversation took 7 s, with it 0.04 s)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines)
    return [(at_old[i1], at_old[i2], at_new[j1], at_new[j2], tag == "equal")
            for tag, i1, i2, j1, j2 in matcher.get_opcodes() if tag != "insert"]


def carried_spans(old: str, new: str, spans: Sequence[tuple[int, int]]
                  ) -> list[tuple[int, int, int]]:
    """For each span (start, end) of OLD, numbered from 0, the spans of NEW that hold its
    text (see the module): rows (number, start, end), in the order of SPANS (a span may
    have none, or several)."""
    prefix = common_prefix(old, new)
    suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
    shift = len(new) - len(old)
    # the changed middle, widened to whole lines (the same lines of both texts around it)
    o0 = old.rfind("\n", 0, prefix) + 1
    cut = old.find("\n", len(old) - suffix)
    o1 = len(old) if cut < 0 else cut + 1
    n0, n1 = o0, o1 + shift
    pieces: list[tuple[int, int, int, int, bool]] = []
    ends: list[int] = []
    out: list[tuple[int, int, int]] = []
    for i, (start, end) in enumerate(spans):
        if end <= prefix:  # before the first difference: the same text, in place
            out.append((i, start, end))
            continue
        if start >= len(old) - suffix:  # after the last one: shifted
            out.append((i, start + shift, end + shift))
            continue
        if not pieces:
            pieces = _middle_map(old, new, o0, o1, n0, n1)
            ends = [p[1] for p in pieces]
        found = []
        if start < o0:
            found.append((start, o0))
        if end > o1:
            found.append((n1, end + shift))
        for po, pe, qo, qe, kept in pieces[bisect.bisect_right(ends, start):]:
            if po >= end:
                break
            if kept:  # the same text: the part of the span in it, in place
                found.append((qo + max(start, po) - po, qo + min(end, pe) - po))
            else:  # replaced: by what replaced it (deleted: nothing)
                found.append((qo, qe))
        out.extend((i, s, e) for s, e in _merged(found))
    return out


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(x for x in spans if x[1] > x[0]):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged
