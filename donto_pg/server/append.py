"""PL/Python bodies of conversations that grow (sql/085-append.sql)."""

from __future__ import annotations

import functools
import json

from donto_pg.core.spans import carried_spans
from donto_pg.core.transcript import (
    append_rows,
    dated_back_note,
    dates_going_back,
    repeated_turn_ids,
)
from donto_pg.server.revision import revision_body


def render_turns(plpy, turns: str, start: int, prev: str | None) -> list[tuple]:
    """Render appended messages (JSON) after a body of START chars whose last turn is PREV
    (JSON {seq, turn_id, session, exchange} or None): one row (text, turns JSON), the turns
    as rows of donto.record_turns with spans in the whole body. A malformed message is
    SQLSTATE 22023."""
    last = json.loads(prev) if prev else None
    try:
        text, rows = append_rows(json.loads(turns), start, last)
    except ValueError as exc:
        plpy.error(f"donto.append_turns: {exc}", sqlstate="22023")
        raise  # not reached: plpy.error raises
    back = repeated_turn_ids(rows, last)
    if back:
        plpy.notice(f"donto.append_turns: turn id(s) {', '.join(map(str, back))} do not come "
                    "after the turn before them (kept, as a load keeps repeated ids)")
    # (a turn dated before one before it in its session is noticed by donto.record_turns,
    # as in a load of the whole text: turns_dated_back)
    return [(text, json.dumps(rows, ensure_ascii=False))]


def turns_dated_back(plpy, turns: str, since: int) -> str | None:
    """The notice of donto.record_turns on a turn table TURNS (JSON rows {turn_id, session,
    date}, in order) whose turns from position SINCE on are new: which of those are dated
    before a turn before them in their session (None: none)."""
    return dated_back_note(dates_going_back(json.loads(turns), None, since))


def spans_in(plpy, old_rev: int, new_rev: int, starts: list[int], ends: list[int]
             ) -> list[tuple]:
    """Where the text of each span (STARTS[i], ENDS[i]) of revision OLD_REV stands in
    revision NEW_REV, a changed text of the same conversation: rows (i, start, end), i
    from 1 (:func:`donto_pg.core.spans.carried_spans`)."""
    return list(_spans_in(plpy, old_rev, new_rev, tuple(zip(starts, ends, strict=True))))


# Revisions are immutable, and every block of a changed conversation that is ingested asks
# the same question of the same two revisions: the diff is made once per backend.
@functools.lru_cache(maxsize=16)
def _spans_in(plpy, old_rev: int, new_rev: int, spans: tuple[tuple[int, int], ...]
              ) -> tuple[tuple[int, int, int], ...]:
    old, new = revision_body(plpy, old_rev), revision_body(plpy, new_rev)
    return tuple((i + 1, s, e) for i, s, e in carried_spans(old, new, spans))
