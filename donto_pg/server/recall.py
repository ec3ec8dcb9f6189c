"""PL/Python bodies of projection A and recall (sql/050-recall.sql)."""

from __future__ import annotations

from donto_pg.core import encoder
from donto_pg.core.windows import recall_windows as windows
from donto_pg.core.windows import window_dates
from donto_pg.server.revision import text_sql, turn_rows


def recall_windows(plpy, revision_id: int, window: int) -> list[tuple]:
    """Rows (chunk_index, char_start, char_end, text, first_date, min_date, max_date)."""
    plan = plpy.prepare(text_sql(), ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto.project_recall: no revision {revision_id}", sqlstate="22023")
    body = rows[0]["body"]
    turns = turn_rows(plpy, revision_id)
    spans = list(windows(body, window))
    dates = window_dates(spans, [t["header_start"] for t in turns],
                         [t["char_end"] for t in turns], [t["date"] for t in turns])
    pairs = enumerate(zip(spans, dates, strict=True))
    return [(i, s, e, body[s:e], *d) for i, ((s, e), d) in pairs]


def recall_windows_from(plpy, revision_id: int, window: int, start: int) -> list[tuple]:
    """Rows (char_start, char_end, text, first_date, min_date, max_date) of the windows of a
    revision from the window boundary START on, reading only the body after START
    (``donto._recall_windows_from``: a revision that extends another is cut again only
    from the old last window)."""
    plan = plpy.prepare("select donto.span_text(revision_id, $2, body_chars) as tail "
                        "from donto.revision where revision_id = $1", ["bigint", "integer"])
    rows = plpy.execute(plan, [revision_id, start])
    if not rows:
        plpy.error(f"donto._recall_windows_from: no revision {revision_id}", sqlstate="22023")
    tail = rows[0]["tail"]
    turns = [t for t in turn_rows(plpy, revision_id) if t["char_end"] > start]
    spans = [(s + start, e + start) for s, e in windows(tail, window)]
    dates = window_dates(spans, [t["header_start"] for t in turns],
                         [t["char_end"] for t in turns], [t["date"] for t in turns])
    return [(s, e, tail[s - start:e - start], *d)
            for (s, e), d in zip(spans, dates, strict=True)]


def embed_query(plpy, text: str, model: str | None) -> str:
    """The query's vector as pgvector text (``donto.embed_query``); a query over
    donto._check_query's bound is refused before the model sees it, and so is a model
    that is neither the default nor registered (``donto.embedding_model_id`` raises
    22023): the name is what the server loads, so a caller must not choose any path."""
    plpy.execute(plpy.prepare("select donto._check_query($1, 'donto.embed_query', true)",
                              ["text"]), [text])
    if model is not None and model not in encoder.DEFAULT_NAMES:
        plpy.execute(plpy.prepare("select donto.embedding_model_id($1)", ["text"]), [model])
    vec = encoder.encode([text], model)[0]
    return "[" + ",".join(f"{x:.7g}" for x in vec) + "]"


def turn_key_texts(plpy, revision_id: int) -> list[tuple]:
    """Rows (seq, header_start, char_start, char_end, text) of the user turns of a revision
    with text (``donto._turn_key_texts``): the body is read once and sliced here (one
    SQL substr per turn would read a 2-million-character body once per turn)."""
    plan = plpy.prepare(text_sql(), ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto._turn_key_texts: no revision {revision_id}", sqlstate="22023")
    body = rows[0]["body"]
    return [(t["seq"], t["header_start"], t["char_start"], t["char_end"],
             body[t["char_start"]:t["char_end"]])
            for t in turn_rows(plpy, revision_id)
            if t["role"] == "user" and t["char_start"] < t["char_end"]
            and body[t["char_start"]:t["char_end"]].strip()]
