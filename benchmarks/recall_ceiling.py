"""Benchmark: is a recall miss the ranking's fault or the question's?

Asks ``donto.recall`` (hybrid) every probing question of the given loaded, embedded BEAM
conversations twice: with the question, as ``donto-pg eval recall`` does, and with BEAM's own
ideal answer in its place. No system has the answer at question time; it names what the
question leaves out (the people, the dates, the thread), so where its gold lands bounds what
a better reading of the question could buy. A question whose gold the answer finds and the
question does not lacks words, not ranking; one whose gold neither finds is a ranking miss.
Prints hit@k per ability for both queries (``--json``: machine-readable, per question):

    python benchmarks/recall_ceiling.py -c 500K/13 -c 500K/14 --ability summarization
    python benchmarks/recall_ceiling.py -c 100K/1 --k 10 --k 50 --json

Hit@k is ``donto_pg.evaluate``'s (places, gold spans, the revision's lineage). An answer
longer than ``--max-chars`` (4,000) is cut there; questions without an answer are counted
and left out.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict

from donto_pg import db as dbmod
from donto_pg.evaluate import (
    _QUESTIONS,
    _RECALL,
    EXCLUDED_ABILITIES,
    _document_iris,
    _hits,
    _score,
    places,
)

_ANSWER = "select answer from donto.probe_question where question_id = %s"


def measure(conn, conversations: list[str] | None, abilities: list[str] | None,
            ks: list[int], max_chars: int) -> dict:
    rows = conn.execute(_QUESTIONS, {"convs": _document_iris(conversations)}).fetchall()
    questions, no_answer = [], 0
    for qid, iri, ctx, rev, ability, _qindex, question, gold_json in rows:
        if ability in EXCLUDED_ABILITIES or not gold_json or (
                abilities and ability not in abilities):
            continue
        (answer,) = conn.execute(_ANSWER, (qid,)).fetchone()
        if not (answer or "").strip():
            no_answer += 1
            continue
        lineage = {r for (r,) in conn.execute("select donto.revision_lineage(%s)", (rev,))}
        gold = [(int(t), int(s), int(e)) for t, s, e in gold_json]
        n_gold = len({t for t, _, _ in gold})
        entry = {"question_id": qid, "conversation": iri.partition(":")[2], "ability": ability}
        for name, text in (("question", question), ("answer", answer[:max_chars])):
            got = conn.execute(_RECALL, (text, max(ks), ctx, "hybrid", None, None)).fetchall()
            entry[name] = _score(_hits(places(got), lineage, gold), n_gold, ks)
        conn.rollback()  # recall leaves temp tables
        questions.append(entry)
    by: dict[str, list[dict]] = defaultdict(list)
    for e in questions:
        by[e["ability"]].append(e)
    by["overall"] = questions

    def mean(qs: list[dict], name: str, k: int) -> float:
        return round(sum(e[name][f"hit@{k}"] for e in qs) / len(qs), 4) if qs else 0.0

    table = {a: {"n": len(qs)} | {f"{name}_hit@{k}": mean(qs, name, k)
                                  for name in ("question", "answer") for k in ks}
             for a, qs in sorted(by.items(), key=lambda t: (t[0] == "overall", t[0]))}
    return {"ks": ks, "no_answer": no_answer, "table": table, "questions": questions}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: DONTO_DSN or embedded)")
    ap.add_argument("-c", "--conversation", action="append", help="conversation id, e.g. 100K/1")
    ap.add_argument("--ability", action="append", help="only this ability (repeatable)")
    ap.add_argument("--k", type=int, action="append", help="k to report (default 10 and 50)")
    ap.add_argument("--max-chars", type=int, default=4000, help="cut longer answers here")
    ap.add_argument("--json", action="store_true", help="print JSON, per question too")
    args = ap.parse_args(argv)
    ks = sorted(set(args.k or (10, 50)))
    if ks[0] < 1 or args.max_chars < 1:
        ap.error("--k and --max-chars must be positive")
    with dbmod.connect(args.dsn) as conn:
        report = measure(conn, args.conversation, args.ability, ks, args.max_chars)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    cols = [f"{name} @{k}" for name in ("question", "answer") for k in ks]
    print("| ability | n | " + " | ".join(cols) + " |")
    print("|---|---" + "|---" * len(cols) + "|")
    for ability, row in report["table"].items():
        vals = [row[f"{c.split()[0]}_hit{c.split()[1]}"] for c in cols]
        print(f"| {ability} | {row['n']} | " + " | ".join(f"{v:.3f}" for v in vals) + " |")
    if report["no_answer"]:
        print(f"\n{report['no_answer']} questions without an answer left out", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
