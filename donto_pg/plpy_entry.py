"""Entry points for PL/Python function bodies.

Each SQL function written in PL/Python is two lines that call one function
here; the logic lives in plain modules (segmenter, anchor, embedder, ...) so
that it is unit-tested as ordinary Python and once more through SQL.
Functions take ``plpy`` as their first argument when they need the database.
"""

from __future__ import annotations

import json


def recall_windows(plpy, revision_id: int, window: int) -> list[tuple]:
    """Rows (chunk_index, char_start, char_end, text, first_date, min_date, max_date)."""
    from donto_pg.windows import recall_windows as windows
    from donto_pg.windows import window_dates

    plan = plpy.prepare("select body from donto.revision where revision_id = $1", ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto.project_recall: no revision {revision_id}")
    body = rows[0]["body"]
    plan = plpy.prepare(
        "select header_start, char_end, time_anchor::text as d from donto.turn "
        "where revision_id = $1 order by seq", ["bigint"])
    turns = plpy.execute(plan, [revision_id])
    spans = list(windows(body, window))
    dates = window_dates(spans, [t["header_start"] for t in turns],
                         [t["char_end"] for t in turns], [t["d"] for t in turns])
    pairs = enumerate(zip(spans, dates, strict=True))
    return [(i, s, e, body[s:e], *d) for i, ((s, e), d) in pairs]


def embed_query(text: str, model: str | None) -> str:
    """The query's vector as pgvector text."""
    from donto_pg import embedder

    vec = embedder.encode([text], model)[0]
    return "[" + ",".join(f"{x:.7g}" for x in vec) + "]"


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)
