"""The extractor: render pending blocks, ask a model, ingest the answers.

Everything that decides *what* a claim is happens in the database
(``donto.render_for_extraction``, ``donto.ingest_extraction``); this module only
moves blocks between the database and the LLM providers, with bounded
concurrency, progress and an early alarm.

Runs and resuming
-----------------
A run is an *arm*: the set of models, the pinned prompt-template versions, the
projection B parameters and an optional run name make its ``run_key``. Running
``extract`` again with the same models continues the same run
(``donto.start_extraction_run`` records a ``resumed`` event naming the session's
providers, so endpoints may be added or dropped between sessions); a different
model, template version or run name is a new run that extracts every block again
(another arm). A block is *pending* for a run when it
has no ingested response for that run; each block is ingested in its own
transaction, and ``donto.ingest_extraction`` is idempotent per (block, run). So a
run killed at any moment and started again extracts every block exactly once:
the blocks in flight at the kill have no response and are pending again (their
LLM call is repeated, their claims are never stored twice).

Two sessions of one run
-----------------------
Two ``extract`` sessions of the same run (or two API callers) at once divide the blocks:
a worker takes a block's lease (``donto.take_extraction_block``) before it asks a
provider, and a block another live session holds, or has answered by then, is skipped and
counted in ``taken_elsewhere``. A lease is a row that counts while its session's backend is
connected, so a killed session leaves nothing held. A session that ends with nothing left
but blocks another live session is extracting records ``handed_over``, not ``paused``: the
other session records the run's end.

The alarm
---------
When the run (all its blocks so far, earlier sessions included) reaches
``alarm_after`` ingested blocks, and again at every further multiple, or at the
start of a resumed run that already has that many, the extractor computes
``donto.extraction_run_stats`` and stops, saying why, if

* the injection rate (blocks whose answer was hijacked, over all blocks) is above
  ``max_injection`` (default :data:`ALARM_MAX_INJECTION`), or
* the median anchor rate is below ``min_anchor`` (default :data:`ALARM_MIN_ANCHOR`).
  The median is taken over the *dialogue* blocks that returned at least one fact:
  code blocks are expected to have no anchors (their type-facts are hypotheses
  without quotes), and blocks with no facts are counted as broken, not as unanchored.

Providers
---------
The default provider pool is :meth:`donto_pg.llm.ProviderPool.baseline` (the
offline rule-based extractor); a run made with it is labelled ``baseline`` in the
database (``extraction_run.is_baseline``, its label) and in the report.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from donto_pg import loader
from donto_pg.errors import DatabaseError, NothingFound
from donto_pg.llm import ProviderError, ProviderFatalError, ProviderPool

__all__ = [
    "ExtractionReport",
    "Progress",
    "ProjectionResult",
    "format_progress",
    "ALARM_MAX_INJECTION",
    "ALARM_MIN_ANCHOR",
    "format_report",
    "project_extraction",
    "resolve_revisions",
    "run_extraction",
]

ConnFactory = Callable[[], psycopg.Connection]

#: The live alarm (see above), the one home of its two numbers: stop when the injection
#: rate is above ALARM_MAX_INJECTION or the median dialogue anchor rate is below
#: ALARM_MIN_ANCHOR. The A/B gate's early reject uses the same defaults.
ALARM_MAX_INJECTION = 0.02
ALARM_MIN_ANCHOR = 0.4

BASELINE_NOTE = (
    "baseline: the offline rule-based extractor (donto-baseline-v3), not a language model"
)


# --- selection and projection -----------------------------------------------------------


_LOADED = "see what is loaded: select iri from donto.document"


def resolve_revisions(
    conn: psycopg.Connection,
    revision_ids: Iterable[int] | None = None,
    conversations: Iterable[str] | None = None,
) -> list[int]:
    """Revision ids to work on.

    ``revision_ids`` as given (checked); ``conversations`` are document IRIs
    (``beam:100K/1``, or ``100K/1`` for BEAM), each giving its latest revision
    (``donto._latest_revision``: the latest projected for recall); with neither, the
    latest revision of every document that has a turn table and that this session may add
    to (``donto._writes_document``: a writer's own documents, every one for the owner).
    Raises :class:`~donto_pg.errors.NothingFound` naming what was not found.
    """
    out: list[int] = []
    if revision_ids:
        ids = [int(r) for r in revision_ids]
        found = {r for (r,) in conn.execute(
            "select revision_id from donto.revision where revision_id = any(%s)", (ids,))}
        missing = [r for r in ids if r not in found]
        if missing:
            raise NothingFound(f"no revision {', '.join(map(str, missing))}", fix=_LOADED)
        out += ids
    if conversations:
        for name in conversations:
            iri = loader.document_iri(name)
            row = conn.execute(
                "select donto._latest_revision(d.document_id) from donto.document as d "
                "where d.iri = %s", (iri,)).fetchone()
            if row is None:
                raise NothingFound(f"no conversation {iri}", fix=_LOADED)
            out.append(row[0])
    if revision_ids is None and conversations is None:
        # every document this session may add to (a writer's own: donto._writes_document)
        out = [r for (r,) in conn.execute(
            "select x.rev from (select donto._latest_revision(d.document_id) as rev "
            "                   from donto.document as d "
            "                   where donto._writes_document(d.document_id)) as x "
            "where exists (select 1 from donto.turn as t where t.revision_id = x.rev) "
            "order by x.rev")]
    conn.commit()
    return list(dict.fromkeys(out))


@dataclass
class ProjectionResult:
    """Projection B of one revision."""

    revision_id: int
    document: str
    blocks: int
    by_kind: dict[str, int]
    split_blocks: int
    chars: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def project_extraction(
    conn: psycopg.Connection,
    *,
    revision_ids: Iterable[int] | None = None,
    conversations: Iterable[str] | None = None,
    params: Mapping[str, Any] | None = None,
    on_result: Callable[[ProjectionResult], None] | None = None,
) -> list[ProjectionResult]:
    """Run ``donto.project_extraction`` on each selected revision (one transaction each).

    Selection as in :func:`resolve_revisions`; ``params`` are segmenter parameters
    (``cap``, ``target``, ``keep_exchange``, ``min_prose``); ``on_result`` hears of each
    revision as it is done (progress). Idempotent.
    """
    p = json.dumps(dict(params or {}))
    results = []
    for rev in resolve_revisions(conn, revision_ids, conversations):
        with conn.transaction():
            n = conn.execute("select donto.project_extraction(%s, %s)", (rev, p)).fetchone()[0]
            row = conn.execute(
                "select d.iri, coalesce(jsonb_object_agg(k.kind, k.n) "
                "         filter (where k.kind is not null), '{}'), "
                "       coalesce(sum(k.split), 0)::integer, r.body_chars "
                "from donto.revision as r inner join donto.document as d using (document_id) "
                "left join lateral ("
                "  select b.kind, count(*) as n, count(*) filter (where b.split) as split "
                "  from donto.extraction_block as b inner join donto.projection as p "
                "    on p.projection_id = b.projection_id "
                "  where p.revision_id = r.revision_id and p.kind = 'extraction' "
                "    and p.params = donto._extraction_params(%s) group by b.kind) as k on true "
                "where r.revision_id = %s group by d.iri, r.body_chars", (p, rev)).fetchone()
        results.append(ProjectionResult(rev, row[0], n, dict(row[1]), row[2], row[3]))
        if on_result:
            on_result(results[-1])
    return results


# --- progress and report ------------------------------------------------------------


@dataclass
class Progress:
    """Counts of this session so far (``total`` = blocks pending at its start)."""

    run_id: int
    label: str
    is_baseline: bool
    total: int
    done: int = 0
    healthy: int = 0
    degraded: int = 0
    broken: int = 0
    injected: int = 0
    failed: int = 0
    facts: int = 0
    taken_elsewhere: int = 0  # blocks another session of the run took or answered first
    forgotten: int = 0  # blocks that hold words forgotten after they were listed: not sent
    elapsed_s: float = 0.0
    last: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("last", None)
        return d


def format_progress(p: Progress) -> str:
    """One progress line, e.g. for a terminal (``\\r``-rewritten)."""
    rate = p.done / p.elapsed_s if p.elapsed_s > 0 else 0.0
    tag = " [baseline]" if p.is_baseline else ""
    return (
        f"run {p.run_id}{tag}: {p.done}/{p.total} blocks  healthy {p.healthy}  "
        f"degraded {p.degraded}  broken {p.broken}  injected {p.injected}  "
        f"failed {p.failed}  facts {p.facts}  {rate:.1f} blocks/s"
        + (f"  taken elsewhere {p.taken_elsewhere}" if p.taken_elsewhere else "")
        + (f"  forgotten {p.forgotten}" if p.forgotten else "")
    )


@dataclass
class ExtractionReport:
    """What one call of :func:`run_extraction` did.

    ``stopped`` is None when every selected block of the run has been ingested,
    else ``'limit'`` (more blocks pending), ``'alarm'``, ``'failed'`` or
    ``'interrupted'``; ``reason`` says why. ``run`` holds the run's statistics over
    all its sessions (``donto.extraction_run_stats``). ``handed_over`` counts the blocks
    still pending at the end that another live session of the run is extracting (they
    are not this session's failures: ``stopped`` stays None when they are all that is
    left, and ``held_by`` names those sessions' backend pids).
    """

    run_id: int
    run_key: str
    label: str
    is_baseline: bool
    providers: list[dict[str, Any]]
    templates: dict[str, str]
    params: dict[str, Any]
    revisions: list[int]
    resumed: bool
    progress: Progress
    pending_after: int = 0
    stopped: str | None = None
    reason: str | None = None
    alarm: dict[str, Any] | None = None
    run: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    note: str | None = None
    skipped: dict[int, str] = field(default_factory=dict)  # revision -> why it was not cut
    handed_over: int = 0
    held_by: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True unless the run was stopped by an alarm, a failure or an interruption, left
        blocks that every provider failed on (``incomplete``), or skipped a revision that
        could not be cut into blocks."""
        return self.stopped in (None, "limit") and not self.skipped

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["progress"] = self.progress.as_dict()
        d["ok"] = self.ok
        return d


def format_report(report: ExtractionReport) -> str:
    """A few lines for a terminal: the run, this session's counts, the run's totals, why
    it stopped."""
    p, run = report.progress, report.run
    lines = [
        f"run {report.run_id} ({report.label}){' resumed' if report.resumed else ''}: "
        f"templates {report.templates}, revisions {report.revisions}",
    ]
    if report.note:
        lines.append(f"note: {report.note}")
    lines.append(
        f"this session: {p.done} blocks in {p.elapsed_s:.1f} s - healthy {p.healthy}, "
        f"degraded {p.degraded}, broken {p.broken}, injected {p.injected}, failed {p.failed}, "
        f"facts {p.facts}"
        + (f", taken by another session {p.taken_elsewhere}" if p.taken_elsewhere else "")
        + (f", forgotten before it was sent {p.forgotten}" if p.forgotten else ""))
    if run:
        median = run.get("median_dialogue_anchor_rate")
        lines.append(
            f"run so far: {run.get('blocks')} blocks - healthy {run.get('healthy')}, degraded "
            f"{run.get('degraded')}, broken {run.get('broken')}, injection rate "
            f"{run.get('injection_rate')}, median dialogue anchor rate "
            f"{'n/a' if median is None else round(median, 3)}; {report.pending_after} pending")
    if report.handed_over:
        lines.append(
            f"{report.handed_over} pending blocks are being extracted by another session of "
            f"the run (backend {', '.join(map(str, report.held_by))}), which records its end")
    for rev, why in report.skipped.items():
        lines.append(f"skipped revision {rev} (not cut into blocks): {why}")
    if report.stopped:
        lines.append(f"stopped ({report.stopped}): {report.reason}")
    return "\n".join(lines)


# --- the run -------------------------------------------------------------------------


def provider_descriptions(pool: ProviderPool) -> list[dict[str, Any]]:
    """The providers of a pool as the run records them (no keys, no key variable names)."""
    out = []
    for p in pool.providers:
        d: dict[str, Any] = {"name": p.name, "model": p.model}
        if not p.is_baseline:
            d["base_url"] = p.base_url
        out.append(d)
    return out


def alarm_verdict(
    stats: Mapping[str, Any], *, max_injection: float, min_anchor: float
) -> str | None:
    """Why a run must stop (from ``donto.extraction_run_stats``), or None."""
    reasons = []
    rate = stats.get("injection_rate")
    if rate is not None and rate > max_injection:
        reasons.append(
            f"injection rate {rate:.3f} ({stats.get('injected')} of {stats.get('blocks')} "
            f"blocks answered the source instead of extracting) is above {max_injection}"
        )
    median = stats.get("median_dialogue_anchor_rate")
    if median is not None and median < min_anchor:
        reasons.append(
            f"median anchor rate {median:.3f} over {stats.get('dialogue_blocks_with_facts')} "
            f"dialogue blocks with facts is below {min_anchor} (quotes do not match the source)"
        )
    return "; ".join(reasons) or None


class _Workers:
    """One database connection per worker thread."""

    def __init__(self, factory: ConnFactory) -> None:
        self._factory = factory
        self._local = threading.local()
        self._lock = threading.Lock()
        self._conns: list[psycopg.Connection] = []
        self.pids: set[int] = set()  # every backend this session's workers used

    def conn(self) -> psycopg.Connection:
        c = getattr(self._local, "conn", None)
        if c is None or c.closed:
            c = self._factory()
            self._local.conn = c
            with self._lock:
                self._conns.append(c)
                self.pids.add(c.info.backend_pid)
        return c

    def close(self) -> None:
        with self._lock:
            for c in self._conns:
                c.close()
            self._conns.clear()


def _extract_one(
    workers: _Workers, pool: ProviderPool, run_id: int, block_id: int
) -> dict[str, Any]:
    """Take, render, complete, ingest one block; returns the ingest summary, or
    ``{"taken_elsewhere": "done" | "elsewhere"}`` when another session of the run answered
    it or holds it (donto.take_extraction_block): then no provider is asked."""
    conn = workers.conn()
    held = False
    try:
        state = conn.execute("select donto.take_extraction_block(%s, %s)",
                             (run_id, block_id)).fetchone()[0]
        conn.commit()
        if state == "forgotten":  # forgotten words in it since the session listed it
            return {"forgotten": True, "block_id": block_id}
        if state != "taken":
            return {"taken_elsewhere": state, "block_id": block_id}
        held = True
        try:
            prompt, system = conn.execute(
                "select donto.render_for_extraction(%s, %s), t.system "
                "from donto.extraction_template(%s, %s) as t",
                (block_id, run_id, block_id, run_id)).fetchone()
        except psycopg.errors.ObjectNotInPrerequisiteState as exc:
            if "only forgotten words" not in str(exc):
                raise
            # forgotten (every word of it) after it was listed: nothing to send, ever
            conn.rollback()
            return {"forgotten": True, "block_id": block_id}
        conn.commit()
        completion = pool.complete([
            {"role": "system", "content": system},
            {"role": "user", "content": prompt},
        ])
        text = completion.text
        meta: dict[str, Any] = {
            "provider": completion.provider, "model": completion.model,
            "usage": completion.usage, "latency_s": round(completion.latency_s, 4),
            "finish_reason": completion.finish_reason,
        }
        if "\x00" in text:  # PostgreSQL text cannot hold NUL
            meta["nul_replaced"] = text.count("\x00")
            text = text.replace("\x00", "\ufffd")
        summary = conn.execute(
            "select donto.ingest_extraction(%s, %s, %s, %s)",
            (block_id, run_id, text, json.dumps(meta))).fetchone()[0]
        conn.commit()
        held = False  # answered: its response makes it done for every session
        return summary
    except BaseException:
        if not conn.closed:
            conn.rollback()
        raise
    finally:
        if held and not conn.closed:
            _release(conn, run_id, block_id)


def _release(conn: psycopg.Connection, run_id: int, block_id: int) -> None:
    """Give the block's lease back (no answer): another session may take it at once. A
    failure here loses nothing (the lease ends with this session's backend)."""
    try:
        conn.execute("select donto.release_extraction_block(%s, %s)", (run_id, block_id))
        conn.commit()
    except psycopg.Error:
        if not conn.closed:
            conn.rollback()


def _holders(conn: psycopg.Connection, run_id: int, blocks: list[int],
             mine: set[int]) -> dict[int, int]:
    """block -> pid of the other live session holding it (donto.extraction_block_holders);
    MINE: the backends of this session's workers (a worker's lease whose release failed,
    or a closed worker's backend that has not exited yet, is not another session's)."""
    if not blocks:
        return {}
    rows = conn.execute(  # every block at once (the leases read in one pass)
        "select block_id, backend_pid from donto.extraction_block_holders(%s, %s::bigint[])",
        (run_id, blocks)).fetchall()
    conn.commit()
    mine = mine | {conn.info.backend_pid}
    return {b: pid for b, pid in rows if pid is not None and pid not in mine}


def _event(conn: psycopg.Connection, run_id: int, event: str, detail: Mapping[str, Any]) -> None:
    conn.execute("select donto.record_extraction_event(%s, %s, %s)",
                 (run_id, event, json.dumps(detail, default=str)))
    conn.commit()


def _stats(conn: psycopg.Connection, run_id: int) -> dict[str, Any]:
    row = conn.execute("select donto.extraction_run_stats(%s)", (run_id,)).fetchone()
    conn.commit()
    return dict(row[0])


def _pending(conn: psycopg.Connection, run_id: int, revisions: list[int] | None,
             limit: int | None) -> list[int]:
    rows = conn.execute(
        "select block_id from donto.pending_extraction_blocks(%s, %s, %s)",
        (run_id, revisions, limit)).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def run_extraction(
    conn_factory: ConnFactory,
    *,
    revision_ids: Sequence[int] | None = None,
    conversations: Sequence[str] | None = None,
    providers: ProviderPool | None = None,
    concurrency: int = 4,
    alarm_after: int = 500,
    max_injection: float = ALARM_MAX_INJECTION,
    min_anchor: float = ALARM_MIN_ANCHOR,
    limit: int | None = None,
    params: Mapping[str, Any] | None = None,
    run_name: str | None = None,
    max_consecutive_failures: int = 10,
    on_progress: Callable[[Progress], None] | None = None,
) -> ExtractionReport:
    """Extract claims from every pending block of the selected revisions.

    ``conn_factory()`` opens a new connection (autocommit off); one is used by the
    caller's thread and one by each worker. ``providers`` defaults to the offline
    baseline. The selected revisions are projected first (``project_extraction``
    with ``params``; idempotent). ``limit`` caps the blocks processed by this call;
    ``alarm_after=0`` disables the alarm. ``run_name`` starts a separate run (arm)
    with otherwise identical settings. ``on_progress`` is called after every block.
    A revision that cannot be cut into blocks (a database error) is left out and named
    in ``skipped`` (the report is then not ``ok``); the others are extracted. With one
    revision its error is raised; when none can be cut, DatabaseError names each.

    A provider that fails fatally (e.g. HTTP 401) stops the run; a block whose
    every attempt failed stays pending and is counted in ``failed``;
    ``max_consecutive_failures`` such blocks in a row stop the run. On any other
    exception (KeyboardInterrupt included) an ``interrupted`` event is recorded and
    the exception propagates; blocks already ingested stay ingested.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be >= 1")
    if limit is not None and limit < 0:
        raise ValueError("limit must be >= 0")
    pool = providers or ProviderPool.baseline()
    main = conn_factory()
    try:
        revisions = list(dict.fromkeys(resolve_revisions(main, revision_ids, conversations)))
        p = json.dumps(dict(params or {}))
        skipped: dict[int, str] = {}
        for rev in revisions:
            try:
                main.execute("select donto.project_extraction(%s, %s)", (rev, p))
                main.commit()
            except psycopg.Error as exc:  # one revision's fault stops no other's
                main.rollback()
                if len(revisions) == 1:
                    raise
                skipped[rev] = f"{exc.sqlstate}: {str(exc).splitlines()[0]}"
        if skipped and len(skipped) == len(revisions):
            raise DatabaseError("no revision could be cut into blocks", "; ".join(
                f"revision {r}: {why}" for r, why in skipped.items()))
        cut = [r for r in revisions if r not in skipped]
        report = extract_blocks(
            main, conn_factory, pool, revisions=cut,
            pending=lambda run_id, lim: _pending(main, run_id, cut, lim),
            run_params=params, run_name=run_name, limit=limit, concurrency=concurrency,
            alarm_after=alarm_after, max_injection=max_injection, min_anchor=min_anchor,
            max_consecutive_failures=max_consecutive_failures, on_progress=on_progress)
        report.skipped = skipped
        return report
    finally:
        main.close()


def extract_blocks(
    main: psycopg.Connection,
    conn_factory: ConnFactory,
    pool: ProviderPool,
    *,
    revisions: list[int],
    pending: Callable[[int, int | None], list[int]],
    run_params: Mapping[str, Any] | None = None,
    run_name: str | None = None,
    limit: int | None = None,
    concurrency: int = 4,
    alarm_after: int = 500,
    max_injection: float = ALARM_MAX_INJECTION,
    min_anchor: float = ALARM_MIN_ANCHOR,
    max_consecutive_failures: int = 10,
    on_progress: Callable[[Progress], None] | None = None,
    event_detail: Mapping[str, Any] | None = None,
) -> ExtractionReport:
    """One extraction run (started or resumed) over the blocks ``pending(run_id, limit)``
    lists, with the live alarm: the loop behind ``run_extraction`` and the A/B gate's arms.

    MAIN is the caller's connection; each worker opens its own with CONN_FACTORY.
    The run ends with a ``finished`` event, or ``paused`` when blocks are left
    (LIMIT reached: stopped ``limit``; blocks every provider failed on: stopped
    ``incomplete``); EVENT_DETAIL is added to that event.
    """
    descr = provider_descriptions(pool)
    run_id, resumed = main.execute(
        "select run_id, resumed from donto.start_extraction_run(%s, %s, null, %s)",
        (json.dumps(descr), json.dumps(dict(run_params or {})), run_name)).fetchone()
    run_key, label, is_baseline, templates, params = main.execute(
        "select run_key, label, is_baseline, templates, params "
        "from donto.extraction_run where run_id = %s", (run_id,)).fetchone()
    main.commit()
    todo = pending(run_id, limit)
    main.commit()
    progress = Progress(run_id=run_id, label=label, is_baseline=is_baseline, total=len(todo))
    report = ExtractionReport(
        run_id=run_id, run_key=run_key, label=label, is_baseline=is_baseline,
        providers=descr, templates=dict(templates), params=dict(params),
        revisions=revisions, resumed=resumed, progress=progress,
        note=BASELINE_NOTE if is_baseline else None)
    workers = _Workers(conn_factory)
    try:
        _loop(main, workers, pool, report, todo, concurrency=concurrency,
              alarm_after=alarm_after, max_injection=max_injection, min_anchor=min_anchor,
              max_consecutive_failures=max_consecutive_failures, on_progress=on_progress)
    finally:
        workers.close()
    report.run = _stats(main, run_id)
    left = pending(run_id, None)
    main.commit()
    report.pending_after = len(left)
    held = _holders(main, run_id, left, workers.pids)
    report.handed_over, report.held_by = len(held), sorted(set(held.values()))
    if report.stopped is None and report.pending_after > report.handed_over:
        rest = report.pending_after - report.handed_over
        elsewhere = (f"; {report.handed_over} more are being extracted by another session"
                     if report.handed_over else "")
        if limit is not None:
            report.stopped = "limit"
            report.reason = f"{rest} blocks still pending (limit {limit}){elsewhere}"
        else:
            report.stopped = "incomplete"
            report.reason = (f"{rest} blocks still pending: every provider failed on them "
                             f"(run again to retry){elsewhere}")
    if report.stopped in (None, "limit", "incomplete"):
        if report.stopped is not None:
            event = "paused"
        elif report.handed_over:
            event = "handed_over"  # the session holding the rest records the run's end
        else:
            event = "finished"
        detail = {"session": progress.as_dict(), "pending": report.pending_after,
                  **(event_detail or {})}
        if report.handed_over:
            detail.update(taken_elsewhere=report.handed_over, held_by=report.held_by)
        _event(main, run_id, event, detail)
        if event == "handed_over" and not pending(run_id, None):
            # the other session finished between our count and our event: so it says
            main.commit()
            _event(main, run_id, "finished", {"session": progress.as_dict(), "pending": 0,
                                              "after": "handed_over", **(event_detail or {})})
        main.commit()
    return report


def _loop(
    main: psycopg.Connection,
    workers: _Workers,
    pool: ProviderPool,
    report: ExtractionReport,
    pending: list[int],
    *,
    concurrency: int,
    alarm_after: int,
    max_injection: float,
    min_anchor: float,
    max_consecutive_failures: int,
    on_progress: Callable[[Progress], None] | None,
) -> None:
    run_id = report.run_id
    progress = report.progress
    started = time.monotonic()
    prior = int(_stats(main, run_id).get("blocks") or 0)
    next_check = (prior // alarm_after + 1) * alarm_after if alarm_after > 0 else None

    def check_alarm() -> bool:
        stats = _stats(main, run_id)
        why = alarm_verdict(stats, max_injection=max_injection, min_anchor=min_anchor)
        if why is None:
            return False
        report.stopped, report.reason = "alarm", f"alarm after {stats['blocks']} blocks: {why}"
        report.alarm = {"stats": stats, "max_injection": max_injection,
                        "min_anchor": min_anchor, "alarm_after": alarm_after}
        _event(main, run_id, "alarm", {"reason": why, "stats": stats})
        return True

    if alarm_after > 0 and prior >= alarm_after and check_alarm():
        return
    queue = list(reversed(pending))
    inflight: dict[Future, int] = {}
    consecutive = 0
    elsewhere: set[int] = set()  # blocks another session of the run took or answered
    retried = False
    try:
        with ThreadPoolExecutor(max_workers=concurrency,
                                thread_name_prefix="donto-extract") as ex:
            while queue or inflight or (elsewhere and not retried
                                        and report.stopped is None):
                while queue and report.stopped is None and len(inflight) < 2 * concurrency:
                    block = queue.pop()
                    inflight[ex.submit(_extract_one, workers, pool, run_id, block)] = block
                if not inflight and not queue and not retried and report.stopped is None:
                    if not elsewhere:
                        break
                    # once at the end: a block another session held may have been given
                    # back (every provider failed there) or left (that session died)
                    retried = True
                    queue = sorted(elsewhere, reverse=True)
                    continue
                if not inflight:
                    break
                done, _ = wait(inflight, return_when=FIRST_COMPLETED)
                for fut in done:
                    block = inflight.pop(fut)
                    try:
                        summary = fut.result()
                    except ProviderFatalError as exc:
                        report.errors.append(f"block {block}: {exc}")
                        if report.stopped is None:
                            report.stopped, report.reason = "failed", str(exc)
                            _event(main, run_id, "failed", {"reason": str(exc),
                                                            "block_id": block})
                        continue
                    except ProviderError as exc:
                        progress.failed += 1
                        consecutive += 1
                        report.errors.append(f"block {block}: {exc}")
                        if consecutive >= max_consecutive_failures and report.stopped is None:
                            why = (f"{consecutive} blocks in a row failed with every provider; "
                                   f"last: {exc}")
                            report.stopped, report.reason = "failed", why
                            _event(main, run_id, "failed", {"reason": why})
                        continue
                    if "forgotten" in summary:  # not sent, and never pending again
                        progress.forgotten += 1
                        continue
                    if "taken_elsewhere" in summary:
                        elsewhere.add(block)
                        progress.taken_elsewhere = len(elsewhere)
                        progress.elapsed_s = time.monotonic() - started
                        if on_progress is not None:
                            on_progress(progress)
                        continue
                    elsewhere.discard(block)
                    progress.taken_elsewhere = len(elsewhere)
                    consecutive = 0
                    _count(progress, summary)
                    progress.elapsed_s = time.monotonic() - started
                    if on_progress is not None:
                        on_progress(progress)
                    if (next_check is not None and report.stopped is None
                            and prior + progress.done >= next_check):
                        next_check += alarm_after
                        check_alarm()
    except BaseException as exc:
        progress.elapsed_s = time.monotonic() - started
        report.stopped = "interrupted"
        report.reason = f"{type(exc).__name__}: {exc}"
        try:
            main.rollback()
            _event(main, run_id, "interrupted", {"reason": report.reason,
                                                 "session": progress.as_dict()})
        except psycopg.Error as db_exc:
            exc.add_note(f"(the interrupted event could not be recorded: {db_exc})")
        raise
    progress.elapsed_s = time.monotonic() - started


def _count(progress: Progress, summary: Mapping[str, Any]) -> None:
    progress.done += 1
    progress.last = dict(summary)
    fate = summary.get("fate")
    if fate == "healthy":
        progress.healthy += 1
    elif fate == "degraded":
        progress.degraded += 1
    else:
        progress.broken += 1
    if summary.get("injection"):
        progress.injected += 1
    progress.facts += int(summary.get("facts") or 0)
