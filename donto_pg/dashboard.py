"""The live quality dashboard (``donto-pg dashboard``): one local web page.

A small :mod:`http.server` app on 127.0.0.1 serves

* ``GET /`` - one HTML page, its CSS and JavaScript inline (no CDN, no network:
  the page only ever fetches ``/api/state`` from the same origin);
* ``GET /api/state`` - the state below as JSON; the page polls it every 2 s, so it
  follows an extraction while it runs;
* ``GET /healthz`` - ``ok``.

The state is read in ONE read-only, repeatable-read transaction on a short-lived
connection per request (so every number on the page comes from one snapshot), and
needs nothing beyond what ``donto_reader`` is granted:

* ``runs`` - the latest extraction runs (arms; ``donto.extraction_run_status``),
  each with ``donto.extraction_run_stats`` (counts of healthy / degraded / broken /
  injected blocks, injection rate, median anchor rate), its alarm state
  (``recorded``: the latest ``alarm`` event; ``live``: :func:`donto_pg.extract.alarm_verdict`
  over the stats, with the extractor's default thresholds unless given), histograms
  of the quality vector (facts per chunk in 0..9 and 10+, anchor rate and
  hypothesis rate in ten 0.1-wide bins over the blocks that returned facts: a
  block without facts is broken, not unanchored), and the same per conversation,
  with the blocks of its projection B ingested so far (``blocks`` of ``total``);
* ``problems`` - the latest degraded or broken blocks, with the start of their
  text and of the raw answer (adversarial text: the page shows it as text only);
* ``gate`` - the A/B gate verdicts: the first of :data:`GATE_RELATIONS`
  (``donto.ab_report``) that exists is shown as a table (the :data:`GATE_COLUMNS`
  it has, else all its columns; a ``verdict`` column is coloured: commit,
  re-prompt, re-chunk, reject); no such relation or no row is "no A/B runs yet",
  and an error there never breaks the page;
* ``recall`` - hit@k per ability and arm from the eval report given with
  ``eval_json`` (``donto-pg eval recall --json > FILE``): the file is re-read
  whenever it changes, so re-running the evaluation updates the charts. The
  dashboard never runs the evaluation itself (it takes minutes and needs the
  embedding model); without a file the page says how to make one.

"Degraded" (facts extracted, none anchored) and "broken" (no facts) have their
own colours and labels everywhere; "injected" (the answer followed the source
instead of extracting) is a subset of broken.

Text from the database is attacker-controlled conversation text: the page builds
its DOM with ``textContent``/``setAttribute`` only (never ``innerHTML``), and the
responses carry a Content-Security-Policy that allows only the page's own inline
script and style (by hash) and same-origin fetches, so even injected markup could
not run. Requests whose ``Host`` is not the server's own address are refused (DNS
rebinding).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import inspect
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from donto_pg import extract

__all__ = [
    "GATE_COLUMNS",
    "GATE_RELATIONS",
    "DashboardServer",
    "collect_state",
    "page_html",
    "run",
    "serve",
]

POLL_MS = 2000
MAX_RUNS = 12
MAX_PROBLEMS = 15
EXCERPT_CHARS = 240
MAX_GATE_ROWS = 200
STATEMENT_TIMEOUT_MS = 10_000

#: Where the A/B gate verdicts live (the first relation that exists is shown):
#: ``donto.ab_report`` (sql/075-ab.sql) is the latest result of every arm on every gate.
GATE_RELATIONS: tuple[str, ...] = ("donto.ab_report",)
#: The columns shown when the relation has them (with ``verdict``); else all of them.
GATE_COLUMNS: tuple[str, ...] = (
    "gate_id", "arm", "strategy", "run_label", "stage", "units", "facts_per_chunk",
    "median_anchor_rate", "hypothesis_rate", "injection_rate", "zero_fact_rate",
    "recall_hit", "baseline_hit", "verdict", "reasons", "stop_reason", "created_at",
)

_DEFAULTS = inspect.signature(extract.run_extraction).parameters
DEFAULT_MAX_INJECTION: float = _DEFAULTS["max_injection"].default
DEFAULT_MIN_ANCHOR: float = _DEFAULTS["min_anchor"].default

# Summary parts of an eval_recall report (the per-question list is left out).
_RECALL_KEYS = ("ks", "arms", "evaluated", "questions_total", "excluded_abstention",
                "excluded_no_gold", "conversations", "span", "pool", "seconds",
                "by_ability", "overall", "macro")

# --- SQL ---------------------------------------------------------------------------

_RUNS = """
select s.run_id, s.label, s.is_baseline, s.model, s.params, s.started_at,
       s.status, s.status_detail ->> 'reason' as status_reason, s.status_at,
       s.blocks_ingested, donto.extraction_run_stats(s.run_id) as stats,
       (select pg_catalog.jsonb_build_object('reason', e.detail ->> 'reason', 'at', e.at)
        from donto.extraction_run_event as e
        where e.run_id = s.run_id and e.event = 'alarm'
        order by e.event_id desc limit 1) as last_alarm
from donto.extraction_run_status as s
order by s.run_id desc
limit %(n)s
"""

_GROUPS = """
select q.run_id, q.document, q.revision_id,
       pg_catalog.count(*) as blocks,
       pg_catalog.count(*) filter (where q.fate = 'healthy') as healthy,
       pg_catalog.count(*) filter (where q.fate = 'degraded') as degraded,
       pg_catalog.count(*) filter (where q.fate = 'broken') as broken,
       coalesce(pg_catalog.sum(q.injection), 0) as injected,
       coalesce(pg_catalog.sum(q.facts_per_chunk), 0) as facts,
       pg_catalog.percentile_cont(0.5) within group (order by q.anchor_rate)
           filter (where q.facts_per_chunk > 0) as median_anchor_rate,
       pg_catalog.percentile_cont(0.5) within group (order by q.hypothesis_rate)
           filter (where q.facts_per_chunk > 0) as median_hypothesis_rate,
       pg_catalog.max(q.received_at) as last_at
from donto.chunk_quality as q
where q.run_id = any(%(runs)s)
group by q.run_id, q.document, q.revision_id
order by q.run_id desc, q.document, q.revision_id
"""

_HISTOGRAMS = """
select q.run_id, q.revision_id, h.metric, h.bin, pg_catalog.count(*) as n
from donto.chunk_quality as q
cross join lateral (values
    ('facts', least(q.facts_per_chunk, 10)),
    ('anchor', case when q.facts_per_chunk > 0
                    then least(pg_catalog.floor(q.anchor_rate * 10)::integer, 9) end),
    ('hypothesis', case when q.facts_per_chunk > 0
                        then least(pg_catalog.floor(q.hypothesis_rate * 10)::integer, 9) end)
) as h (metric, bin)
where q.run_id = any(%(runs)s) and h.bin is not null
group by 1, 2, 3, 4
"""

# Blocks of the projection(s) a run has ingested from, per revision.
_TOTALS = """
select t.run_id, t.revision_id, pg_catalog.count(*) as total
from (
    select distinct x.run_id, b.projection_id, b.revision_id
    from donto.extraction_response as x
    inner join donto.extraction_block as b on x.block_id = b.block_id
    where x.run_id = any(%(runs)s)
) as t
inner join donto.extraction_block as b2 on t.projection_id = b2.projection_id
group by 1, 2
"""

_PROBLEMS = """
select q.run_id, q.block_id, q.document, q.seq, q.kind, q.fate, q.injection,
       q.parse_status, q.facts_per_chunk, q.anchor_rate, q.received_at,
       q.char_end - q.char_start as chars,
       donto.span_text(q.revision_id, q.char_start,
                       least(q.char_end, q.char_start + %(excerpt)s)) as excerpt,
       pg_catalog.left(x.response, %(excerpt)s) as answer
from donto.chunk_quality as q
inner join donto.extraction_response as x on q.response_id = x.response_id
where q.run_id = any(%(runs)s) and q.fate <> 'healthy'
order by q.response_id desc
limit %(n)s
"""


# --- state -------------------------------------------------------------------------


def _json_default(o: Any) -> Any:
    if isinstance(o, decimal.Decimal):
        return float(o)
    if isinstance(o, dt.datetime | dt.date | dt.time):
        return o.isoformat()
    if isinstance(o, bytes | memoryview):
        return base64.b64encode(bytes(o)).decode()
    return str(o)


def _rows(cur: psycopg.Cursor) -> list[dict[str, Any]]:
    cols = [c.name for c in cur.description or []]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]


def _empty_hist() -> dict[str, list[int]]:
    return {"facts": [0] * 11, "anchor": [0] * 10, "hypothesis": [0] * 10}


def _alarm(run: Mapping[str, Any], max_injection: float, min_anchor: float) -> dict[str, Any]:
    live = extract.alarm_verdict(run["stats"] or {}, max_injection=max_injection,
                                 min_anchor=min_anchor)
    recorded = run.get("last_alarm")
    if run.get("status") == "alarm":
        state = "stopped"
    elif live:
        state = "tripped"
    else:
        state = "ok"
    return {"state": state, "live": live, "recorded": recorded}


def _runs(conn: psycopg.Connection, max_injection: float, min_anchor: float,
          max_runs: int, max_problems: int) -> dict[str, Any]:
    runs = _rows(conn.execute(_RUNS, {"n": max_runs}))
    runs_total = conn.execute("select pg_catalog.count(*) from donto.extraction_run").fetchone()[0]
    ids = [r["run_id"] for r in runs]
    groups = _rows(conn.execute(_GROUPS, {"runs": ids})) if ids else []
    hists = conn.execute(_HISTOGRAMS, {"runs": ids}).fetchall() if ids else []
    totals = {(r, v): n for r, v, n in conn.execute(_TOTALS, {"runs": ids}).fetchall()} \
        if ids else {}
    problems = _rows(conn.execute(_PROBLEMS, {"runs": ids, "n": max_problems,
                                              "excerpt": EXCERPT_CHARS})) if ids else []

    by_key: dict[tuple[int, int], dict[str, Any]] = {}
    for g in groups:
        g["total"] = totals.get((g["run_id"], g["revision_id"]))
        g["hist"] = _empty_hist()
        by_key[(g["run_id"], g["revision_id"])] = g
    for run_id, rev, metric, b, n in hists:
        g = by_key.get((run_id, rev))
        if g is not None:
            g["hist"][metric][b] += n
    for r in runs:
        convs = [g for g in groups if g["run_id"] == r["run_id"]]
        hist = _empty_hist()
        for g in convs:
            for metric, counts in g["hist"].items():
                hist[metric] = [a + b for a, b in zip(hist[metric], counts, strict=True)]
        r["hist"] = hist
        r["conversations"] = convs
        r["total_blocks"] = sum(g["total"] or 0 for g in convs)
        r["running"] = r["status"] in ("started", "resumed")
        r["alarm"] = _alarm(r, max_injection, min_anchor)
    return {"runs": runs, "runs_total": runs_total, "problems": problems}


def _gate(conn: psycopg.Connection, relations: Sequence[str]) -> dict[str, Any]:
    for name in relations:
        oid = conn.execute("select pg_catalog.to_regclass(%s)::oid", (name,)).fetchone()[0]
        if oid is None:
            continue
        if not conn.execute("select pg_catalog.has_table_privilege(%s, 'select')",
                            (oid,)).fetchone()[0]:
            return {"relation": name, "columns": [], "rows": [],
                    "error": f"no SELECT privilege on {name}"}
        schema, _, rel = name.rpartition(".")
        ident = sql.Identifier(schema, rel) if schema else sql.Identifier(rel)
        cur = conn.execute(sql.SQL("select * from {} limit 0").format(ident))
        have = [c.name for c in cur.description or []]
        cols = [c for c in GATE_COLUMNS if c in have]
        if "verdict" not in cols or len(cols) < 3:
            cols = have
        # newest gate first, then by arm (when the relation has those columns)
        order = [sql.SQL("{} desc").format(sql.Identifier("gate_id"))] if "gate_id" in cols \
            else []
        order += [sql.Identifier("arm")] if "arm" in cols else []
        query = sql.SQL("select {} from {} {} limit {}").format(
            sql.SQL(", ").join(map(sql.Identifier, cols)), ident,
            sql.SQL("order by ") + sql.SQL(", ").join(order) if order else sql.SQL(""),
            sql.Literal(MAX_GATE_ROWS))
        rows = [list(r) for r in conn.execute(query).fetchall()]
        return {"relation": name, "columns": cols, "rows": rows, "error": None}
    return {"relation": None, "columns": [], "rows": [], "error": None}


class _EvalFile:
    """The eval report file, re-read when its mtime or size changes."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._key: tuple[float, int] | None = None
        self._value: dict[str, Any] = {}
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        if self.path is None:
            return {"source": None, "report": None, "error": None}
        out: dict[str, Any] = {"source": self.path.name, "report": None, "error": None}
        try:
            st = self.path.stat()
        except OSError:
            return out | {"error": f"{self.path.name} does not exist (yet)"}
        key = (st.st_mtime, st.st_size)
        with self._lock:
            if key != self._key:
                self._value = self._load(out, st.st_mtime)
                self._key = key
            return self._value

    def _load(self, out: dict[str, Any], mtime: float) -> dict[str, Any]:
        assert self.path is not None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return out | {"error": f"cannot read {self.path.name}: {exc}"}
        if isinstance(data, dict) and not isinstance(data.get("by_ability"), dict):
            data = data.get("report") if isinstance(data.get("report"), dict) else data
        if not isinstance(data, dict) or not isinstance(data.get("by_ability"), dict):
            return out | {"error": f"{self.path.name} is not an eval recall report "
                                   "(no by_ability)"}
        report = {k: data[k] for k in _RECALL_KEYS if k in data}
        modified = dt.datetime.fromtimestamp(mtime, dt.UTC).isoformat(timespec="seconds")
        return out | {"report": report, "modified": modified}


def collect_state(
    conn: psycopg.Connection,
    *,
    eval_json: str | Path | None = None,
    max_injection: float = DEFAULT_MAX_INJECTION,
    min_anchor: float = DEFAULT_MIN_ANCHOR,
    max_runs: int = MAX_RUNS,
    max_problems: int = MAX_PROBLEMS,
    gate_relations: Sequence[str] = GATE_RELATIONS,
    _eval: _EvalFile | None = None,
) -> dict[str, Any]:
    """Everything the page shows, read in one read-only repeatable-read transaction.

    CONN must be idle (no transaction open); it is left idle. A section whose
    query fails is reported in ``errors`` (and left empty); the others still show.
    """
    state: dict[str, Any] = {
        "generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "poll_ms": POLL_MS,
        "thresholds": {"max_injection": max_injection, "min_anchor": min_anchor},
        "runs": [], "runs_total": 0, "problems": [],
        "gate": {"relation": None, "columns": [], "rows": [], "error": None},
        "errors": [],
    }
    prev_ro, prev_iso = conn.read_only, conn.isolation_level
    conn.read_only = True
    conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
    try:
        with conn.transaction():
            conn.execute(f"set local statement_timeout = {STATEMENT_TIMEOUT_MS}")
            state["database"], state["user"] = conn.execute(
                "select pg_catalog.current_database(), current_user").fetchone()
            for section, fill in (
                ("runs", lambda: state.update(
                    _runs(conn, max_injection, min_anchor, max_runs, max_problems))),
                ("gate", lambda: state.update(gate=_gate(conn, gate_relations))),
            ):
                try:
                    with conn.transaction():
                        fill()
                except psycopg.Error as exc:
                    state["errors"].append(f"{section}: {str(exc).strip()}")
                    if section == "gate":
                        state["gate"]["error"] = str(exc).strip()
    finally:
        conn.read_only, conn.isolation_level = prev_ro, prev_iso
    state["recall"] = (_eval or _EvalFile(eval_json)).read()
    return state


# --- the page ------------------------------------------------------------------------

_CSS = r"""
:root { --healthy:#2e7d32; --degraded:#e69500; --broken:#c62828; --injected:#7b1fa2;
  --ink:#1d232b; --muted:#5f6b7a; --line:#dde3ea; --bg:#f5f7fa; --card:#fff; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans",
  sans-serif; color:var(--ink); background:var(--bg); }
header { display:flex; align-items:baseline; gap:16px; padding:12px 20px; background:#1d2b3a;
  color:#fff; flex-wrap:wrap; }
header h1 { font-size:18px; margin:0; font-weight:600; }
header .meta { color:#c5d0dc; font-size:12px; }
header .live { margin-left:auto; font-size:12px; }
header .live.stale { color:#ffb4a8; }
main { padding:12px 20px 40px; max-width:1500px; }
section { margin:14px 0 22px; }
h2 { font-size:15px; margin:0 0 8px; text-transform:uppercase; letter-spacing:.04em;
  color:var(--muted); }
h3 { font-size:15px; margin:0; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px;
  padding:12px 14px; margin-bottom:12px; }
.legend { display:flex; gap:18px; flex-wrap:wrap; font-size:13px; }
.legend .item { display:flex; align-items:center; gap:6px; }
.sw { display:inline-block; width:12px; height:12px; border-radius:3px; }
.fate-healthy { background:var(--healthy); } .fate-degraded { background:var(--degraded); }
.fate-broken { background:var(--broken); } .fate-injected { background:var(--injected); }
.runhead { display:flex; gap:10px; align-items:center; flex-wrap:wrap; }
.tag { font-size:11px; padding:1px 7px; border-radius:10px; background:#e8edf3; color:#34495e; }
.status { font-size:11px; padding:2px 8px; border-radius:10px; color:#fff; font-weight:600;
  text-transform:uppercase; }
.st-running { background:#1565c0; } .st-finished { background:var(--healthy); }
.st-paused { background:#78909c; } .st-alarm, .st-failed { background:var(--broken); }
.st-interrupted { background:#ef6c00; } .st-none { background:#90a4ae; }
.muted { color:var(--muted); font-size:12px; }
.counts { display:flex; gap:8px; margin:10px 0 6px; flex-wrap:wrap; }
.count { border-radius:6px; padding:5px 10px; color:#fff; min-width:120px; }
.count .n { font-size:20px; font-weight:700; display:block; line-height:1.1; }
.count .what { font-size:11px; opacity:.95; }
.count.facts { background:#455a64; }
.bar { display:flex; height:12px; border-radius:4px; overflow:hidden; background:#eceff1;
  margin:4px 0 8px; }
.bar > span { display:block; height:100%; }
.alarm { padding:6px 10px; border-radius:6px; margin:6px 0; font-size:13px; }
.alarm-ok { background:#e8f5e9; color:#1b5e20; }
.alarm-tripped { background:#fff3e0; color:#8a4b00; border:1px solid #ffb74d; }
.alarm-stopped { background:#ffebee; color:#8e1b1b; border:1px solid #e57373; }
.hists { display:flex; gap:22px; flex-wrap:wrap; margin:6px 0 10px; }
.hist .t { font-size:12px; color:var(--muted); }
table { border-collapse:collapse; width:100%; font-size:13px; }
th, td { text-align:left; padding:4px 8px; border-bottom:1px solid var(--line);
  vertical-align:top; }
th { font-weight:600; color:var(--muted); font-size:12px; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.zero { color:#b0bac5; }
.nowrap { white-space:nowrap; }
.pill { font-size:11px; font-weight:700; padding:1px 7px; border-radius:10px; color:#fff;
  white-space:nowrap; }
.text { font-family:ui-monospace, "DejaVu Sans Mono", monospace; font-size:12px;
  word-break:break-word; max-width:480px; color:#37474f; }
.clamp { display:-webkit-box; -webkit-line-clamp:2; -webkit-box-orient:vertical;
  overflow:hidden; }
.empty { color:var(--muted); font-style:italic; }
.err { background:#ffebee; color:#8e1b1b; padding:6px 10px; border-radius:6px; margin:6px 0; }
.kbtn { border:1px solid var(--line); background:#fff; border-radius:5px; padding:2px 9px;
  margin-right:4px; cursor:pointer; }
.kbtn.on { background:#1d2b3a; color:#fff; }
.v-commit { background:var(--healthy); } .v-reprompt { background:var(--degraded); }
.v-rechunk, .v-reject { background:var(--broken); } .v-other { background:#78909c; }
svg text { font-family:inherit; }
"""

_JS = r"""
"use strict";
const POLL_MS = %(poll_ms)d;
const SVGNS = "http://www.w3.org/2000/svg";
const FATES = [
  ["healthy", "healthy", "facts extracted and anchored to the source"],
  ["degraded", "degraded", "extracted, anchored nothing"],
  ["broken", "broken", "extracted nothing"],
  ["injected", "injected", "answered the source instead (a kind of broken)"],
];
const COLOURS = {healthy: "#2e7d32", degraded: "#e69500", broken: "#c62828",
  injected: "#7b1fa2", bar: "#5c7a99"};
const ARM_COLOURS = {vector: "#0072B2", lexical: "#E69F00", hybrid: "#009E73",
  random: "#999999"};
const SPARE = ["#CC79A7", "#D55E00", "#56B4E9", "#000000"];
let polls = 0, failures = 0, chosenK = null, lastOk = null;

/* DOM helpers: text only ever goes through text nodes and setAttribute. */
function h(tag, attrs, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== null && v !== undefined && v !== false) el.setAttribute(k, String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
function s(tag, attrs, ...kids) {
  const el = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
const fmt = (x, d = 3) => (x === null || x === undefined || Number.isNaN(x)) ? "\u2013"
  : (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(d)) : String(x));
const rate = (x, d = 3) => (x === null || x === undefined || Number.isNaN(Number(x)))
  ? "\u2013" : Number(x).toFixed(d);
const when = (iso) => iso ? new Date(iso).toLocaleString() : "\u2013";

function fateLegend() {
  return h("div", {class: "card legend", id: "legend"}, FATES.map(([f, label, what]) =>
    h("span", {class: "item"}, h("span", {class: "sw fate-" + f}),
      h("b", {}, label), " \u2014 " + what)));
}

function counts(c, attrs) {
  const chips = FATES.map(([f, label, what]) =>
    h("div", {class: "count fate-" + f, title: what},
      h("span", Object.assign({class: "n", "data-count": f}, attrs), fmt(c[f] || 0)),
      h("span", {class: "what"}, label + " \u00b7 " + what)));
  chips.push(h("div", {class: "count facts"},
    h("span", Object.assign({class: "n", "data-count": "facts"}, attrs), fmt(c.facts || 0)),
    h("span", {class: "what"}, "facts extracted")));
  return h("div", {class: "counts"}, chips);
}

function fateBar(c) {
  const total = (c.healthy || 0) + (c.degraded || 0) + (c.broken || 0);
  const bar = h("div", {class: "bar", title: "blocks by fate"});
  if (!total) return bar;
  const parts = [["healthy", c.healthy || 0], ["degraded", c.degraded || 0],
    ["broken", (c.broken || 0) - (c.injected || 0)], ["injected", c.injected || 0]];
  for (const [f, n] of parts) {
    if (n <= 0) continue;
    const span = h("span", {class: "fate-" + f, title: f + ": " + n});
    span.style.width = (100 * n / total) + "%%";
    bar.append(span);
  }
  return bar;
}

/* A histogram as inline SVG. labels: one per bin; colourOf(i) gives the bar colour. */
function histogram(title, values, labels, colourOf, small) {
  const W = small ? 88 : 210, H = small ? 22 : 70, pad = small ? 0 : 14;
  const max = Math.max(1, ...values), bw = W / values.length;
  const svg = s("svg", {width: W, height: H + pad, viewBox: `0 0 ${W} ${H + pad}`,
    role: "img", "aria-label": title});
  svg.append(s("line", {x1: 0, y1: H, x2: W, y2: H, stroke: "#b0bac5", "stroke-width": 1}));
  values.forEach((v, i) => {
    const bh = v ? Math.max(1.5, (H - 2) * v / max) : 0;
    const r = s("rect", {x: i * bw + 0.5, y: H - bh, width: Math.max(1, bw - 1), height: bh,
      fill: colourOf(i)});
    r.append(s("title", {}, `${labels[i]}: ${v} block${v === 1 ? "" : "s"}`));
    svg.append(r);
  });
  if (!small) {
    svg.append(s("text", {x: 0, y: H + 11, "font-size": 9, fill: "#5f6b7a"}, labels[0]));
    svg.append(s("text", {x: W, y: H + 11, "font-size": 9, fill: "#5f6b7a",
      "text-anchor": "end"}, labels[labels.length - 1]));
    svg.append(s("text", {x: W, y: 9, "font-size": 9, fill: "#5f6b7a", "text-anchor": "end"},
      "max " + max));
  }
  if (small) return h("span", {title: title}, svg);
  return h("div", {class: "hist"}, h("div", {class: "t"}, title), svg);
}
const FACT_LABELS = [...Array(10).keys()].map(String).concat(["10+"]);
const RATE_LABELS = [...Array(10).keys()].map(
  i => `${(i / 10).toFixed(1)}\u2013${((i + 1) / 10).toFixed(1)}`);
function hists(hist, small) {
  return [
    histogram("facts per chunk (0 = broken)", hist.facts, FACT_LABELS,
      i => i === 0 ? COLOURS.broken : COLOURS.bar, small),
    histogram("anchor rate (blocks with facts; <0.1 = degraded)", hist.anchor, RATE_LABELS,
      i => i === 0 ? COLOURS.degraded : COLOURS.healthy, small),
    histogram("hypothesis rate (blocks with facts)", hist.hypothesis, RATE_LABELS,
      () => COLOURS.bar, small),
  ];
}

function alarmBox(run, thresholds) {
  const a = run.alarm, cls = "alarm alarm-" + a.state;
  const limits = `injection rate \u2264 ${thresholds.max_injection}, median dialogue anchor ` +
    `rate \u2265 ${thresholds.min_anchor}`;
  if (a.state === "stopped") {
    return h("div", {class: cls, "data-alarm": "stopped"}, h("b", {}, "ALARM \u2014 run stopped: "),
      (a.recorded && a.recorded.reason) || run.status_reason || "(no reason recorded)");
  }
  const past = a.recorded ? h("div", {class: "muted"}, "earlier alarm " +
    when(a.recorded.at) + ": ", a.recorded.reason || "") : null;
  if (a.state === "tripped") {
    return h("div", {class: cls, "data-alarm": "tripped"},
      h("b", {}, "ALARM would fire: "), a.live, past);
  }
  const st = run.stats || {};
  return h("div", {class: cls, "data-alarm": "ok"}, h("b", {}, "alarm: ok "),
    `(injection rate ${rate(st.injection_rate)}, median dialogue anchor rate ` +
    `${rate(st.median_dialogue_anchor_rate)}; limits: ${limits})`, past);
}

function statusOf(run) {
  const st = run.running ? "running" : (run.status || "none");
  return h("span", {class: "status st-" + st, "data-status": st}, st);
}

function runCard(run, thresholds) {
  const st = run.stats || {};
  const c = {healthy: st.healthy, degraded: st.degraded, broken: st.broken,
    injected: st.injected, facts: st.facts};
  const attrs = {"data-run": run.run_id};
  const progress = run.total_blocks ? `${run.blocks_ingested} of ${run.total_blocks} blocks`
    : `${run.blocks_ingested} blocks`;
  const rows = run.conversations.map(g => {
    const ga = {"data-run": run.run_id, "data-document": g.document};
    const cell = (f, v) => h("td", Object.assign({class: "num" + (v ? "" : " zero"),
      "data-count": f}, ga), fmt(v));
    return h("tr", Object.assign({class: "conv"}, ga),
      h("td", {class: "doc"}, g.document, h("div", {class: "muted"}, "revision " + g.revision_id)),
      h("td", {class: "num", "data-count": "blocks"},
        g.total ? `${g.blocks} / ${g.total}` : String(g.blocks)),
      cell("healthy", g.healthy), cell("degraded", g.degraded), cell("broken", g.broken),
      cell("injected", g.injected), cell("facts", g.facts),
      h("td", {class: "num"}, rate(g.median_anchor_rate, 2)),
      h("td", {class: "num"}, rate(g.median_hypothesis_rate, 2)),
      h("td", {}, hists(g.hist, true)));
  });
  return h("div", Object.assign({class: "card run"}, attrs),
    h("div", {class: "runhead"}, h("h3", {class: "label"}, run.label),
      run.is_baseline ? h("span", {class: "tag"}, "offline baseline extractor") : null,
      statusOf(run),
      h("span", {class: "muted"}, `run ${run.run_id} \u00b7 model ${run.model} \u00b7 ` +
        `${progress} ingested \u00b7 started ${when(run.started_at)} \u00b7 last event ` +
        `${when(run.status_at)}`)),
    counts(c, attrs), fateBar(c), alarmBox(run, thresholds),
    h("div", {class: "hists"}, hists(run.hist, false)),
    run.conversations.length ? h("table", {class: "convs"},
      h("thead", {}, h("tr", {},
        h("th", {}, "conversation"), h("th", {class: "num"}, "blocks"),
        h("th", {class: "num"}, "healthy"), h("th", {class: "num"}, "degraded"),
        h("th", {class: "num"}, "broken"), h("th", {class: "num"}, "injected"),
        h("th", {class: "num"}, "facts"), h("th", {class: "num"}, "median anchor"),
        h("th", {class: "num"}, "median hyp."),
        h("th", {}, "facts/chunk \u00b7 anchor \u00b7 hypothesis"))),
      h("tbody", {}, rows)) : h("p", {class: "empty"}, "no block ingested yet"));
}

/* At most two lines of TEXT (whitespace collapsed); the whole excerpt on hover. */
function clamp(text) {
  const t = text === null || text === undefined ? "" : String(text);
  return h("div", {class: "clamp", title: t}, t.replace(/\s+/g, " "));
}

function problemsSection(problems) {
  if (!problems.length) return h("p", {class: "empty", id: "no-problems"},
    "no degraded or broken block");
  const pill = (p) => {
    const f = p.injection ? "injected" : p.fate;
    return h("span", {class: "pill fate-" + f, "data-fate": p.fate}, f);
  };
  return h("table", {id: "problems"},
    h("thead", {}, h("tr", {}, ["run", "conversation", "block", "kind", "fate", "parse",
      "facts", "anchor", "start of the block (text)", "start of the answer (text)"]
      .map(t => h("th", {}, t)))),
    h("tbody", {}, problems.map(p => h("tr", {"data-block": p.block_id},
      h("td", {}, p.run_id), h("td", {}, p.document),
      h("td", {class: "nowrap"}, `#${p.seq}`, h("div", {class: "muted"}, `${p.chars} chars`)),
      h("td", {}, p.kind), h("td", {}, pill(p)),
      h("td", {}, p.parse_status), h("td", {class: "num"}, fmt(p.facts_per_chunk)),
      h("td", {class: "num"}, rate(p.anchor_rate, 2)),
      h("td", {class: "text excerpt"}, clamp(p.excerpt)),
      h("td", {class: "text answer"}, clamp(p.answer))))));
}

function verdictClass(v) {
  const t = String(v).toLowerCase().replace(/[^a-z]/g, "");
  if (t.startsWith("commit")) return "v-commit";
  if (t.startsWith("reprompt")) return "v-reprompt";
  if (t.startsWith("rechunk")) return "v-rechunk";
  if (t.startsWith("reject")) return "v-reject";
  return "v-other";
}
function cellText(v) {
  if (v === null || v === undefined) return "\u2013";
  if (Array.isArray(v)) return v.map(x => typeof x === "object" ? JSON.stringify(x)
    : String(x)).join("; ");
  if (typeof v === "object") return JSON.stringify(v);
  return fmt(v);
}
function gateSection(gate) {
  const box = h("div", {class: "card", id: "gate"});
  if (gate.error) box.append(h("div", {class: "err"}, "A/B gate: " + gate.error));
  if (!gate.relation || !gate.rows.length) {
    box.append(h("p", {class: "empty", "data-empty": "gate"}, "no A/B runs yet"));
    return box;
  }
  box.append(h("div", {class: "muted"}, `from ${gate.relation}`));
  box.append(h("table", {},
    h("thead", {}, h("tr", {}, gate.columns.map(c => h("th", {}, c)))),
    h("tbody", {}, gate.rows.map(r => h("tr", {}, r.map((v, i) =>
      /verdict/i.test(gate.columns[i]) && v !== null
        ? h("td", {}, h("span", {class: "pill " + verdictClass(v), "data-verdict": v}, cellText(v)))
        : h("td", {}, cellText(v))))))));
  return box;
}

function recallChart(report, k) {
  const abilities = Object.keys(report.by_ability || {});
  const groups = abilities.map(a => [a, report.by_ability[a]]);
  for (const g of ["overall", "macro"]) if (report[g]) groups.push([g, report[g]]);
  const arms = report.arms || [];
  const key = "hit@" + k, gw = 104, top = 14, H = 220, left = 34, bottom = 52;
  const W = left + gw * groups.length + 10;
  const svg = s("svg", {width: W, height: top + H + bottom, role: "img", id: "recall-chart",
    "aria-label": `recall ${key} per ability`});
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    const yy = top + H - H * y;
    svg.append(s("line", {x1: left, x2: W, y1: yy, y2: yy, stroke: "#e3e8ee"}));
    svg.append(s("text", {x: left - 4, y: yy + 3, "font-size": 9, "text-anchor": "end",
      fill: "#5f6b7a"}, y.toFixed(2)));
  }
  const bw = (gw - 14) / Math.max(1, arms.length);
  groups.forEach(([name, block], j) => {
    const x0 = left + j * gw + 7;
    if (name === "overall") svg.append(s("line", {x1: x0 - 7, x2: x0 - 7, y1: top,
      y2: top + H, stroke: "#8896a5", "stroke-dasharray": "3,3"}));
    arms.forEach((arm, i) => {
      const v = block && block[arm] ? block[arm][key] : null;
      if (v === null || v === undefined) return;
      const r = s("rect", {x: x0 + i * bw, y: top + H - H * v, width: Math.max(1, bw - 1),
        height: H * v, fill: ARM_COLOURS[arm] || SPARE[i %% SPARE.length],
        "data-ability": name, "data-arm": arm, "data-value": v});
      r.append(s("title", {}, `${name} \u00b7 ${arm}: ${key} = ${fmt(v)} (n=${block.n})`));
      svg.append(r);
      if (bw >= 14) svg.append(s("text", {x: x0 + i * bw + (bw - 1) / 2, y: top + H - H * v - 3,
        "font-size": 8, "text-anchor": "middle", fill: "#37474f"}, v.toFixed(2)));
    });
    const label = s("text", {x: x0 + (gw - 14) / 2, y: top + H + 13, "font-size": 9,
      "text-anchor": "middle", fill: "#1d232b", class: "ability"});
    String(name).replace(/_/g, " ").split(" ").filter(w => w).reduce((lines, w) => {
      const last = lines[lines.length - 1];
      if (last && (last + " " + w).length <= 18) lines[lines.length - 1] = last + " " + w;
      else lines.push(w);
      return lines;
    }, []).slice(0, 3).forEach((line, n) =>
      label.append(s("tspan", {x: x0 + (gw - 14) / 2, dy: n ? 10 : 0}, line)));
    svg.append(label);
    if (block && block.n !== undefined) svg.append(s("text", {x: x0 + (gw - 14) / 2,
      y: top + H + 44, "font-size": 8, "text-anchor": "middle", fill: "#5f6b7a"},
      `n=${block.n}`));
  });
  return svg;
}
function recallSection(recall) {
  const box = h("div", {class: "card", id: "recall"});
  if (recall.error) box.append(h("div", {class: "err"}, recall.error));
  const r = recall.report;
  if (!r) {
    if (!recall.source) box.append(h("p", {class: "empty", "data-empty": "recall"},
      "no eval report: run `donto-pg eval recall --json > recall.json`, then start the " +
      "dashboard with --eval-json recall.json"));
    return box;
  }
  const ks = r.ks || [];
  if (chosenK === null || !ks.includes(chosenK)) chosenK = ks.includes(10) ? 10 : ks[ks.length - 1];
  const btns = h("div", {}, h("span", {class: "muted"}, "k: "), ks.map(k => {
    const b = h("button", {class: "kbtn" + (k === chosenK ? " on" : ""), type: "button"},
      String(k));
    b.addEventListener("click", () => { chosenK = k; poll(false); });
    return b;
  }));
  box.append(h("div", {class: "muted"}, `${recall.source} \u00b7 ${r.evaluated} questions` +
    ` (${r.excluded_abstention ?? 0} abstention, ${r.excluded_no_gold ?? 0} without gold ` +
    `left out) \u00b7 written ${when(recall.modified)}`), btns);
  box.append(h("div", {class: "legend"}, (r.arms || []).map((arm, i) =>
    h("span", {class: "item"}, (() => { const sw = h("span", {class: "sw"});
      sw.style.background = ARM_COLOURS[arm] || SPARE[i %% SPARE.length]; return sw; })(),
      arm))));
  box.append(recallChart(r, chosenK));
  return box;
}

let lastState = null;
function render(state) {
  const main = h("main", {id: "main"},
    fateLegend(),
    state.errors.length ? h("div", {class: "err", id: "errors"}, state.errors.join("\n")) : null,
    h("section", {id: "runs"}, h("h2", {}, "Extraction runs (arms)",
      state.runs_total > state.runs.length
        ? ` \u2014 latest ${state.runs.length} of ${state.runs_total}` : ""),
      state.runs.length ? state.runs.map(r => runCard(r, state.thresholds))
        : h("p", {class: "empty", "data-empty": "runs"}, "no extraction runs yet")),
    h("section", {}, h("h2", {}, "Blocks needing attention (latest degraded or broken)"),
      h("div", {class: "card"}, problemsSection(state.problems))),
    h("section", {}, h("h2", {}, "A/B gate verdicts"), gateSection(state.gate)),
    h("section", {}, h("h2", {}, "Recall hit@k per ability"), recallSection(state.recall)));
  document.getElementById("main").replaceWith(main);
  document.getElementById("db").textContent =
    `database ${state.database} as ${state.user} \u00b7 read ${when(state.generated_at)}`;
}

async function poll(again = true) {
  try {
    if (again || !lastState) {
      const resp = await fetch("/api/state", {cache: "no-store"});
      if (!resp.ok) throw new Error("HTTP " + resp.status + ": " + (await resp.text()));
      lastState = await resp.json();
    }
    render(lastState);
    polls += again ? 1 : 0; failures = 0; lastOk = new Date();
    document.body.dataset.polls = String(polls);
    document.body.dataset.ready = "1";
    const live = document.getElementById("live");
    live.textContent =
      `live \u00b7 updated ${lastOk.toLocaleTimeString()} \u00b7 every ${POLL_MS / 1000} s`;
    live.className = "live";
  } catch (e) {
    failures += 1;
    const live = document.getElementById("live");
    live.textContent = `cannot reach the dashboard server (${e.message}); retrying` +
      (lastOk ? ` \u00b7 last update ${lastOk.toLocaleTimeString()}` : "");
    live.className = "live stale";
  }
  if (again) setTimeout(poll, POLL_MS);
}
poll();
"""

_HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>donto-pg quality dashboard</title>
<style>{css}</style>
</head>
<body>
<header><h1>donto-pg \u00b7 extraction quality</h1><span class="meta" id="db">loading\u2026</span>
<span class="live" id="live">connecting\u2026</span></header>
<main id="main"><p class="empty">loading\u2026</p></main>
<script>{js}</script>
</body>
</html>
"""


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page_html() -> tuple[str, str]:
    """The page and its Content-Security-Policy (inline script and style by hash)."""
    js = _JS % {"poll_ms": POLL_MS}
    html = _HTML.format(css=_CSS, js=js)
    csp = (f"default-src 'none'; script-src {_csp_hash(js)}; style-src {_csp_hash(_CSS)}; "
           "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
           "frame-ancestors 'none'")
    return html, csp


# --- the server --------------------------------------------------------------------------


class DashboardServer(ThreadingHTTPServer):
    """The HTTP server; ``url`` is where the page is. Stop it with ``shutdown()``
    (then ``server_close()``); :func:`serve` runs it in a daemon thread."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], dsn: str, *,
                 eval_json: str | Path | None = None,
                 max_injection: float = DEFAULT_MAX_INJECTION,
                 min_anchor: float = DEFAULT_MIN_ANCHOR,
                 gate_relations: Sequence[str] = GATE_RELATIONS,
                 connect: Callable[[], psycopg.Connection] | None = None,
                 log: Callable[[str], None] | None = None) -> None:
        super().__init__(address, _Handler)
        self.gate_relations = tuple(gate_relations)
        self.dsn = dsn
        self.eval_file = _EvalFile(eval_json)
        self.max_injection = max_injection
        self.min_anchor = min_anchor
        self.connect = connect or (lambda: psycopg.connect(dsn, connect_timeout=10))
        self.log = log
        self.html, self.csp = page_html()
        self.requests: dict[str, int] = {}
        self.thread: threading.Thread | None = None
        host, port = self.server_address[:2]
        self.allowed_hosts = {f"{h}:{port}" for h in (host, "127.0.0.1", "localhost")}

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"

    def state(self) -> dict[str, Any]:
        with self.connect() as conn:
            return collect_state(conn, max_injection=self.max_injection,
                                 min_anchor=self.min_anchor, gate_relations=self.gate_relations,
                                 _eval=self.eval_file)


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "donto-pg-dashboard"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        if self.server.log:
            self.server.log(f"{self.address_string()} {format % args}")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("Content-Security-Policy", self.server.csp)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_HEAD(self) -> None:  # noqa: N802
        self.do_GET()

    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0]
        self.server.requests[path] = self.server.requests.get(path, 0) + 1
        if self.headers.get("Host") not in self.server.allowed_hosts:
            self._send(HTTPStatus.FORBIDDEN, b"unknown Host\n", "text/plain; charset=utf-8")
            return
        if path in ("/", "/index.html"):
            self._send(HTTPStatus.OK, self.server.html.encode(), "text/html; charset=utf-8")
        elif path == "/api/state":
            try:
                state = self.server.state()
            except psycopg.Error as exc:
                body = json.dumps({"error": str(exc).strip()}).encode()
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, body, "application/json")
                return
            body = json.dumps(state, default=_json_default).encode()
            self._send(HTTPStatus.OK, body, "application/json")
        elif path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")


def serve(dsn: str, host: str = "127.0.0.1", port: int = 0, *,
          eval_json: str | Path | None = None,
          max_injection: float = DEFAULT_MAX_INJECTION,
          min_anchor: float = DEFAULT_MIN_ANCHOR,
          gate_relations: Sequence[str] = GATE_RELATIONS,
          log: Callable[[str], None] | None = None) -> DashboardServer:
    """Start the dashboard on HOST:PORT (0: a free port) in a daemon thread; return
    the server (``server.url``; stop with ``server.shutdown(); server.server_close()``).

    DSN: a libpq connection string (any role that can read the donto schema, e.g.
    one granted donto_reader); a connection is opened per request, used read-only
    and closed. EVAL_JSON: an eval recall report (JSON) for the recall charts.
    MAX_INJECTION / MIN_ANCHOR: the thresholds of the live alarm check (default:
    the extractor's). GATE_RELATIONS: where to look for A/B verdicts.
    """
    server = DashboardServer((host, port), dsn, eval_json=eval_json,
                             max_injection=max_injection, min_anchor=min_anchor,
                             gate_relations=gate_relations, log=log)
    server.thread = threading.Thread(target=server.serve_forever, name="donto-dashboard",
                                     daemon=True)
    server.thread.start()
    return server


def _print_flush(message: str) -> None:
    print(message, flush=True)


def run(dsn: str, port: int = 8765, *, host: str = "127.0.0.1",
        eval_json: str | Path | None = None,
        echo: Callable[[str], None] | None = None) -> None:
    """Serve the dashboard until interrupted (the CLI's ``donto-pg dashboard``).

    Opens no browser: it prints the URL (through ECHO, default print). Checks the
    database once first, so a wrong DSN fails here rather than in the page.
    """
    say = echo or _print_flush
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        collect_state(conn, eval_json=eval_json)
    server = DashboardServer((host, port), dsn, eval_json=eval_json)
    say(f"dashboard: {server.url}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("dashboard stopped")
    finally:
        server.server_close()
