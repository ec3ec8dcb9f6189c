"""Measure before you commit: the holdout A/B gate of chunking strategies.

Never re-chunk everything to find out whether a chunking is better. ``run_ab``
gates every candidate on a small stratified holdout, reads the cheap metrics
first and spends a recall pass only on the survivors:

1. **Holdout.** Whole conversations spanning the bimodality of BEAM: at least one
   code-heavy and one dialogue-heavy, by the share of characters inside code fences
   (:func:`donto_pg.core.conversation.code_char_share` of the revision body). Whole conversations
   hold every gold-bearing region of their probing questions. Each pick says why.
2. **Baseline.** The fixed-1,200 recall baseline: projection A's spans (re-cut as the
   arm ``projection-a``, vectors reused) ranked by ``donto.ab_recall_units`` exactly as
   every arm's units are, so that only the chunking differs; measured in the same run,
   once, before the first recall pass (never when every arm is rejected early). For
   reference, production ``donto.recall`` on projection A is measured as well
   (:func:`donto_pg.evaluate.eval_recall`) when the holdout's projection A is embedded.
3. **Arms.** ``NAME=STRATEGY:PARAMS``: ``fixed:window=1200`` (fixed line-respecting
   windows used as extraction units, the original cut) or ``semantic:`` with the
   segmenter parameters of ``donto.project_extraction`` (``semantic:cap=3000``).
   Each arm re-chunks ONLY the holdout into ``ctx:measure/<arm>/<doc>``
   (``donto.ab_project_arm``): projection A and the live claims are never touched.
4. **Extraction, once per arm** (the offline baseline extractor by default, any
   provider pool), with the extractor's live alarm; metrics 1-4 (facts per chunk,
   median anchor rate, hypothesis rate, injection rate) are read from the database
   (``donto.ab_arm_quality``) as blocks finish. An arm with an injection rate above
   the live alarm's limits (:data:`donto_pg.extract.ALARM_MAX_INJECTION`,
   :data:`~donto_pg.extract.ALARM_MIN_ANCHOR`) is rejected before its recall pass,
   saying why.
5. **Recall pass for survivors.** The arm's units are embedded as recall keys (only
   the holdout; a unit whose text already has a vector, e.g. a fixed window equal
   to a projection A chunk, reuses it) and hit@k is measured with
   ``donto.ab_recall_units`` (exact cosine + full-text rank, reciprocal rank fusion).
6. **Verdict in SQL** (``donto.ab_verdict``): commit, re-prompt, re-chunk or reject.

Everything an arm writes is append-only (``donto.ab_arm``, ``ab_unit``, ``ab_gate``,
``ab_result``, its extraction run, blocks, claims and vectors); running the same arm
again with the same parameters reuses what exists and extracts, embeds or measures
nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from donto_pg.extract import ALARM_MAX_INJECTION, ALARM_MIN_ANCHOR

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "CODE_HEAVY",
    "DEFAULT_ARMS",
    "DIALOGUE_HEAVY",
    "BASELINE_ARM",
    "ArmSpec",
    "format_ab",
    "parse_arm",
    "pick_holdout",
    "run_ab",
]

ConnFactory = Callable[[], "psycopg.Connection"]
Event = Callable[[dict[str, Any]], None]

#: The arm that re-cuts projection A's spans for the gate's fixed-1,200 baseline.
BASELINE_ARM = "projection-a"
#: The arms run when none are given: the original cut, the segmenter and a variant.
DEFAULT_ARMS: tuple[str, ...] = (
    "fixed1200=fixed:window=1200",
    "semantic=semantic:",
    "semantic3k=semantic:cap=3000",
)
#: A conversation is code-heavy at or above this share of characters in code fences,
#: dialogue-heavy at or below DIALOGUE_HEAVY (BEAM 100K: 0.50-0.56 vs 0.00-0.14).
CODE_HEAVY = 0.30
DIALOGUE_HEAVY = 0.05
EXCLUDED_ABILITIES = ("abstention",)
# How often an arm whose blocks another session holds looks again (seconds).
WAIT_POLL_S = 1.0

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


# --- arm specs ------------------------------------------------------------------------


@dataclass(frozen=True)
class ArmSpec:
    """An arm as given: ``NAME=STRATEGY:PARAMS``."""

    name: str
    strategy: str
    params: dict[str, Any]
    spec: str


def fixed_blocks_sql(plpy, revision_id: int, window: int) -> list[tuple]:
    """What the released SQL calls (``donto._ab_fixed_blocks`` of extension 0.1.0 and
    0.2.0 imports this module): :func:`donto_pg.server.ab.fixed_blocks_sql`, reading
    revision text as those schemas store it (whole, in the body column). Drop it with
    :mod:`donto_pg.plpy_entry`, with the last release whose SQL names it."""
    from donto_pg.server import ab as server_ab
    from donto_pg.server.revision import released_schema

    with released_schema():
        return server_ab.fixed_blocks_sql(plpy, revision_id, window)


def _value(text: str) -> Any:
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(low)
    except ValueError:
        raise ValueError(f"parameter value {text!r} is not an integer or true/false") from None


def parse_arm(spec: str) -> ArmSpec:
    """Parse ``NAME=STRATEGY:PARAMS`` (PARAMS: ``key=value`` separated by commas).

    ``fixed1200=fixed:window=1200``, ``semantic=semantic:``, ``semantic3k=semantic:cap=3000``,
    ``s=semantic:cap=3000,target=1500``. Raises ``ValueError`` saying what is wrong.
    """
    name, eq, rest = spec.partition("=")
    name = name.strip()
    if not eq or not _NAME_RE.match(name):
        raise ValueError(f"arm {spec!r}: expected NAME=STRATEGY:PARAMS with a lower-case NAME "
                         "(letters, digits, _ . -), e.g. semantic3k=semantic:cap=3000")
    strategy, _, raw = rest.partition(":")
    strategy = strategy.strip()
    if strategy not in ("fixed", "semantic"):
        raise ValueError(f"arm {spec!r}: strategy must be fixed or semantic, not {strategy!r}")
    params: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        key, eq2, val = item.partition("=")
        if not eq2 or not key.strip():
            raise ValueError(f"arm {spec!r}: parameter {item!r} is not key=value")
        try:
            params[key.strip()] = _value(val)
        except ValueError as exc:
            raise ValueError(f"arm {spec!r}: {exc}") from None
    return ArmSpec(name, strategy, params, spec.strip())


# --- the holdout ------------------------------------------------------------------------


def _stratum(share: float) -> str:
    if share >= CODE_HEAVY:
        return "code-heavy"
    if share <= DIALOGUE_HEAVY:
        return "dialogue-heavy"
    return "mixed"


def _candidates(conn: psycopg.Connection, iris: list[str] | None) -> list[dict[str, Any]]:
    """Latest revision of each document (with turns) and its gold questions."""
    from donto_pg.core.conversation import code_char_share

    rows = conn.execute(
        """
        select d.iri, r.revision_id, r.body_chars,
               (select count(*) from donto.probe_question as q
                where q.revision_id = r.revision_id),
               (select count(distinct g.question_id) from donto.question_gold_span as g
                inner join donto.probe_question as q using (question_id)
                where g.revision_id = r.revision_id and q.ability <> all(%(excl)s)),
               (select count(distinct g.turn_id) from donto.question_gold_span as g
                where g.revision_id = r.revision_id)
        from donto.document as d
        inner join donto.revision as r on r.revision_id = donto._latest_revision(d.document_id)
        where exists (select 1 from donto.turn as t where t.revision_id = r.revision_id)
              and (%(iris)s::text[] is null or d.iri = any(%(iris)s::text[]))
        order by d.document_id
        """, {"iris": iris, "excl": list(EXCLUDED_ABILITIES)}).fetchall()
    out = []
    for iri, rev, chars, nq, gq, gt in rows:
        body = conn.execute("select donto.revision_body(%s)",
                            (rev,)).fetchone()[0]
        share = code_char_share(body)
        out.append({"conversation": iri.partition(":")[2] if iri.startswith("beam:") else iri,
                    "document": iri, "revision_id": rev, "chars": chars,
                    "code_share": round(share, 4), "stratum": _stratum(share),
                    "questions": nq, "gold_questions": gq, "gold_turns": gt})
    conn.commit()
    return out


def pick_holdout(conn: psycopg.Connection, holdout: Sequence[str] | None = None,
                 size: int = 2) -> tuple[list[dict[str, Any]], list[str]]:
    """The holdout conversations with why each was chosen, and warnings.

    HOLDOUT: conversation ids (``100K/1``) or document IRIs, taken as given; None picks
    SIZE (>= 2) among the loaded conversations that have gold questions: the most
    code-heavy and the most dialogue-heavy (share of body characters inside code
    fences), then conversations spread evenly between them. Ties go to the shorter
    body (cheaper). Whole conversations are re-chunked, so every gold-bearing region
    of their probing questions is inside the holdout. Raises ``ValueError`` when a
    given conversation is not loaded or nothing can be picked.
    """
    warnings: list[str] = []
    if holdout:
        iris = [h if ":" in h else f"beam:{h}" for h in dict.fromkeys(holdout)]
        found = {c["document"]: c for c in _candidates(conn, iris)}
        missing = [i for i in iris if i not in found]
        if missing:
            raise ValueError(f"holdout conversation(s) not loaded: {', '.join(missing)}")
        chosen = [found[i] for i in iris]
        if not any(c["gold_questions"] for c in chosen):
            raise ValueError(
                "the holdout has no probing question with gold turns: recall cannot be "
                "compared with the baseline (0 >= 0 is no evidence); give conversations "
                "loaded with their questions (load-beam), or leave --holdout out")
        for c in chosen:
            c["reason"] = (f"given; {c['stratum']}: {100 * c['code_share']:.1f}% of its "
                           f"{c['chars']:,} characters inside code fences")
    else:
        if size < 2:
            raise ValueError("the holdout needs at least 2 conversations (code and dialogue)")
        pool = [c for c in _candidates(conn, None) if c["gold_questions"] > 0]
        if len(pool) < 2:
            raise ValueError(f"need at least 2 loaded conversations with gold questions to pick "
                             f"a holdout, found {len(pool)}")
        ranked = sorted(pool, key=lambda c: (-c["code_share"], c["chars"], c["revision_id"]))
        n = len(ranked)
        code = ranked[0]
        dialogue = min(ranked, key=lambda c: (c["code_share"], c["chars"], c["revision_id"]))
        code["reason"] = (f"{code['stratum']}: {100 * code['code_share']:.1f}% of its "
                          f"{code['chars']:,} characters inside code fences, the highest of {n} "
                          "loaded conversations with gold questions")
        dialogue["reason"] = (f"{dialogue['stratum']}: {100 * dialogue['code_share']:.1f}% of "
                              f"its {dialogue['chars']:,} characters inside code fences, the "
                              f"lowest of {n}")
        chosen = [code, dialogue]
        rest = [c for c in ranked if c is not code and c is not dialogue]
        extra = min(size - 2, len(rest))
        for i in range(extra):
            c = rest[round((i + 1) * (len(rest) - 1) / (extra + 1))] if extra < len(rest) \
                else rest[i]
            if c in chosen:
                continue
            c["reason"] = (f"{c['stratum']}: {100 * c['code_share']:.1f}% inside code fences, "
                           f"spread between the extremes ({i + 1} of {extra})")
            chosen.append(c)
    strata = {c["stratum"] for c in chosen}
    if "code-heavy" not in strata:
        warnings.append(f"the holdout has no code-heavy conversation (>= {CODE_HEAVY:.0%} of "
                        "characters in code fences): it does not span the bimodality")
    if "dialogue-heavy" not in strata:
        warnings.append(f"the holdout has no dialogue-heavy conversation (<= "
                        f"{DIALOGUE_HEAVY:.0%} in code fences): it does not span the bimodality")
    for c in chosen:
        c["gold"] = (f"all {c['gold_turns']} gold turns of its {c['gold_questions']} gold "
                     "questions are inside (whole conversation)")
        if c["gold_questions"] == 0:
            warnings.append(f"{c['conversation']} has no gold questions: it adds cost to the "
                            "extraction metrics but nothing to recall")
    return chosen, warnings


# --- helpers ----------------------------------------------------------------------------


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _questions(conn: psycopg.Connection, revisions: list[int]) -> list[dict[str, Any]]:
    """The holdout's gold questions (as donto_pg.evaluate: abstention and no-gold out)."""
    rows = conn.execute(
        """
        select q.question_id, q.revision_id, q.ability, q.qindex, q.question,
               jsonb_agg(distinct jsonb_build_array(g.turn_id, g.header_start, g.char_end))
        from donto.probe_question as q
        inner join donto.question_gold_span as g using (question_id)
        where q.revision_id = any(%s) and q.ability <> all(%s)
        group by q.question_id
        order by q.revision_id, q.ability, q.qindex
        """, (revisions, list(EXCLUDED_ABILITIES))).fetchall()
    conn.commit()
    return [{"question_id": r[0], "revision_id": r[1], "ability": r[2], "index": r[3],
             "question": r[4], "gold": [(int(t), int(s), int(e)) for t, s, e in r[5]]}
            for r in rows]


def _hit_rank(spans: Iterable[tuple[int, int, int]], q: Mapping[str, Any]) -> int | None:
    """Rank (1-based) of the first span overlapping a gold turn of Q, or None."""
    for i, (rev, s, e) in enumerate(spans, 1):
        if rev == q["revision_id"] and any(s < ge and gs < e for _, gs, ge in q["gold"]):
            return i
    return None


def _summarise_hits(questions: list[dict[str, Any]], ranks: Mapping[int, int | None],
                    k: int) -> dict[str, Any]:
    by: dict[str, list[float]] = defaultdict(list)
    for q in questions:
        r = ranks.get(q["question_id"])
        by[q["ability"]].append(1.0 if r is not None and r <= k else 0.0)
    allv = [v for vs in by.values() for v in vs]
    return {
        "hit": round(sum(allv) / len(allv), 4) if allv else 0.0,
        "n": len(allv),
        "macro": round(sum(sum(v) / len(v) for v in by.values()) / len(by), 4) if by else 0.0,
        "by_ability": {a: {"n": len(v), "hit": round(sum(v) / len(v), 4)}
                       for a, v in sorted(by.items())},
    }


def _embed_missing(conn: psycopg.Connection, arm: str, revisions: list[int], model: str,
                   model_id: int, batch: int) -> int:
    """Embed the arm's units of REVISIONS that still have no vector; returns how many."""
    from donto_pg.embed import store_vectors

    rows = conn.execute(
        """
        select u.statement_id, donto.span_text(u.revision_id, u.char_start, u.char_end)
        from donto.ab_unit as u
        where u.arm_id = (donto._arm(%s, 'donto-pg ab', true)).arm_id
              and u.revision_id = any(%s)
              and not exists (select 1 from donto.embedding as e
                              where e.statement_id = u.statement_id and e.model_id = %s)
        order by u.statement_id
        """, (arm, revisions, model_id)).fetchall()
    conn.commit()
    if not rows:
        return 0
    return store_vectors(conn, rows, model, model_id, batch=batch,
                         ingest="ingest_measure_embeddings")


# --- the run ----------------------------------------------------------------------------


def _emit(on_event: Event | None, event: str, **data: Any) -> None:
    if on_event is not None:
        on_event({"event": event, **data})


def _extract_arm(conn_factory: ConnFactory, main: psycopg.Connection, arm: ArmSpec,
                 revisions: list[int], pool, *, concurrency: int, alarm_after: int,
                 reject_injection: float, reject_anchor: float,
                 on_event: Event | None) -> Any:
    """Run the arm's extraction (its own run, its own blocks) with the live alarm."""
    from donto_pg import extract as ex

    def pending(run_id: int, _limit: int | None) -> list[int]:
        return [r[0] for r in main.execute(
            "select block_id from donto.ab_pending_blocks(%s, %s, %s)",
            (arm.name, run_id, revisions)).fetchall()]

    def progressed(p) -> None:
        _emit(on_event, "progress", arm=arm.name, progress=p.as_dict())

    def extract_once() -> Any:
        return ex.extract_blocks(
            main, conn_factory, pool, revisions=revisions, pending=pending,
            run_params=arm.params if arm.strategy == "semantic" else {},
            run_name=f"ab/{arm.name}", concurrency=concurrency, alarm_after=alarm_after,
            max_injection=reject_injection, min_anchor=reject_anchor,
            max_consecutive_failures=10, on_progress=progressed,
            event_detail={"ab_arm": arm.name})

    # The extractor's own run, loop and alarm (donto_pg.extract), fed with the arm's blocks.
    _emit(on_event, "extract", arm=arm.name)
    ext = extract_once()
    # Another session of the arm's run (a second `ab` on the same arm) holds blocks: the
    # arm is measured on all of them, so wait until that session answered them or gave them
    # back (then extract those here), rather than record the arm incomplete.
    while ext.stopped is None and ext.handed_over:
        _emit(on_event, "waiting", arm=arm.name, blocks=ext.handed_over, held_by=ext.held_by)
        while ex._holders(main, ext.run_id, pending(ext.run_id, None), set()):
            time.sleep(WAIT_POLL_S)
        ext = extract_once()
    return ext


def _recall_pass(main: psycopg.Connection, arm: ArmSpec, revisions: list[int],
                 questions: list[dict[str, Any]], qvecs: dict[int, str], *, k: int,
                 model: str, model_id: int, recall_arm: str, batch: int,
                 on_event: Event | None) -> dict[str, Any]:
    started = time.perf_counter()
    reused = main.execute("select donto.ab_reuse_embeddings(%s, %s, %s)",
                          (arm.name, model_id, revisions)).fetchone()[0]
    main.commit()
    embedded = _embed_missing(main, arm.name, revisions, model, model_id, batch)
    main.commit()
    embed_s = time.perf_counter() - started
    _emit(on_event, "embedded", arm=arm.name, reused=reused, embedded=embedded,
          seconds=round(embed_s, 1))
    ranks: dict[int, int | None] = {}
    per_question = {}
    t0 = time.perf_counter()
    for q in questions:
        if q["question_id"] not in qvecs:
            qvecs[q["question_id"]] = main.execute(
                "select donto.embed_query(%s, %s)::text", (q["question"], model)).fetchone()[0]
        got = main.execute(
            "select revision_id, char_start, char_end from donto.ab_recall_units("
            "%s, %s::vector, %s, k => %s, revision => %s, model => %s, arms => %s)",
            (arm.name, qvecs[q["question_id"]], q["question"], k, q["revision_id"], model,
             recall_arm)).fetchall()
        ranks[q["question_id"]] = _hit_rank(got, q)
        per_question[str(q["question_id"])] = ranks[q["question_id"]]
    main.rollback()
    out = _summarise_hits(questions, ranks, k)
    out.update({"k": k, "recall_arm": recall_arm, "model": model, "embedded": embedded,
                "reused_vectors": reused, "embed_seconds": round(embed_s, 1),
                "recall_seconds": round(time.perf_counter() - t0, 1),
                "first_hit": per_question})
    return out


def _baseline(main: psycopg.Connection, holdout: list[dict[str, Any]],
              questions: list[dict[str, Any]], qvecs: dict[int, str], *, k: int, model: str,
              model_id: int, recall_arm: str, batch: int,
              on_event: Event | None) -> dict[str, Any]:
    """The fixed-1,200 recall baseline: projection A's spans ranked as every arm is.

    The keys are the spans of the holdout's live projection A (its window, 1,200 chars),
    cut again as the arm BASELINE_ARM (so a fixed window equals a projection A chunk,
    vector included) and ranked by ``donto.ab_recall_units`` like the arms: only the
    chunking differs between an arm and the baseline, whatever donto.recall's tuning.
    When projection A of the holdout is embedded, production ``donto.recall`` (through
    :func:`donto_pg.evaluate.eval_recall`) is measured too, for reference.
    """
    revisions = [c["revision_id"] for c in holdout]
    windows = [r[0] for r in main.execute(
        "select distinct (p.params ->> 'window_chars')::integer from donto.projection as p "
        "where (p.revision_id = any(%s) or exists (select 1 from donto.projection_extension "
        "as pe where pe.projection_id = p.projection_id and pe.revision_id = any(%s))) "
        "and p.kind = 'recall' and p.strategy = 'fixed-window'",
        (revisions, revisions))]
    main.commit()
    if len(windows) != 1:
        raise ValueError(f"the holdout's projection A must have one window size, found {windows}")
    window = windows[0]
    spec = ArmSpec(BASELINE_ARM, "fixed", {"window": window},
                   f"{BASELINE_ARM}=fixed:window={window}")
    main.execute("select donto.ab_register_arm(%s, %s, %s, %s)",
                 (spec.name, spec.strategy, json.dumps(spec.params), spec.spec))
    for rev in revisions:
        main.execute("select donto.ab_project_arm(%s, %s)", (spec.name, rev))
    main.commit()
    _emit(on_event, "baseline", arm=spec.name, window=window)
    measure = _recall_pass(main, spec, revisions, questions, qvecs, k=k, model=model,
                           model_id=model_id, recall_arm=recall_arm, batch=batch,
                           on_event=on_event)
    measure["method"] = (f"projection A's spans (fixed {window}-char windows, arm "
                         f"{BASELINE_ARM}) ranked by donto.ab_recall_units, as every arm")
    missing = main.execute(
        "select count(*) from donto.x_memory_record as m inner join donto.projection as p "
        "using (projection_id) where m.revision_id = any(%s) and p.strategy = 'fixed-window' "
        "and not exists (select 1 from donto.embedding as e "
        "where e.statement_id = m.statement_id and e.model_id = %s)",
        (revisions, model_id)).fetchone()[0]
    main.commit()
    if missing:
        measure["production"] = None
        measure["production_note"] = (f"{missing} projection A chunks of the holdout have no "
                                      "vector (donto-pg embed): donto.recall not measured")
        return measure
    try:
        from donto_pg.evaluate import eval_recall
    except ImportError as exc:  # the evaluation module is optional here
        measure["production"] = None
        measure["production_note"] = f"donto_pg.evaluate unavailable ({exc})"
        return measure
    t0 = time.perf_counter()
    rep = eval_recall(main, ks=(k,), arms=(recall_arm,),
                      conversations=[c["document"] for c in holdout], include_random=False)
    measure["production"] = {
        "hit": rep["overall"][recall_arm][f"hit@{k}"], "n": rep["evaluated"],
        "by_ability": {a: {"n": b["n"], "hit": b[recall_arm][f"hit@{k}"]}
                       for a, b in rep["by_ability"].items()},
        "seconds": round(time.perf_counter() - t0, 1),
        "note": "donto.recall as deployed on projection A (eval_recall), for reference; "
                "the verdict compares arms with the baseline above, ranked alike"}
    return measure


def run_ab(
    conn_factory: ConnFactory,
    *,
    holdout: Sequence[str] | None = None,
    holdout_size: int = 2,
    arms: Sequence[str] = DEFAULT_ARMS,
    providers=None,
    k: int = 10,
    model: str | None = None,
    recall_arm: str = "hybrid",
    concurrency: int = 4,
    alarm_after: int = 50,
    reject_injection: float = ALARM_MAX_INJECTION,
    reject_anchor: float = ALARM_MIN_ANCHOR,
    max_injection: float = 0.02,
    min_anchor: float | None = None,
    min_hypothesis: float = 0.5,
    max_zero_fact: float = 0.5,
    embed_batch: int = 32,
    on_event: Event | None = None,
) -> dict[str, Any]:
    """Gate chunking arms on a holdout; returns the report (see :func:`format_ab`).

    ``conn_factory()`` opens a new connection (one for the run, one per extraction
    worker). HOLDOUT: conversation ids (``100K/1``) or None to pick HOLDOUT_SIZE
    (:func:`pick_holdout`). ARMS: ``NAME=STRATEGY:PARAMS`` strings (:func:`parse_arm`).
    PROVIDERS: a :class:`donto_pg.llm.ProviderPool` (default: the offline baseline
    extractor). K, MODEL, RECALL_ARM: the recall measure (hit@K of ``vector``,
    ``lexical`` or ``hybrid`` recall with the embedding MODEL). The alarm checks every
    ALARM_AFTER blocks (0: only once the arm's blocks are done); REJECT_INJECTION and
    REJECT_ANCHOR reject an arm before its recall pass; MAX_INJECTION, MIN_ANCHOR
    (None: ``donto.healthy_anchor_rate()``), MIN_HYPOTHESIS and MAX_ZERO_FACT are
    the verdict's thresholds (``donto.ab_verdict``).
    ON_EVENT receives progress dicts (``{"event": ..., ...}``).
    """
    from donto_pg import embed as embedmod
    from donto_pg.llm import ProviderPool

    if k < 1:
        raise ValueError("k must be >= 1")
    if recall_arm not in ("vector", "lexical", "hybrid"):
        raise ValueError(f"recall arm must be vector, lexical or hybrid, not {recall_arm!r}")
    specs = [parse_arm(a) for a in arms]
    names = [s.name for s in specs]
    if not specs or len(set(names)) != len(names):
        raise ValueError(f"arms need distinct names, got {names}")
    pool = providers or ProviderPool.baseline()
    started = time.perf_counter()
    main = conn_factory()
    try:
        if min_anchor is None:  # the seed's bar, from its one home
            min_anchor = main.execute("select donto.healthy_anchor_rate()").fetchone()[0]
        chosen, warnings = pick_holdout(main, holdout, holdout_size)
        revisions = [c["revision_id"] for c in chosen]
        _emit(on_event, "holdout", holdout=chosen, warnings=warnings)
        model_name, model_id, _ = embedmod.register_model(main, model)
        questions = _questions(main, revisions)
        gate_key = _key({"revisions": sorted(revisions), "k": k, "model": model_name,
                         "recall_arm": recall_arm,
                         "questions": sorted(q["question_id"] for q in questions)})
        holdout_rows = [{kk: c[kk] for kk in ("conversation", "document", "revision_id",
                                               "chars", "code_share", "stratum", "reason",
                                               "gold", "questions", "gold_questions",
                                               "gold_turns")} for c in chosen]
        gate_id = main.execute(
            "select donto.ab_record_gate(%s, %s, %s, %s, %s, %s, %s)",
            (gate_key, revisions, json.dumps(holdout_rows), k, model_id, recall_arm,
             len(questions))).fetchone()[0]
        main.commit()
        state: dict[str, Any] = {"baseline": None, "reused": None}
        qvecs: dict[int, str] = {}

        def ensure_baseline() -> dict[str, Any]:
            """The gate's baseline: stored, else measured now (before the first recall pass)."""
            if state["baseline"] is None:
                row = main.execute("select measure from donto.ab_baseline where gate_id = %s",
                                   (gate_id,)).fetchone()
                main.commit()
                state["reused"] = row is not None
                if row is None:
                    measure = _baseline(main, chosen, questions, qvecs, k=k, model=model_name,
                                        model_id=model_id, recall_arm=recall_arm,
                                        batch=embed_batch, on_event=on_event)
                    main.execute("select donto.ab_record_baseline(%s, %s)",
                                 (gate_id, json.dumps(measure)))
                    main.commit()
                    row = (measure,)
                state["baseline"] = row[0]
                _emit(on_event, "baseline-hit", hit=row[0]["hit"], reused=state["reused"])
            return state["baseline"]

        results = []
        for arm in specs:
            results.append(_run_arm(
                conn_factory, main, arm, revisions, questions, qvecs, pool, gate_id=gate_id,
                k=k, model=model_name, model_id=model_id, recall_arm=recall_arm,
                ensure_baseline=ensure_baseline, concurrency=concurrency, alarm_after=alarm_after,
                reject_injection=reject_injection, reject_anchor=reject_anchor,
                thresholds=(max_injection, min_anchor, min_hypothesis, max_zero_fact),
                batch=embed_batch, on_event=on_event))
        if state["baseline"] is None:  # every result reused, or every arm rejected early
            row = main.execute("select measure from donto.ab_baseline where gate_id = %s",
                               (gate_id,)).fetchone()
            main.commit()
            if row is not None:
                state["baseline"], state["reused"] = row[0], True
        return {
            "gate_id": gate_id,
            "holdout": chosen,
            "warnings": warnings,
            "revisions": revisions,
            "questions": len(questions),
            "k": k,
            "model": model_name,
            "recall_arm": recall_arm,
            "providers": [p.name + (f" {p.model}" if p.model else "") for p in pool.providers],
            "baseline_extractor": all(p.is_baseline for p in pool.providers),
            "baseline": None if state["baseline"] is None else
            {kk: v for kk, v in state["baseline"].items() if kk != "first_hit"},
            "baseline_reused": state["reused"],
            "thresholds": {"reject_injection": reject_injection, "reject_anchor": reject_anchor,
                           "max_injection": max_injection, "min_anchor": min_anchor,
                           "min_hypothesis": min_hypothesis, "max_zero_fact": max_zero_fact,
                           "alarm_after": alarm_after},
            "arms": results,
            "seconds": round(time.perf_counter() - started, 1),
        }
    finally:
        main.close()


def _run_arm(conn_factory: ConnFactory, main: psycopg.Connection, arm: ArmSpec,
             revisions: list[int], questions: list[dict[str, Any]], qvecs: dict[int, str],
             pool, *, gate_id: int, k: int, model: str, model_id: int, recall_arm: str,
             ensure_baseline: Callable[[], dict[str, Any]], concurrency: int,
             alarm_after: int, reject_injection: float, reject_anchor: float,
             thresholds: tuple[float, float, float, float], batch: int,
             on_event: Event | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    arm_id = main.execute("select donto.ab_register_arm(%s, %s, %s, %s)",
                          (arm.name, arm.strategy, json.dumps(arm.params), arm.spec)).fetchone()[0]
    main.commit()
    units = 0
    for rev in revisions:
        units += main.execute("select donto.ab_project_arm(%s, %s)",
                              (arm.name, rev)).fetchone()[0]
        main.commit()
    effective = main.execute("select params from donto.ab_arm where arm_id = %s",
                             (arm_id,)).fetchone()[0]
    main.commit()
    _emit(on_event, "arm", arm=arm.name, spec=arm.spec, params=effective, units=units)
    t1 = time.perf_counter()
    ext = _extract_arm(conn_factory, main, arm, revisions, pool, concurrency=concurrency,
                       alarm_after=alarm_after, reject_injection=reject_injection,
                       reject_anchor=reject_anchor, on_event=on_event)
    extract_s = time.perf_counter() - t1
    quality = main.execute("select donto.ab_arm_quality(%s, %s, %s)",
                           (arm.name, ext.run_id, revisions)).fetchone()[0]
    quality["by_revision"] = {
        str(rev): main.execute("select donto.ab_arm_quality(%s, %s, %s)",
                               (arm.name, ext.run_id, [rev])).fetchone()[0]
        for rev in revisions}
    main.commit()
    inj, med = quality.get("injection_rate"), quality.get("median_anchor_rate")
    if ext.stopped == "alarm":
        stage, reason = "rejected", f"stopped early by the extractor's alarm: {ext.reason}"
    elif ext.stopped is not None or quality["blocks"] < units:
        stage = "incomplete"
        reason = (f"{ext.stopped or 'stopped'}: {ext.reason or ''} "
                  f"({quality['blocks']} of {units} blocks extracted)").strip()
    else:
        why = []
        if inj is not None and inj > reject_injection:
            why.append(f"injection rate {inj:.4f} > {reject_injection}")
        if med is not None and med < reject_anchor:
            why.append(f"median anchor rate {med:.4f} < {reject_anchor}")
        stage = "rejected" if why else "measured"
        reason = ("rejected before the recall pass: " + "; ".join(why)) if why else None
    result_key = _key({"gate": gate_id, "arm": arm_id, "run": ext.run_id,
                       "blocks": quality["blocks"], "stage": stage})
    row = main.execute("select result_id, recall from donto.ab_result "
                       "where result_key = donto._scoped_key(%s) and gate_id = %s",
                       (result_key, gate_id)).fetchone()
    main.commit()
    reused = row is not None
    recall = row[1] if row else None
    if not reused:
        if stage == "measured":
            ensure_baseline()
            _emit(on_event, "recall", arm=arm.name, questions=len(questions))
            recall = _recall_pass(main, arm, revisions, questions, qvecs, k=k, model=model,
                                  model_id=model_id, recall_arm=recall_arm, batch=batch,
                                  on_event=on_event)
        else:
            _emit(on_event, "rejected", arm=arm.name, stage=stage, reason=reason)
        main.execute("select donto.ab_record_result(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     (result_key, gate_id, arm.name, ext.run_id, stage, units,
                      json.dumps(quality), reason,
                      json.dumps(recall) if recall is not None else None))
        main.commit()
    v = main.execute(
        "select verdict, reasons, recall_hit, baseline_hit, result_id "
        "from donto.ab_verdict(%s, %s, %s, %s, %s, %s)",
        (arm.name, gate_id, *thresholds)).fetchone()
    main.commit()
    out = {
        "arm": arm.name, "spec": arm.spec, "strategy": arm.strategy, "params": effective,
        "context": f"ctx:measure/{arm.name}/...", "units": units, "run_id": ext.run_id,
        "run_label": ext.label, "is_baseline": ext.is_baseline, "resumed": ext.resumed,
        "extracted_now": ext.progress.done, "stopped": ext.stopped, "stage": stage,
        "stop_reason": reason, "quality": quality,
        "recall": {kk: val for kk, val in (recall or {}).items() if kk != "first_hit"} or None,
        "verdict": v[0], "reasons": v[1], "recall_hit": v[2], "baseline_hit": v[3],
        "result_id": v[4], "reused": reused,
        "seconds": {"extract": round(extract_s, 1),
                    "total": round(time.perf_counter() - t0, 1)},
    }
    _emit(on_event, "verdict", arm=arm.name, verdict=v[0], reasons=v[1])
    return out


# --- the report ---------------------------------------------------------------------------


def _fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float) and math.isnan(x):
        return "n/a"
    return f"{x:.{digits}f}" if isinstance(x, float | int) and not isinstance(x, bool) else str(x)


def format_ab(report: Mapping[str, Any]) -> str:
    """The A/B report for a terminal: holdout and why, baseline, one line per arm, verdicts."""
    lines = [f"A/B gate {report['gate_id']}: holdout of {len(report['holdout'])} conversations, "
             f"{report['questions']} gold questions, recall {report['recall_arm']} "
             f"hit@{report['k']} with {report['model']}; extractor: "
             f"{', '.join(report['providers'])}"
             + (" (the offline baseline, not an LLM)" if report["baseline_extractor"] else "")]
    for c in report["holdout"]:
        lines.append(f"  {c['conversation']} (revision {c['revision_id']}): {c['reason']}; "
                     f"{c['gold']}")
    for w in report["warnings"]:
        lines.append(f"  warning: {w}")
    b = report["baseline"]
    if b is None:
        lines.append("fixed-1,200 recall baseline: not measured (no arm reached a recall pass)")
    else:
        lines.append(f"fixed-1,200 recall baseline (projection A's spans, ranked as the arms): "
                     f"hit@{report['k']} {_fmt(b['hit'])} over {b['n']} questions"
                     + (" (stored)" if report.get("baseline_reused") else ""))
        prod = b.get("production")
        lines.append(f"  production donto.recall on projection A, for reference: hit@{report['k']} "
                     f"{_fmt(prod['hit'])}" if prod else
                     f"  production donto.recall: {b.get('production_note', 'not measured')}")
    head = (f"{'arm':14} {'units':>6} {'facts/chunk':>11} {'anchor':>7} {'hyp':>6} "
            f"{'inject':>7} {'zero':>6} {'hit@' + str(report['k']):>7} {'verdict':>9}")
    lines += [head, "-" * len(head)]
    for a in report["arms"]:
        q = a["quality"]
        lines.append(
            f"{a['arm']:14} {a['units']:>6} {_fmt(q.get('facts_per_chunk'), 2):>11} "
            f"{_fmt(q.get('median_anchor_rate')):>7} {_fmt(q.get('hypothesis_rate')):>6} "
            f"{_fmt(q.get('injection_rate')):>7} {_fmt(q.get('zero_fact_rate')):>6} "
            f"{_fmt(a['recall_hit']):>7} {a['verdict']:>9}")
    for a in report["arms"]:
        extra = f" [{a['stage']}: {a['stop_reason']}]" if a["stop_reason"] else ""
        lines.append(f"{a['arm']} ({a['spec']}, run {a['run_id']}"
                     f"{', reused' if a['reused'] else ''}): {a['verdict']} - "
                     + "; ".join(a["reasons"]) + extra)
    return "\n".join(lines)
