"""PL/Python bodies of projection B, extraction (sql/070-extraction.sql).

Each SQL function written in PL/Python is two lines that call one function
here, ``GD['donto_pg'].extraction.<fn>(plpy, ...)``; the logic lives in the pure
modules of :mod:`donto_pg.core` (segmenter, anchor, claims, render) so that it is
unit-tested as ordinary Python and once more through SQL.
"""

from __future__ import annotations

import json

from donto_pg.core import render
from donto_pg.core.anchor import anchor
from donto_pg.core.claims import MAX_FIELD_CHARS, injection_signals, parse_response
from donto_pg.core.segmenter import DEFAULT_PARAMS, iter_segments
from donto_pg.server.interrupt import interrupt_check
from donto_pg.server.revision import revision_body, spans_sql, turn_rows


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


MIN_CAP = 200  # a smaller cap cuts blocks of a few characters, one LLM call each


def extraction_params(params: str | None) -> str:
    """The effective segmenter parameters (defaults filled in, validated) as JSON text.

    Projections and runs store these, so ``{}`` and ``{"cap": 4000}`` name the same
    projection. Raises ``ValueError`` on an unknown key or a value of the wrong type.
    """
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
    if out["cap"] < MIN_CAP or out["target"] < 0 or out["min_prose"] < 0:
        raise ValueError(f"extraction params: cap must be >= {MIN_CAP} (characters; a block "
                         "holds its turns' headers too), target and min_prose >= 0")
    return dumps(out)


def block_rows(body: str, turns: list[dict], params: dict) -> list[tuple]:
    """Segment a body into extraction blocks, as rows for donto.extraction_block.

    Rows: (seq, kind, char_start, char_end, turns json, prefix_start, prefix_end,
    prefix_turn_seq, split, min_date, max_date).
    """
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


def extraction_blocks(plpy, revision_id: int, params: str, from_turn: int = 0) -> list[tuple]:
    """Rows of :func:`block_rows` for a stored revision and its turn table.

    FROM_TURN > 0 segments only the turns from that seq on (it must open a session:
    sessions are hard boundaries, so the blocks from there on are those of a whole
    segmentation), numbering the blocks from 0 (``donto._extend_extraction``).
    """
    body = revision_body(plpy, revision_id)
    turns = [t for t in turn_rows(plpy, revision_id) if t["seq"] >= from_turn]
    if not turns:
        plpy.error(f"donto.project_extraction: revision {revision_id} has no turn table "
                   "(record it with donto.record_turns)", sqlstate="22023")
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
    plan = plpy.prepare(
        "select b.revision_id, b.kind, b.turns::text as turns, b.prefix_start, b.prefix_end, "
        "b.prefix_turn_seq, t.preamble, t.reminder "
        "from donto.extraction_block as b "
        "left join lateral donto.extraction_template(b.block_id, $2) as t on true "
        "where b.block_id = $1", ["bigint", "bigint"])
    rows = plpy.execute(plan, [block_id, run_id])
    if not rows:
        plpy.error(f"donto.render_for_extraction: no block {block_id}", sqlstate="22023")
    row = rows[0]
    if row["preamble"] is None:
        plpy.error(f"donto.render_for_extraction: no prompt template for {row['kind']} blocks"
                   + (f" in run {run_id}" if run_id is not None else ""), sqlstate="22023")
    parts = merge_parts(json.loads(row["turns"]))
    starts = [p["char_start"] for p in parts]
    ends = [p["char_end"] for p in parts]
    if row["prefix_start"] is not None:
        starts.append(row["prefix_start"])
        ends.append(row["prefix_end"])
    plan = plpy.prepare(spans_sql(), ["bigint", "integer[]", "integer[]"])
    texts = [r["t"] for r in plpy.execute(plan, [row["revision_id"], starts, ends])]
    # Forgotten words (recall chunks retracted by hand, donto._forgotten_text) are clipped
    # out, as recall's turn blocks clip them: an utterance keeps its other pieces joined by
    # render.CLIP; one all forgotten is left out (defence in depth: a block that holds
    # forgotten words is not listed by donto.pending_extraction_blocks, and its claims are
    # retracted as filed); a block whose utterances are all forgotten is refused.
    plan = plpy.prepare(
        "select lower(x) as s, upper(x) as e "
        "from unnest(donto._forgotten_text($1, null)) as x order by 1", ["bigint"])
    gone = [(r["s"], r["e"]) for r in plpy.execute(plan, [row["revision_id"]])]
    texts = [render.clip_forgotten(t, s, e, gone)
             for t, s, e in zip(texts, starts, ends, strict=True)]
    turns = [{"turn_id": p.get("turn_id"), "role": p.get("role"), "date": p.get("date"),
              "text": text} for p, text in zip(parts, texts, strict=False) if text is not None]
    if not turns:
        plpy.error(f"donto.render_for_extraction: block {block_id} holds only forgotten words "
                   "(recall chunks retracted by hand): it is not sent", sqlstate="55000")
    prefix = None
    if row["prefix_start"] is not None and texts[-1] is not None:
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
    """[(char_start, char_end, method, score)] of a quote in the full body, or [].

    A quote longer than claims.MAX_FIELD_CHARS (the longest a claim may quote) is refused
    (22023); the search honours cancellation and statement_timeout (interrupt_check)."""
    if quote is None or not quote.strip():
        return []
    if len(quote) > MAX_FIELD_CHARS:
        plpy.error(f"donto.anchor: the quote has {len(quote)} characters, more than "
                   f"{MAX_FIELD_CHARS}", sqlstate="22023")
    hit = anchor(revision_body(plpy, revision_id), quote, near, check=interrupt_check(plpy))
    return [] if hit is None else [hit]


def claims_json(response: str | None) -> str:
    """Parse a raw response: JSON {status, error, rejected, injection, signals, claims}."""
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


def parse_claims(plpy, response: str | None) -> str:
    """:func:`claims_json` for SQL (``donto.parse_claims``)."""
    return claims_json(response)


def extraction_params_sql(plpy, params: str | None) -> str:
    """:func:`extraction_params` for SQL: a bad parameter is SQLSTATE 22023."""
    try:
        return extraction_params(params)
    except ValueError as exc:
        plpy.error(f"donto: {exc}", sqlstate="22023")
        raise  # not reached: plpy.error raises
