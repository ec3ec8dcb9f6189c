"""PL/Python bodies of the A/B gate (sql/075-ab.sql): fixed windows as extraction units.

The client side of the gate (holdout, arms, extraction and recall passes, verdict)
is :mod:`donto_pg.ab`; this is the part that runs inside the server.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

from donto_pg.core.fences import fence_spans
from donto_pg.core.windows import recall_windows
from donto_pg.server.revision import revision_body, turn_rows

_NONWS = re.compile(r"\S")


def _nonws(text: str) -> int:
    return len(_NONWS.findall(text))


def fixed_block_rows(body: str, turns: Sequence[Mapping[str, Any]], window: int) -> list[tuple]:
    """Fixed line-respecting windows (the spans of projection A) as extraction-block rows.

    A window's parts are the message contents it overlaps (headers are metadata, as in
    projection B); its kind is ``code`` when all its non-blank content lies in code
    fences, ``dialogue`` when none does, ``mixed`` otherwise, ``system`` when every part
    is a system message. Windows holding no non-blank message content (a session header
    alone) are left out: they are no extraction unit. No inert prefix (the original cut
    had none). Rows as ``donto._extraction_blocks``: (seq, kind, char_start, char_end,
    turns json, prefix_start, prefix_end, prefix_turn_seq, split, min_date, max_date).
    """
    ts = sorted((t for t in turns if t["char_end"] > t["char_start"]), key=lambda t: t["seq"])
    ends = [t["char_end"] for t in ts]
    fences: dict[int, list[tuple[int, int]]] = {}
    rows: list[tuple] = []
    for ws, we in recall_windows(body, window):
        parts: list[dict[str, Any]] = []
        code = prose = 0
        system_only = True
        for t in ts[bisect_right(ends, ws):]:
            if t["char_start"] >= we:
                break
            s, e = max(ws, t["char_start"]), min(we, t["char_end"])
            if s >= e:
                continue
            if t["seq"] not in fences:
                fences[t["seq"]] = list(fence_spans(body, t["char_start"], t["char_end"]))
            total = _nonws(body[s:e])
            fenced = sum(_nonws(body[max(s, fs):min(e, fe)])
                         for fs, fe in fences[t["seq"]] if fs < e and fe > s)
            code += fenced
            prose += total - fenced
            system_only = system_only and t.get("role") == "system"
            parts.append({
                "seq": t["seq"], "turn_id": t.get("turn_id"), "role": t.get("role"),
                "session": t.get("session"), "date": t.get("date"), "char_start": s,
                "char_end": e, "split": s > t["char_start"] or e < t["char_end"],
            })
        if code + prose == 0:
            continue
        if system_only:
            kind = "system"
        elif code == 0:
            kind = "dialogue"
        elif prose == 0:
            kind = "code"
        else:
            kind = "mixed"
        dates = sorted({str(p["date"]) for p in parts if p.get("date")})
        rows.append((
            len(rows), kind, ws, we, json.dumps(parts, ensure_ascii=False), None, None, None,
            any(p["split"] for p in parts), dates[0] if dates else None,
            dates[-1] if dates else None,
        ))
    return rows


def fixed_blocks_sql(plpy, revision_id: int, window: int) -> list[tuple]:
    """:func:`fixed_block_rows` for a stored revision (``donto._ab_fixed_blocks``)."""
    if window is None or window < 1:
        plpy.error(f"donto._ab_fixed_blocks: window must be >= 1, got {window}",
                   sqlstate="22023")
    body = revision_body(plpy, revision_id)
    turns = turn_rows(plpy, revision_id)
    if not turns:
        plpy.error(f"donto._ab_fixed_blocks: revision {revision_id} has no turn table",
                   sqlstate="22023")
    return fixed_block_rows(body, turns, window)
