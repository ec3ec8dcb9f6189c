"""LLM-free recall benchmark over the probing questions loaded in the database.

``eval_recall`` asks ``donto.recall`` every probing question that has gold
turns, restricted to the question's own conversation (its recall context
``ctx:memory/episodic/beam/<conv>``), once per arm, and scores the ranking
against the gold turns (``donto.question_gold_span``):

* a gold turn is its FULL span ``[header_start, char_end)``: the
  ``[user #12] `` prefix and the content. A chunk *hits* a gold turn when their
  character spans overlap (same revision, ``chunk.start < turn.end`` and
  ``turn.start < chunk.end``). Chunks are line-respecting and the prefix sits on
  the turn's first line, so this equals content overlap except when a window
  cuts a line longer than itself;
* recall's rows are counted in the *places* they take (``places``, by their
  ``place``): every chunk row is one, and so is the standing block or a block of
  user turns (the hybrid arm's; each at most one chunk's worth of text), as in
  ``donto.recall``'s k; a place hits when any of its rows does;
* ``hit@k`` is 1 when any of the top-k places hits any gold turn of the
  question (for event_ordering and multi_session_reasoning: any of their
  groups); knowledge_update gold is the UPDATED turn only (the superseded
  ``stale`` turns never count);
* ``turn_recall@k`` is the fraction of the question's distinct gold turns hit
  by the top-k places (the useful figure for summarization, whose gold covers
  many turns);
* abstention questions have no gold by design and are left out; other
  questions without a gold turn are left out and counted (``no_gold``);
* the ``random`` arm takes k random chunks of the same conversation (not
  retracted), with a generator seeded by ``seed`` and the question id, so it is
  reproducible and the same for every run.

Averages: ``overall`` is the mean over questions (micro), ``macro`` the mean of
the per-ability means. ``questions`` in the report holds, per question and arm,
the rank of the first hit (``None``: not within the largest k).
"""

from __future__ import annotations

import itertools
import random
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import psycopg

from donto_pg.loader import document_iri

ARMS: tuple[str, ...] = ("vector", "lexical", "hybrid")
RANDOM = "random"
EXCLUDED_ABILITIES: tuple[str, ...] = ("abstention",)

_QUESTIONS = """
select q.question_id, d.iri, donto.recall_context_iri(d.iri) as context, q.revision_id,
       q.ability, q.qindex, q.question,
       coalesce((select pg_catalog.jsonb_agg(distinct pg_catalog.jsonb_build_array(
                        g.turn_id, g.header_start, g.char_end))
                 from donto.question_gold_span as g
                 where g.question_id = q.question_id), '[]'::jsonb) as gold
from donto.probe_question as q
inner join donto.document as d on d.document_id = q.document_id
where %(convs)s::text[] is null or d.iri = any(%(convs)s::text[])
order by d.document_id, q.ability, q.qindex
"""

_CHUNKS = """
select s.derived_from_revision, s.char_start, s.char_end
from donto.statement as s
inner join donto.context as c on c.context_id = s.context_id
where c.iri = %s and s.predicate = 'mem:episodic/chunk'
      and not exists (select 1 from donto.retraction as r where r.statement_id = s.statement_id)
order by s.statement_id
"""

_RECALL = """
select revision_id, char_start, char_end, place
from donto.recall(%s, k => %s, context => %s, arms => %s, pool => %s, model => %s)
"""


def _document_iris(conversations: Iterable[str] | None) -> list[str] | None:
    """``100K/1``, ``beam:100K/1`` -> ``beam:100K/1`` (None: every conversation)."""
    if conversations is None:
        return None
    return [document_iri(c) for c in conversations]


def places(rows: Sequence[tuple]) -> list[list[tuple]]:
    """Recall ROWS (ending in ``place``) grouped into the places of k they take: a chunk
    row is one, and so is the standing block or a block of user turns (consecutive rows
    with the same place)."""
    return [list(place) for _, place in itertools.groupby(rows, key=lambda row: row[-1])]


def _hits(chunks: Sequence[Sequence[tuple]], revision: int | set[int],
          gold: Sequence[tuple[int, int, int]]) -> list[set[int]]:
    """For each place in rank order (its rows' revision, start and end first), the gold
    turn ids its rows overlap.

    REVISION may be a set: the question's revision with those it extends and those that
    extend it (``donto.revision_lineage``): a chunk kept from an earlier revision of a
    conversation that grew is a chunk of the later one, at the same offsets.
    """
    revisions = revision if isinstance(revision, set) else {revision}
    return [{tid for rev, start, end, *_ in place for tid, gs, ge in gold
             if rev in revisions and start < ge and gs < end} for place in chunks]


def _score(hits: list[set[int]], n_gold: int, ks: Sequence[int]) -> dict[str, Any]:
    first = next((i + 1 for i, h in enumerate(hits) if h), None)
    row: dict[str, Any] = {"first_hit": first}
    for k in ks:
        covered = set().union(*hits[:k]) if hits[:k] else set()
        row[f"hit@{k}"] = 1.0 if first is not None and first <= k else 0.0
        row[f"turn_recall@{k}"] = len(covered) / n_gold
    return row


def _mean(values: list[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def eval_recall(conn: psycopg.Connection, *, ks: Sequence[int] = (1, 5, 10),
                arms: Sequence[str] = ARMS, conversations: Iterable[str] | None = None,
                include_random: bool = True, seed: int = 0, pool: int | None = None,
                model: str | None = None,
                progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Hit@k and turn recall@k of ``donto.recall`` per ability, overall, per arm.

    CONVERSATIONS: ids such as ``100K/1`` (or document IRIs ``beam:100K/1``);
    None evaluates every conversation with probing questions. POOL is passed to
    donto.recall (None: its default), and so is MODEL, the embedding model's name
    (None: the default model). PROGRESS(done, total) is called after each
    question. See the module docstring for the definitions.
    """
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError(f"ks must be positive integers, got {ks}")
    arms = list(dict.fromkeys(arms))
    for arm in arms:
        if arm not in ARMS:
            raise ValueError(f"unknown arm {arm!r}: expected one of {', '.join(ARMS)}")
    kmax = ks[-1]
    started = time.perf_counter()
    rows = conn.execute(_QUESTIONS, {"convs": _document_iris(conversations)}).fetchall()
    all_arms = arms + ([RANDOM] if include_random else [])
    counts: dict[str, dict[str, int]] = defaultdict(lambda: {"questions": 0, "evaluated": 0,
                                                            "abstention": 0, "no_gold": 0})
    per_question: list[dict[str, Any]] = []
    chunk_cache: dict[str, list[tuple[int, int, int]]] = {}
    lineages: dict[int, set[int]] = {}
    seconds: dict[str, float] = defaultdict(float)
    todo = [r for r in rows if r[4] not in EXCLUDED_ABILITIES and r[7]]
    for qid, iri, ctx, rev, ability, qindex, question, gold_json in rows:
        c = counts[ability]
        c["questions"] += 1
        if ability in EXCLUDED_ABILITIES:
            c["abstention"] += 1
            continue
        if not gold_json:
            c["no_gold"] += 1
            continue
        c["evaluated"] += 1
        gold = [(int(t), int(s), int(e)) for t, s, e in gold_json]
        if rev not in lineages:
            lineages[rev] = {r for (r,) in conn.execute(
                "select donto.revision_lineage(%s)", (rev,)).fetchall()}
        n_gold = len({t for t, _, _ in gold})
        entry: dict[str, Any] = {"question_id": qid, "conversation": iri.partition(":")[2],
                                 "ability": ability, "index": qindex, "question": question,
                                 "gold_turns": sorted({t for t, _, _ in gold}), "arms": {}}
        for arm in arms:
            t0 = time.perf_counter()
            got = conn.execute(_RECALL, (question, kmax, ctx, arm, pool, model)).fetchall()
            seconds[arm] += time.perf_counter() - t0
            entry["arms"][arm] = _score(_hits(places(got), lineages[rev], gold), n_gold, ks)
        if include_random:
            if ctx not in chunk_cache:
                chunk_cache[ctx] = conn.execute(_CHUNKS, (ctx,)).fetchall()
            chunks = list(chunk_cache[ctx])
            random.Random(f"{seed}:{qid}").shuffle(chunks)
            entry["arms"][RANDOM] = _score(_hits([[c] for c in chunks[:kmax]], lineages[rev],
                                                 gold), n_gold, ks)
        per_question.append(entry)
        if progress:
            progress(len(per_question), len(todo))
    if not conn.autocommit:
        conn.rollback()  # recall leaves temp tables; nothing to keep

    metrics = [f"hit@{k}" for k in ks] + [f"turn_recall@{k}" for k in ks]
    by_ability: dict[str, Any] = {}
    for ability in sorted({e["ability"] for e in per_question}):
        qs = [e for e in per_question if e["ability"] == ability]
        by_ability[ability] = {"n": len(qs)} | {
            arm: {m: _mean([e["arms"][arm][m] for e in qs]) for m in metrics}
            for arm in all_arms}
    overall = {"n": len(per_question)} | {
        arm: {m: _mean([e["arms"][arm][m] for e in per_question]) for m in metrics}
        for arm in all_arms}
    macro = {"n": len(by_ability)} | {
        arm: {m: _mean([by_ability[a][arm][m] for a in by_ability]) for m in metrics}
        for arm in all_arms}
    return {
        "ks": ks,
        "arms": all_arms,
        "pool": pool,
        "model": model,
        "seed": seed,
        "span": "[header_start, char_end)",
        "conversations": sorted({r[1].partition(":")[2] for r in rows}),
        "counts": {a: dict(v) for a, v in sorted(counts.items())},
        "questions_total": len(rows),
        "evaluated": len(per_question),
        "excluded_abstention": sum(v["abstention"] for v in counts.values()),
        "excluded_no_gold": sum(v["no_gold"] for v in counts.values()),
        "overall": overall,
        "macro": macro,
        "by_ability": by_ability,
        "recall_ms_per_question": {a: round(1000 * seconds[a] / max(len(per_question), 1), 1)
                                   for a in arms},
        "seconds": round(time.perf_counter() - started, 1),
        "questions": per_question,
    }


def format_table(report: dict[str, Any], metric: str = "hit") -> str:
    """A terminal table: one row per ability (and overall/macro), hit@k per arm.

    METRIC ``hit`` (hit@k) or ``turn_recall`` (fraction of gold turns hit).
    """
    ks, arms = report["ks"], report["arms"]
    head1 = f"{'':26} {'':>4} " + " | ".join(f"{arm:^{6 * len(ks) - 1}}" for arm in arms)
    head2 = f"{'ability':26} {'n':>4} " + " | ".join(
        " ".join(f"{'@' + str(k):>5}" for k in ks) for _ in arms)
    lines = [f"{metric}@k  (span {report['span']}; {report['evaluated']} questions, "
             f"{report['excluded_abstention']} abstention and {report['excluded_no_gold']} "
             f"without gold excluded)", head1, head2, "-" * len(head2)]

    def row(name: str, block: dict[str, Any], measure: str = metric) -> str:
        return f"{name:26} {block['n']:>4} " + " | ".join(
            " ".join(f"{block[arm][f'{measure}@{k}']:5.3f}" for k in ks) for arm in arms)

    for ability, block in report["by_ability"].items():
        lines.append(row(ability, block))
    lines.append("-" * len(head2))
    lines.append(row("overall (micro)", report["overall"]))
    lines.append(row("macro (mean of abilities)", report["macro"]))
    summary = report["by_ability"].get("summarization")
    if metric == "hit" and summary is not None:
        # its gold spans many turns: hit@k says little, the fraction of them hit says more
        lines.append("-" * len(head2))
        lines.append(row("summarization, turns hit", summary, "turn_recall"))
        lines.append("(turns hit: the fraction of a question's gold turns in the top k, "
                     "turn_recall@k in --json)")
    return "\n".join(lines)

