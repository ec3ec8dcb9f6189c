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

127.0.0.1 is reachable by every local OS user, and the page shows conversation text read
with the dashboard owner's connection: so the page and ``/api/state`` need a token, a
random one per server, given in the URL it prints (``?token=...``). The page passes it
on from its own address to its polling (no cookie: a cookie of 127.0.0.1 goes to every
port of it, another user's server's too); anything without it is refused with 403.
``/healthz`` needs none and says nothing but ``ok``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import hmac
import inspect
import json
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from donto_pg import db, extract

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

STOPPED_REASON = ("no session is extracting for it any more and it recorded no last event "
                  "(killed, or its connection lost): `donto-pg extract` with the same "
                  "settings resumes it")

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
        order by e.event_id desc limit 1) as last_alarm,
       donto.extraction_run_live(s.run_id) as live
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
        live = r.pop("live")
        # handed_over: a session ended leaving blocks to another one still at work
        r["running"] = r["status"] in ("started", "resumed", "handed_over") and live
        if r["status"] in ("started", "resumed", "handed_over") and not r["running"]:
            # no session that started it is connected (donto.extraction_run_live): killed
            r["status"], r["status_reason"] = "stopped", STOPPED_REASON
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

#: The page, its style and its script: package files (shipped as package data).
_PAGE_FILES = files(__name__)


def _page_file(name: str) -> str:
    return _PAGE_FILES.joinpath(name).read_text(encoding="utf-8")


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def page_html() -> tuple[str, str]:
    """The page and its Content-Security-Policy (inline script and style by hash)."""
    css = "\n" + _page_file("page.css")
    js = "\n" + _page_file("page.js").replace("__POLL_MS__", str(POLL_MS))
    html = _page_file("page.html").replace("{css}", css, 1).replace("{js}", js, 1)
    csp = (f"default-src 'none'; script-src {_csp_hash(js)}; style-src {_csp_hash(css)}; "
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
        self.connect = connect or (lambda: psycopg.connect(
            dsn, connect_timeout=10, **db.client_options(dsn)))
        self.log = log
        self.html, self.csp = page_html()
        self.requests: dict[str, int] = {}
        self.thread: threading.Thread | None = None
        host, port = self.server_address[:2]
        self.allowed_hosts = {f"{h}:{port}" for h in (host, "127.0.0.1", "localhost")}
        self.token = secrets.token_urlsafe(24)

    @property
    def origin(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def url(self) -> str:
        """The page's address, with the server's token (nobody gets in without it)."""
        return f"{self.origin}/?token={self.token}"

    def authorized(self, query: str) -> bool:
        """Whether a request carries the token (``?token=``)."""
        given = urllib.parse.parse_qs(query).get("token", [])
        return any(hmac.compare_digest(g.encode(), self.token.encode()) for g in given)

    def state(self) -> dict[str, Any]:
        with self.connect() as conn:
            return collect_state(conn, max_injection=self.max_injection,
                                 min_anchor=self.min_anchor, gate_relations=self.gate_relations,
                                 _eval=self.eval_file)


#: The dashboard's routes: only these are counted in ``DashboardServer.requests``.
ROUTES = ("/", "/index.html", "/api/state", "/healthz")
#: Seconds a connection may stay silent before the server closes it (each one is a thread).
IDLE_TIMEOUT_S = 30.0


class _Handler(BaseHTTPRequestHandler):
    server: DashboardServer
    server_version = "donto-pg-dashboard"
    sys_version = ""
    timeout = IDLE_TIMEOUT_S

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
        path, _, query = self.path.partition("?")
        if path in ROUTES:  # counted by route: any other path would grow the table for good
            self.server.requests[path] = self.server.requests.get(path, 0) + 1
        if self.headers.get("Host") not in self.server.allowed_hosts:
            self._send(HTTPStatus.FORBIDDEN, b"unknown Host\n", "text/plain; charset=utf-8")
            return
        if path != "/healthz" and not self.server.authorized(query):
            self._send(HTTPStatus.FORBIDDEN, b"this dashboard needs its token: open the URL "
                       b"`donto-pg dashboard` printed (.../?token=...)\n",
                       "text/plain; charset=utf-8")
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
    with psycopg.connect(dsn, connect_timeout=10, **db.client_options(dsn)) as conn:
        collect_state(conn, eval_json=eval_json)
    server = DashboardServer((host, port), dsn, eval_json=eval_json)
    say(f"dashboard: {server.url}  (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        say("dashboard stopped")
    finally:
        server.server_close()
