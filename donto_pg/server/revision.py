"""Reading a revision from inside the server: its body (cached) and its turn table.

Shared by the PL/Python topics (recall, extraction, ab); every function takes
``plpy`` as its first argument.

Revision bodies are immutable (content-addressed), so a backend keeps the last few
it read, keyed by (revision_id, sha256): anchoring every claim of a block in a
50-million-character body must not fetch the body once per claim.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_BODY_CACHE: dict[tuple[int, str], str] = {}
_BODY_CACHE_SIZE = 2

# A revision's text is read through donto.revision_body and donto.span_text: since
# migration 038 the body column of an appended revision is null (its text is stored as
# skip-deltas). The SQL of a released version (0.1.0, 0.2.0: donto_pg.plpy_entry) has
# neither function, and no deltas either: its calls read the column (released_schema).
_TEXT_SQL = ("select donto.revision_body(revision_id) as body from donto.revision "
             "where revision_id = $1")
_RELEASED_TEXT_SQL = "select body from donto.revision where revision_id = $1"
_SPANS_SQL = ("select donto.span_text($1, x.s, x.e) as t "
              "from unnest($2::integer[], $3::integer[]) "
              "with ordinality as x (s, e, i) order by x.i")
_RELEASED_SPANS_SQL = ("select substring(r.body from x.s + 1 for x.e - x.s) as t "
                       "from donto.revision as r, unnest($2::integer[], $3::integer[]) "
                       "with ordinality as x (s, e, i) where r.revision_id = $1 order by x.i")
_released = [False]


@contextmanager
def released_schema() -> Iterator[None]:
    """Within it, read revision text from the body column, as the schema of a released
    version (donto_pg.plpy_entry, until ALTER EXTENSION donto UPDATE) stores it."""
    before = _released[0]
    _released[0] = True
    try:
        yield
    finally:
        _released[0] = before


def text_sql() -> str:
    """The query of a revision's whole text (parameter: revision id; no row: none)."""
    return _RELEASED_TEXT_SQL if _released[0] else _TEXT_SQL


def spans_sql() -> str:
    """The query of the texts of spans of a revision (parameters: revision id, starts,
    ends), one row per span in order."""
    return _RELEASED_SPANS_SQL if _released[0] else _SPANS_SQL

#: The turn table of a revision, in order: the one query every topic reads it with.
TURNS_SQL = (
    "select seq, turn_id, role, session, exchange, time_anchor::text as date, "
    "header_start, char_start, char_end from donto.turn where revision_id = $1 "
    "order by seq"
)


def revision_body(plpy, revision_id: int) -> str:
    """The body of a revision (cached per backend); raises a PL/Python error if missing."""
    plan = plpy.prepare(
        "select encode(sha256, 'hex') as h from donto.revision where revision_id = $1",
        ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto: no revision {revision_id}", sqlstate="22023")
    key = (revision_id, rows[0]["h"])
    body = _BODY_CACHE.pop(key, None)
    if body is None:
        plan = plpy.prepare(text_sql(), ["bigint"])
        body = plpy.execute(plan, [revision_id])[0]["body"]
    _BODY_CACHE[key] = body  # most recently used last
    while len(_BODY_CACHE) > _BODY_CACHE_SIZE:
        del _BODY_CACHE[next(iter(_BODY_CACHE))]
    return body


def turn_rows(plpy, revision_id: int) -> list[dict]:
    """The turn table of a revision as dicts (seq, turn_id, role, session, exchange, date,
    header_start, char_start, char_end), in seq order; [] when it has none."""
    plan = plpy.prepare(TURNS_SQL, ["bigint"])
    return [dict(t) for t in plpy.execute(plan, [revision_id])]
