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


# --- projection B (extraction) -----------------------------------------------------
#
# Revision bodies are immutable (content-addressed), so a backend keeps the last few
# it read, keyed by (revision_id, sha256): anchoring every claim of a block in a
# 50-million-character body must not fetch the body once per claim.

_BODY_CACHE: dict[tuple[int, str], str] = {}
_BODY_CACHE_SIZE = 2


def revision_body(plpy, revision_id: int) -> str:
    """The body of a revision (cached per backend); raises a PL/Python error if missing."""
    plan = plpy.prepare(
        "select encode(sha256, 'hex') as h from donto.revision where revision_id = $1",
        ["bigint"])
    rows = plpy.execute(plan, [revision_id])
    if not rows:
        plpy.error(f"donto: no revision {revision_id}")
    key = (revision_id, rows[0]["h"])
    body = _BODY_CACHE.pop(key, None)
    if body is None:
        plan = plpy.prepare("select body from donto.revision where revision_id = $1", ["bigint"])
        body = plpy.execute(plan, [revision_id])[0]["body"]
    _BODY_CACHE[key] = body  # most recently used last
    while len(_BODY_CACHE) > _BODY_CACHE_SIZE:
        del _BODY_CACHE[next(iter(_BODY_CACHE))]
    return body


def extraction_params(params: str | None) -> str:
    """The effective segmenter parameters (defaults filled in, validated) as JSON text.

    Projections and runs store these, so ``{}`` and ``{"cap": 4000}`` name the same
    projection. Raises ``ValueError`` on an unknown key or a value of the wrong type.
    """
    from donto_pg.segmenter import DEFAULT_PARAMS

    given = json.loads(params) if params else {}
    if not isinstance(given, dict):
        raise ValueError("extraction params must be a JSON object")
    unknown = sorted(set(given) - set(DEFAULT_PARAMS))
    if unknown:
        raise ValueError(f"unknown extraction params {unknown} (known: {sorted(DEFAULT_PARAMS)})")
    out = dict(DEFAULT_PARAMS)
    for key, value in given.items():
        default = DEFAULT_PARAMS[key]
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"extraction param {key} must be true or false")
        elif isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"extraction param {key} must be an integer")
        out[key] = value
    if out["cap"] < 1 or out["target"] < 0 or out["min_prose"] < 0:
        raise ValueError("extraction params: cap must be >= 1, target and min_prose >= 0")
    return dumps(out)


def block_rows(body: str, turns: list[dict], params: dict) -> list[tuple]:
    """Segment a body into extraction blocks, as rows for donto.extraction_block.

    Rows: (seq, kind, char_start, char_end, turns json, prefix_start, prefix_end,
    prefix_turn_seq, split, min_date, max_date).
    """
    from donto_pg.segmenter import iter_segments

    rows = []
    for b in iter_segments(body, turns, params):
        dates = sorted({p["date"] for p in b["turns"] if p.get("date")})
        prefix = b.get("prefix") or {}
        rows.append((
            b["seq"], b["kind"], b["char_start"], b["char_end"], dumps(b["turns"]),
            prefix.get("char_start"), prefix.get("char_end"), prefix.get("turn_seq"),
            bool(b.get("split")), dates[0] if dates else None, dates[-1] if dates else None,
        ))
    return rows


def extraction_blocks(plpy, revision_id: int, params: str) -> list[tuple]:
    """Rows of :func:`block_rows` for a stored revision and its turn table."""
    body = revision_body(plpy, revision_id)
    plan = plpy.prepare(
        "select seq, turn_id, role, session, exchange, time_anchor::text as date, "
        "header_start, char_start, char_end from donto.turn where revision_id = $1 "
        "order by seq", ["bigint"])
    turns = [dict(t) for t in plpy.execute(plan, [revision_id])]
    if not turns:
        plpy.error(f"donto.project_extraction: revision {revision_id} has no turn table "
                   "(record it with donto.record_turns)")
    return block_rows(body, turns, json.loads(params))


def merge_parts(parts: list[dict]) -> list[dict]:
    """Join consecutive, contiguous parts of the same message into one utterance."""
    out: list[dict] = []
    for p in parts:
        last = out[-1] if out else None
        if last is not None and last["seq"] == p["seq"] and last["char_end"] == p["char_start"]:
            last["char_end"] = p["char_end"]
        else:
            out.append(dict(p))
    return out


def render_for_extraction(plpy, block_id: int, run_id: int | None) -> str:
    """The extraction prompt (user message) of a block, from its template in the database."""
    from donto_pg import render

    plan = plpy.prepare(
        "select b.revision_id, b.kind, b.turns::text as turns, b.prefix_start, b.prefix_end, "
        "b.prefix_turn_seq, t.preamble, t.reminder "
        "from donto.extraction_block as b "
        "left join lateral donto.extraction_template(b.block_id, $2) as t on true "
        "where b.block_id = $1", ["bigint", "bigint"])
    rows = plpy.execute(plan, [block_id, run_id])
    if not rows:
        plpy.error(f"donto.render_for_extraction: no block {block_id}")
    row = rows[0]
    if row["preamble"] is None:
        plpy.error(f"donto.render_for_extraction: no prompt template for {row['kind']} blocks"
                   + (f" in run {run_id}" if run_id is not None else ""))
    parts = merge_parts(json.loads(row["turns"]))
    starts = [p["char_start"] for p in parts]
    ends = [p["char_end"] for p in parts]
    if row["prefix_start"] is not None:
        starts.append(row["prefix_start"])
        ends.append(row["prefix_end"])
    plan = plpy.prepare(
        "select substring(r.body from x.s + 1 for x.e - x.s) as t "
        "from donto.revision as r, unnest($2::integer[], $3::integer[]) "
        "with ordinality as x (s, e, i) where r.revision_id = $1 order by x.i",
        ["bigint", "integer[]", "integer[]"])
    texts = [r["t"] for r in plpy.execute(plan, [row["revision_id"], starts, ends])]
    turns = [{"turn_id": p.get("turn_id"), "role": p.get("role"), "date": p.get("date"),
              "text": text} for p, text in zip(parts, texts, strict=False)]
    prefix = None
    if row["prefix_start"] is not None:
        plan = plpy.prepare(
            "select turn_id, role, time_anchor::text as date from donto.turn "
            "where revision_id = $1 and seq = $2", ["bigint", "integer"])
        meta = plpy.execute(plan, [row["revision_id"], row["prefix_turn_seq"]])
        m = meta[0] if meta else {}
        prefix = {"turn_id": m.get("turn_id"), "role": m.get("role"), "date": m.get("date"),
                  "text": texts[-1]}
    block = {"block_id": block_id, "kind": row["kind"], "turns": turns, "prefix": prefix}
    return render.render_block(block, {"preamble": row["preamble"], "reminder": row["reminder"]})


def anchor_in_revision(plpy, revision_id: int, quote: str | None,
                       near: int | None) -> list[tuple]:
    """[(char_start, char_end, method, score)] of a quote in the full body, or []."""
    from donto_pg.anchor import anchor

    if quote is None or not quote.strip():
        return []
    hit = anchor(revision_body(plpy, revision_id), quote, near)
    return [] if hit is None else [hit]


def parse_claims(response: str | None) -> str:
    """Parse a raw response: JSON {status, error, rejected, injection, signals, claims}."""
    from donto_pg.claims import injection_signals, parse_response

    parsed = parse_response(response or "")
    signals = injection_signals(response or "")
    return dumps({
        "status": parsed.status,
        "error": parsed.error,
        "rejected": parsed.rejected,
        "injection": bool(signals),
        "signals": signals,
        "claims": parsed.claims,
    })


def extraction_params_sql(plpy, params: str | None) -> str:
    """:func:`extraction_params` for SQL: a bad parameter is SQLSTATE 22023."""
    try:
        return extraction_params(params)
    except ValueError as exc:
        plpy.error(f"donto: {exc}", sqlstate="22023")
        raise  # not reached: plpy.error raises


# --- standing memory ------------------------------------------------------------------


def standing_rows(plpy, revision_id: int) -> list[tuple]:
    """Rows (ord, kind, subject_key, turn_seq, turn_id, char_start, char_end, text, said_on)."""
    from donto_pg.standing import detect

    body = revision_body(plpy, revision_id)
    plan = plpy.prepare(
        "select seq, turn_id, char_start, char_end, time_anchor::text as d from donto.turn "
        "where revision_id = $1 and role = 'user' order by seq", ["bigint"])
    out: list[tuple] = []
    for t in plpy.execute(plan, [revision_id]):
        base = t["char_start"]
        for s in detect(body[base:t["char_end"]]):
            out.append((len(out), s.kind, s.subject, t["seq"], t["turn_id"],
                        base + s.start, base + s.end, s.text, t["d"]))
    return out
