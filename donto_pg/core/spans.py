"""Where the text of a span of one revision stands in another revision of the same
conversation that changed (an edit somewhere, not an append): for carrying what was
retracted by hand ("forget my password hint") onto a changed conversation
(``donto._forgotten_spans``). Pure functions, no database.

The rule leans towards forgetting: a span left of the first difference between the two
texts, or right of the last one, is the same text at the same (or a shifted) place; a
span that the edit touched is found where its text occurs whole, else where each of its
lines of at least :data:`MIN_LINE` characters occurs, with its parts before and after the
edit. So the forgotten text stays forgotten wherever it survives, and a short common line
("Okay.") is never taken for it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

#: The shortest line of a touched span that is looked for on its own.
MIN_LINE = 12


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


def _occurrences(text: str, body: str) -> Iterator[tuple[int, int]]:
    at = body.find(text)
    while at >= 0:
        yield at, at + len(text)
        at = body.find(text, at + 1)


def carried_spans(old: str, new: str, spans: Sequence[tuple[int, int]]
                  ) -> list[tuple[int, int, int]]:
    """For each span (start, end) of OLD, numbered from 0, the spans of NEW that hold its
    text: rows (number, start, end), in the order of SPANS (a span may have none, or
    several)."""
    prefix = common_prefix(old, new)
    suffix = common_suffix(old, new, min(len(old), len(new)) - prefix)
    shift = len(new) - len(old)
    tail = len(old) - suffix  # where the common suffix starts in OLD
    out: list[tuple[int, int, int]] = []
    for i, (start, end) in enumerate(spans):
        if end <= prefix:
            out.append((i, start, end))
        elif start >= tail:
            out.append((i, start + shift, end + shift))
        else:
            found = set(_occurrences(old[start:end], new)) if end > start else set()
            if not found:
                if start < prefix:
                    found.add((start, prefix))
                if end > tail:
                    found.add((tail + shift, end + shift))
                for line in old[start:end].split("\n"):
                    if len(line.strip()) >= MIN_LINE:
                        found.update(_occurrences(line, new))
            out.extend((i, s, e) for s, e in sorted(found))
    return out
