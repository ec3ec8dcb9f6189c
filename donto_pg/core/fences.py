"""Markdown code fences: the one fence parser of donto-pg.

A fence opens on a line of three or more backticks or tildes (indentation of
spaces/tabs allowed; a backtick fence's info string holds no backtick) and closes
on a line holding only a run of the same character at least as long. A fence
left open runs to the end of the text given. The segmenter (code blocks), the
A/B gate (kind of a fixed window) and the canonical text's code share all read
fences through :func:`fence_spans`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

# An opening fence line (without the leading ``^``, used with ``match`` at a line start).
_OPEN_BODY = r"[ \t]*(?:(`{3,})[^`\n]*|(~{3,})[^\n]*)$"
_OPEN_AT = re.compile(_OPEN_BODY, re.M)
_OPEN_LINE = re.compile("^" + _OPEN_BODY, re.M)
_CLOSE_LINE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t\r]*$", re.M)


def fence_spans(body: str, start: int, end: int) -> Iterator[tuple[int, int]]:
    """Yield ``(fence_start, fence_end)`` for every code fence in ``body[start:end]``.

    ``start`` must be the start of a line of the message (the message start counts as
    one).  ``fence_start`` is the start of the opening line, ``fence_end`` the end of the
    closing line (before its newline) or ``end`` when the fence is left open.
    """
    pos = start
    while pos < end:
        m = _OPEN_AT.match(body, pos, end) if pos == start else None
        if m is None:
            m = _OPEN_LINE.search(body, pos, end)
            if m is None:
                return
        run = m.group(1) or m.group(2)
        char, count = run[0], len(run)
        fs = m.start()
        line_end = m.end()
        if line_end >= end:
            yield fs, end
            return
        p = line_end + 1
        while True:
            c = _CLOSE_LINE.search(body, p, end)
            if c is None:
                yield fs, end
                return
            close = c.group(1)
            if close[0] == char and len(close) >= count:
                yield fs, c.end()
                pos = c.end() + 1
                break
            p = c.end() + 1
