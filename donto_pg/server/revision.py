"""Reading a revision from inside the server: its body (cached) and its turn table.

Shared by the PL/Python topics (recall, extraction, ab); every function takes
``plpy`` as its first argument.

Revision bodies are immutable (content-addressed), so a backend keeps the last few
it read, keyed by (revision_id, sha256): anchoring every claim of a block in a
50-million-character body must not fetch the body once per claim.
"""

from __future__ import annotations

_BODY_CACHE: dict[tuple[int, str], str] = {}
_BODY_CACHE_SIZE = 2

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
        plan = plpy.prepare("select donto.revision_body($1) as body", ["bigint"])
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
