"""PL/Python bodies of projection A and recall (sql/050-recall.sql)."""

from __future__ import annotations

from donto_pg.core import encoder
from donto_pg.core.windows import recall_windows as windows
from donto_pg.core.windows import window_dates
from donto_pg.server.revision import turn_rows


def recall_windows(plpy, revision_id: int, window: int) -> list[tuple]:
    """Rows (chunk_index, char_start, char_end, text, first_date, min_date, max_date)."""
    plan = plpy.prepare("select body from donto.revision where revision_id = $1", ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto.project_recall: no revision {revision_id}")
    body = rows[0]["body"]
    turns = turn_rows(plpy, revision_id)
    spans = list(windows(body, window))
    dates = window_dates(spans, [t["header_start"] for t in turns],
                         [t["char_end"] for t in turns], [t["date"] for t in turns])
    pairs = enumerate(zip(spans, dates, strict=True))
    return [(i, s, e, body[s:e], *d) for i, ((s, e), d) in pairs]


def embed_query(plpy, text: str, model: str | None) -> str:
    """The query's vector as pgvector text (``donto.embed_query``)."""
    vec = encoder.encode([text], model)[0]
    return "[" + ",".join(f"{x:.7g}" for x in vec) + "]"
