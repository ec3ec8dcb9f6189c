"""Benchmark tool: sweep recall's fusion settings offline, in seconds instead of hours.

``donto.recall`` is slow to tune through SQL: every setting means asking every question
again. The arms' candidates do not depend on most settings, so this tool asks once per
question and fuses offline:

    python benchmarks/recall_sweep.py dump sweep.json -c 500K/13 -c 500K/14 ...
    python benchmarks/recall_sweep.py check sweep.json     # the replica == donto.recall
    python benchmarks/recall_sweep.py sweep sweep.json --grid recall_key_lexical_weight=0,0.5,1
    python benchmarks/recall_sweep.py sweep sweep.json -c 500K/13 --set recall_standing_slots=2

``dump`` stores, per probing question with gold turns (abstention left out), the top
``--pool`` (400) candidates of each arm as ``donto.recall_by_vector`` computes them in the
question's context: chunk vectors (exact cosine), chunk words (``donto._recall_lexical``),
recall keys by vector and by words (``donto._recall_keys``), and every standing statement in
force with the cosine of its vector and of its condition's; plus the context's live chunks
(not retracted) and the turns of the latest revision (a conversation that grew by appending:
the revision it grew to). ``sweep`` fuses them as ``donto.recall_by_vector`` does (exchange
folding, the four weighted RRF terms, tier 1, overlaps, ties to the later valid time, the
standing block, the origin rows, the turn blocks, the session heads) and prints hit@1/5/10
per ability, hit@k defined as in ``donto_pg.evaluate`` (over places: the standing block, and
each turn block, is one).
``check`` asks ``donto.recall`` with the defaults and says whether every first-hit rank
agrees: run it after any change to ``donto.recall_by_vector``. The replica covers contexts searched
exactly (at most ``recall_exact_max``, 10,000 chunks); HNSW contexts are approximate.
Settings: the ``recall_*`` names below, as in ``SET donto.<name>``.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import re
import sys
from collections import defaultdict
from collections.abc import Iterable

from donto_pg import db as dbmod
from donto_pg.evaluate import places

DEFAULTS: dict[str, float | str] = {
    "recall_vector_weight": 1.0, "recall_lexical_weight": 1.0, "recall_key_weight": 0.5,
    "recall_key_lexical_weight": 0.5, "recall_key_lexical_max": 2500, "recall_rrf_k": 10,
    "recall_pool_share": 0.05, "recall_pool_min": 100, "recall_pool_max": 1000,
    "recall_standing_slots": 8, "recall_standing_chars": 1200, "recall_standing_min": 0.25,
    "recall_standing_after": 1,
    "recall_standing_condition_weight": 0.5, "recall_unit": "exchange",
    "recall_origin_slots": 1, "recall_origin_pool": 50,
    "recall_origin_pattern": r"(summar|overview|recap|chronolog|timeline|\min order\M"
                             r"|order in which|over time|(throughout|across) (all )?(of )?our"
                             r"|evolved|developed|progressed)",
    "recall_turns_pattern": r"(\mi (first |ever )?(brought up|mentioned|raised)\M|order in which"
                            r"|\min order\M)",
    "recall_turns_chars": 1200, "recall_turns_pool": 60,
    "recall_head_weight": 2.0, "recall_head_share": 0.2, "recall_head_min_chunks": 1000,
    "recall_head_pattern": r"(summar|recap|overview|\msum up\M)",
}
ABILITIES = ("contradiction_resolution", "event_ordering", "information_extraction",
             "instruction_following", "knowledge_update", "multi_session_reasoning",
             "preference_following", "summarization", "temporal_reasoning")
KS = (1, 5, 10)

_QUESTIONS = """
select q.question_id, q.ability, q.question,
       (select pg_catalog.jsonb_agg(distinct pg_catalog.jsonb_build_array(
                g.turn_id, g.header_start, g.char_end))
        from donto.question_gold_span as g where g.question_id = q.question_id)
from donto.probe_question as q
inner join donto.document as d on d.document_id = q.document_id
where d.iri = %s and q.ability <> 'abstention'
order by q.ability, q.qindex
"""
_CHUNKS = """
select m.statement_id, m.char_start, m.char_end, upper(s.valid_time)::text,
       lower(s.valid_time)::text
from donto.x_memory_record as m
inner join donto.projection as p on p.projection_id = m.projection_id
inner join donto.statement as s on s.statement_id = m.statement_id
where p.kind = 'recall' and p.context_id = %s
      and not exists (select 1 from donto.retraction as rt where rt.statement_id = m.statement_id)
order by m.char_start
"""
# The revision whose turns the context's chunks are placed in: the latest its projection grew
# to (a conversation loaded whole: the chunks' own).
_LATEST = """
select coalesce((select pe.revision_id from donto.projection_extension as pe
                 where pe.projection_id = m.projection_id
                 order by pe.created_at desc, pe.revision_id desc limit 1), m.revision_id)
from donto.x_memory_record as m where m.statement_id = %s
"""
_SESSIONS = """
select t.session, pg_catalog.min(t.header_start), pg_catalog.max(t.char_end) from donto.turn as t
where t.revision_id = %s and t.session is not null group by t.session order by 2
"""
_VECTOR = """
select e.statement_id from donto.embedding as e
where e.model_id = %(model)s and e.context_id = %(ctx)s
      and not exists (select 1 from donto.retraction as rt where rt.statement_id = e.statement_id)
order by (e.embedding <=> %(q)s::vector), e.statement_id limit %(pool)s
"""
_STANDING = """
select st.statement_id, st.char_start, st.char_end,
       1 - (v.embedding <=> %(q)s::vector), 1 - (cv.embedding <=> %(q)s::vector)
from donto._standing(%(ctx)s, null) as st
inner join donto.x_standing_vector as v
    on v.statement_id = st.statement_id and v.model_id = %(model)s
left join donto.x_standing_condition_vector as cv
    on cv.statement_id = st.statement_id and cv.model_id = %(model)s
where st.superseded_by is null
"""


def dump(conn, conversations: Iterable[str], pool: int = 400) -> dict:
    """The arms' candidates of every scorable question of CONVERSATIONS (see the module)."""
    model = conn.execute("select donto.embedding_model_id()").fetchone()[0]
    out: dict = {"pool": pool, "contexts": {}, "questions": []}
    for conv in conversations:
        iri = conv if ":" in conv else f"beam:{conv}"
        ctx = conn.execute("select c.context_id from donto.context as c "
                           "where c.iri = donto.recall_context_iri(%s)", (iri,)).fetchone()
        if ctx is None:
            raise SystemExit(f"recall_sweep: {conv} is not loaded")
        ctx = ctx[0]
        chunks = conn.execute(_CHUNKS, (ctx,)).fetchall()
        rev = conn.execute(_LATEST, (chunks[0][0],)).fetchone()[0]
        users = [list(r) for r in conn.execute(
            "select header_start, char_end from donto.turn "
            "where revision_id = %s and role = 'user' order by header_start", (rev,)).fetchall()]
        sessions = [list(r) for r in conn.execute(_SESSIONS, (rev,)).fetchall()]
        out["contexts"][conv] = {"chunks": chunks, "user_turns": users, "sessions": sessions,
                                 "keys": conn.execute(
                                     "select count(*) from donto.x_turn_key as k "
                                     "join donto.projection as p using (projection_id) "
                                     "where p.context_id = %s", (ctx,)).fetchone()[0]}
        for qid, ability, question, gold in conn.execute(_QUESTIONS, (iri,)).fetchall():
            if not gold:
                continue
            q = conn.execute("select donto.embed_query(%s)::text", (question,)).fetchone()[0]
            args = {"q": q, "ctx": ctx, "model": model, "pool": pool}
            out["questions"].append({
                "id": qid, "conversation": conv, "ability": ability, "question": question,
                "gold": gold,
                "vector": [r[0] for r in conn.execute(_VECTOR, args).fetchall()],
                "lexical": [r[0] for r in conn.execute(
                    "select statement_id from donto._recall_lexical(%s, %s, null, %s)",
                    (question, ctx, pool)).fetchall()],
                "keys": conn.execute(
                    "select statement_id, key_vector_rank, key_lexical_rank from "
                    "donto._recall_keys(%s::vector, %s, %s, null, %s, %s, true, true)",
                    (q, question, ctx, model, pool)).fetchall(),
                "standing": conn.execute(_STANDING, args).fetchall()})
        print(f"dumped {conv}", file=sys.stderr)
    conn.rollback()
    return out


class Context:
    """A dumped context: its chunks by id, its user turns' spans, each chunk's exchange
    (the chunk holding the latest user turn that starts before the chunk ends), and where
    that user turn lies in its session (0: its start, 1: its end; sql/050's
    donto._opens_session)."""

    def __init__(self, raw: dict) -> None:
        chunks = raw["chunks"]
        self.by_id = {c[0]: c for c in chunks}
        self.n = len(chunks)
        self.keys = raw["keys"]
        starts = [c[1] for c in chunks]
        self.turns = raw["user_turns"]
        users = self.heads = [t[0] for t in self.turns]
        sessions = raw.get("sessions") or []
        firsts = [x[1] for x in sessions]
        self.unit = {}
        self.place: dict[int, float] = {}
        for sid, _start, end, _upper, _lower in chunks:
            i = bisect.bisect_left(users, end) - 1
            j = bisect.bisect_right(starts, users[i]) - 1 if i >= 0 else -1
            self.unit[sid] = chunks[j][0] if j >= 0 else sid
            s = bisect.bisect_right(firsts, users[i]) - 1 if i >= 0 else -1
            if len(sessions) > 1 and s >= 0:
                a, b = sessions[s][1], sessions[s][2]
                self.place[sid] = (users[i] - a) / (b - a)


def _later_first(valid: str | None) -> tuple:
    # order by upper(valid_time) desc nulls last
    return (1, "") if valid is None else (0, "".join(chr(0x10FFFF - ord(c)) for c in valid))


def fuse(q: dict, ctx: Context, s: dict, k: int = 10) -> list[list[tuple[int, int]]]:
    """The spans of the top K places donto.recall_by_vector returns (hybrid arm): a chunk
    row's span, or the standing block's spans."""
    pool = max(k, min(int(s["recall_pool_max"]), max(int(s["recall_pool_min"]),
                                                     math.ceil(s["recall_pool_share"] * ctx.n))))
    w = [s["recall_vector_weight"], s["recall_lexical_weight"], s["recall_key_weight"],
         s["recall_key_lexical_weight"] if ctx.keys <= s["recall_key_lexical_max"] else 0]
    rrf_k = s["recall_rrf_k"]
    cand: dict[int, list] = defaultdict(lambda: [None] * 4)

    def rank(sid: int, arm: int, r: int | None) -> None:
        if r is not None and r <= pool and w[arm]:
            c = cand[sid]
            c[arm] = r if c[arm] is None else min(c[arm], r)

    for arm, ids in ((0, q["vector"]), (1, q["lexical"])):
        for r, sid in enumerate(ids, 1):
            rank(sid, arm, r)
    for sid, kvr, klr in q["keys"]:
        rank(sid, 2, kvr)
        rank(sid, 3, klr)
    fold = s["recall_unit"] == "exchange"
    units: dict[int, list] = defaultdict(lambda: [None] * 4)
    for sid, c in cand.items():
        u = ctx.unit[sid] if fold and (c[0] is not None or c[1] is not None) else sid
        for i in range(4):
            if c[i] is not None:
                units[u][i] = c[i] if units[u][i] is None else min(units[u][i], c[i])
    ranked = {u: [None] * 4 for u in units}
    for i in range(4):
        for r, (_x, u) in enumerate(sorted((v[i], u) for u, v in units.items()
                                           if v[i] is not None), 1):
            ranked[u][i] = r

    heads = (s["recall_head_weight"] > 0 and s["recall_head_share"] > 0
             and ctx.n >= s["recall_head_min_chunks"]
             and re.search(_python_re(s["recall_head_pattern"]), q["question"], re.I) is not None)

    def score(ranks: list, unit: int | None = None) -> float:
        head = heads and unit is not None and ctx.place.get(unit, 1) < s["recall_head_share"]
        return round(sum(wi / (rrf_k + r) for wi, r in zip(w, ranks, strict=True)
                         if r is not None and wi) * (1 + s["recall_head_weight"] if head else 1), 9)

    rows = [(0, score(r, u), u) for u, r in ranked.items()]
    if fold:
        rows += [(1, score(c), sid) for sid, c in cand.items()]
    rows.sort(key=lambda t: (t[0], -t[1], _later_first(ctx.by_id[t[2]][3]), -t[2]))
    cw = s["recall_standing_condition_weight"]
    standing = sorted(
        ((st[3] if st[4] is None else (1 - cw) * st[3] + cw * st[4], st[0], st[1], st[2])
         for st in q["standing"]), key=lambda t: (-t[0], -t[1]))
    block: list[tuple[int, int]] = []
    used = 0
    for sim, _id, a, b in standing[:int(s["recall_standing_slots"])]:
        used += b - a
        if sim < s["recall_standing_min"] or used > s["recall_standing_chars"]:
            break
        block.append((a, b))
    origins = int(s["recall_origin_slots"]) > 0 and re.search(
        _python_re(s["recall_origin_pattern"]), q["question"], re.I) is not None
    opool = int(s["recall_origin_pool"])
    tchars, tpool = int(s["recall_turns_chars"]), int(s["recall_turns_pool"])
    turns = tchars > 0 and tpool > 0 and re.search(
        _python_re(s["recall_turns_pattern"]), q["question"], re.I) is not None
    need = max(k, opool) if origins else k
    if turns:
        need = max(need, 1 + tpool + k)
    kept: list[int] = []
    for _tier, _score, u in rows:
        a, b = ctx.by_id[u][1], ctx.by_id[u][2]
        if any(a < ctx.by_id[x][2] and ctx.by_id[x][1] < b for x in kept):
            continue
        kept.append(u)
        if len(kept) >= need:
            break
    if origins and len(kept) > 2:
        def when(x: int) -> tuple:  # lower(valid_time) nulls last, then the offset
            c = ctx.by_id[x]
            return (c[4] is None, c[4] or "", c[1], x)
        early = sorted(kept[1:opool], key=when)[:int(s["recall_origin_slots"])]
        kept = kept[:1] + sorted(early, key=when) + [x for x in kept[1:] if x not in early]
    groups = [[(ctx.by_id[u][1], ctx.by_id[u][2])] for u in kept]
    if turns and len(kept) > 1:  # turn blocks: rows 2 .. 1 + pool as their user turns
        groups, used, seen = groups[:1], None, set()
        for i, u in enumerate(kept[1:], 2):
            a, b = ctx.by_id[u][1], ctx.by_id[u][2]
            j = bisect.bisect_left(ctx.heads, b) - 1
            if i > 1 + tpool or j < 0:
                groups.append([(a, b)])
                used = None
                continue
            if j in seen:
                continue
            seen.add(j)
            ts, te = ctx.turns[j][0], min(ctx.turns[j][1], ctx.turns[j][0] + tchars)
            if used is None or used + te - ts > tchars:
                groups.append([])
                used = 0
            groups[-1].append((ts, te))
            used += te - ts
    out: list[list[tuple[int, int]]] = []
    for i, g in enumerate(groups):
        if block and i >= s["recall_standing_after"]:
            out.append(block)
            block = []
        out.append(g)
    return (out + ([block] if block else []))[:k]


def _python_re(pattern: object) -> str:
    """A PostgreSQL word-boundary pattern as Python's re reads it."""
    return str(pattern).replace(r"\m", r"\b").replace(r"\M", r"\b")


def first_hit(q: dict, places: list[list[tuple[int, int]]]) -> int | None:
    return next((i for i, spans in enumerate(places, 1)
                 if any(a < ge and gs < b for a, b in spans for _t, gs, ge in q["gold"])), None)


def evaluate(data: dict, settings: dict, conversations: set[str] | None = None) -> dict:
    """Hit@1/5/10 per ability and overall, and each question's first-hit rank."""
    s = {**DEFAULTS, **settings}
    ctxs = {c: Context(raw) for c, raw in data["contexts"].items()}
    hits: dict[str, list[int | None]] = defaultdict(list)
    first: dict[int, int | None] = {}
    for q in data["questions"]:
        if conversations and q["conversation"] not in conversations:
            continue
        first[q["id"]] = f = first_hit(q, fuse(q, ctxs[q["conversation"]], s, max(KS)))
        hits[q["ability"]].append(f)
        hits["overall"].append(f)
    table = {a: {"n": len(v), **{f"hit@{k}": round(sum(1 for f in v if f and f <= k) / len(v), 4)
                                 for k in KS}} for a, v in hits.items()}
    return {"settings": settings, "table": table, "first_hit": first}


def check(conn, data: dict, settings: dict | None = None) -> list[int]:
    """The questions whose first-hit rank in donto.recall (hybrid, k = 10, SETTINGS set in
    the session) differs from the replica's; [] when they all agree."""
    settings = settings or {}
    mine = evaluate(data, settings)["first_hit"]
    for name, value in settings.items():
        conn.execute("select pg_catalog.set_config(%s, %s, false)",
                     (f"donto.{name}", str(value)))
    differ = []
    for q in data["questions"]:
        conv = q["conversation"]
        ctx = conn.execute("select donto.recall_context_iri(%s)",
                           (conv if ":" in conv else f"beam:{conv}",)).fetchone()[0]
        rows = conn.execute("select char_start, char_end, place "
                            "from donto.recall(%s, k => 10, context => %s)",
                            (q["question"], ctx)).fetchall()
        if first_hit(q, [[r[:2] for r in p] for p in places(rows)]) != mine[q["id"]]:
            differ.append(q["id"])
    for name in settings:
        conn.execute(f"reset donto.{name}")
    conn.rollback()
    return differ


def _value(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or name not in DEFAULTS:
            raise SystemExit(f"recall_sweep: {item!r}: expected NAME=VALUE with NAME one of "
                             + ", ".join(DEFAULTS))
        out.append((name, value))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="ask every question once, store the arms' candidates")
    d.add_argument("out")
    d.add_argument("-c", "--conversation", action="append", required=True)
    d.add_argument("--pool", type=int, default=400, help="candidates kept per arm (400)")
    d.add_argument("--dsn", default=None)
    c = sub.add_parser("check", help="the replica's first hits against donto.recall's")
    c.add_argument("dump")
    c.add_argument("--dsn", default=None)
    w = sub.add_parser("sweep", help="hit@k per ability for settings")
    w.add_argument("dump")
    w.add_argument("-c", "--conversation", action="append")
    w.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    w.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="every combination of these values (repeatable)")
    w.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    if args.command == "dump":
        with dbmod.connect(args.dsn) as conn:
            data = dump(conn, args.conversation, args.pool)
        with open(args.out, "w") as f:
            json.dump(data, f)
        print(f"{len(data['questions'])} questions -> {args.out}")
        return 0
    with open(args.dump) as f:
        data = json.load(f)
    if args.command == "check":
        with dbmod.connect(args.dsn) as conn:
            differ = check(conn, data)
        n = len(data["questions"])
        print(f"{n - len(differ)} of {n} questions agree"
              + (f"; differ: {differ}" if differ else ""))
        return 1 if differ else 0
    fixed = {n: _value(v) for n, v in _pairs(args.set)}
    grid = [[(n, _value(v)) for v in vs.split(",")] for n, vs in _pairs(args.grid)]
    convs = set(args.conversation) if args.conversation else None
    results = [evaluate(data, {**fixed, **dict(combo)}, convs)
               for combo in itertools.product(*grid)]
    if args.json:
        print(json.dumps([{k: r[k] for k in ("settings", "table")} for r in results], indent=1))
        return 0
    for r in results:
        t = r["table"]
        print(" ".join(f"{n}={v}" for n, v in r["settings"].items()) or "defaults")
        for a in (*ABILITIES, "overall"):
            if a in t:
                print(f"  {a:26} {t[a]['n']:4} "
                      + " ".join(f"{t[a][f'hit@{k}']:.3f}" for k in KS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
