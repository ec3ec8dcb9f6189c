"""Benchmark: does recall on a changed conversation rank as recall on a fresh load?

A loaded, embedded BEAM conversation (``-c 500K/13``) is added again, through
``donto_pg.add_conversation``, as a document of its own (``chat:bench/changed/<id>``):
first with one character of its first user turn changed (same length), then as it is.
The second text does not extend the first, so it is a changed conversation: projecting it
retracts the first text's chunks and standing statements and records their projections in
``donto.projection_superseded`` (README, "Conversations that grow"). The probing
questions of the BEAM conversation are then asked (hybrid, k 10) of both the BEAM
document and the changed one; their gold turns are found in each revision by turn id.
Prints hit@1/5/10 and milliseconds per question for both (``--json``):

    python benchmarks/changed_conversation.py -c 500K/13 --data ../shared/data/beam/chats

Adding the two texts embeds them (about 15 minutes for a 500K conversation on two cores;
vectors cached earlier by the schema's owner are reused); a second run reuses them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

from donto_pg import api, beam
from donto_pg import db as dbmod
from donto_pg.evaluate import _QUESTIONS, EXCLUDED_ABILITIES, _hits, places
from donto_pg.loader import document_iri, recall_context

_RECALL = ("select revision_id, char_start, char_end, place "
           "from donto.recall(%s, k => 10, context => %s)")
_GOLD = ("select turn_id, header_start, char_end from donto.turn "
         "where revision_id = %s and turn_id = any(%s)")


def messages(conv: beam.Conversation) -> list[dict]:
    return [{"role": m.role, "content": m.content, "turn_id": m.turn_id, "session": m.session,
             "exchange": m.exchange, "date": m.date.isoformat() if m.date else None}
            for m in conv.messages]


def add_changed(conn, conv: beam.Conversation, iri: str) -> tuple[int, int]:
    """The edited text, then the text as it is, under IRI; their revision ids."""
    ms = messages(conv)
    i = next(j for j, m in enumerate(ms) if m["role"] == "user")
    text = ms[i]["content"]
    k = next(j for j, ch in enumerate(text) if ch.isalpha())
    edited = [dict(m) for m in ms]
    edited[i] = ms[i] | {"content": text[:k] + text[k].swapcase() + text[k + 1:]}
    first = api.add_conversation(conn, edited, iri)
    conn.commit()
    latest = api.add_conversation(conn, ms, iri)
    conn.commit()
    return first, latest


def score(conn, questions: list[tuple], context: str, revision: int) -> dict:
    hits = {1: 0, 5: 0, 10: 0}
    start = time.perf_counter()
    for q in questions:
        turns = sorted({int(t) for t, _, _ in q[7]})
        gold = [tuple(g) for g in conn.execute(_GOLD, (revision, turns))]
        found = _hits(places(conn.execute(_RECALL, (q[6], context)).fetchall()), revision, gold)
        for k in hits:
            hits[k] += any(found[:k])
        conn.rollback()
    ms = 1000 * (time.perf_counter() - start) / len(questions)
    return {f"hit@{k}": round(n / len(questions), 3) for k, n in hits.items()} | {
        "ms_per_question": round(ms, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: DONTO_DSN or embedded)")
    ap.add_argument("-c", "--conversation", required=True, help="loaded BEAM id, e.g. 500K/13")
    ap.add_argument("--data", required=True, help="BEAM chats directory (holds <scale>/<id>)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)
    path = Path(args.data) / args.conversation
    if not path.is_dir():
        ap.error(f"{path}: no such conversation directory")
    conv = dataclasses.replace(next(beam.iter_beam(path)), questions=[])
    iri = f"chat:bench/changed/{args.conversation}"
    with dbmod.connect(args.dsn) as conn:
        questions = [q for q in conn.execute(
            _QUESTIONS, {"convs": [document_iri(args.conversation)]}).fetchall()
            if q[4] not in EXCLUDED_ABILITIES and q[7]]
        if not questions:
            ap.error(f"{args.conversation}: not loaded (donto-pg load-beam first)")
        conn.commit()  # the API's writers take an idle connection
        first, latest = add_changed(conn, conv, iri)
        superseded = conn.execute(
            "select count(*) from donto.projection_superseded s join donto.projection p "
            "using (projection_id) where p.revision_id = %s", (first,)).fetchone()[0]
        fresh = questions[0]
        conn.execute("select donto.embed_query('load the model first')")  # not timed
        report = {"conversation": args.conversation, "questions": len(questions),
                  "revisions": [first, latest], "superseded_projections": superseded,
                  "fresh": score(conn, questions, fresh[2], fresh[3]),
                  "changed": score(conn, questions, recall_context(conn, iri), latest)}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.conversation}: {report['questions']} questions; revisions {first} -> "
          f"{latest}, {superseded} projections superseded")
    print("| document | hit@1 | hit@5 | hit@10 | ms per question |\n|---|---:|---:|---:|---:|")
    for name in ("fresh", "changed"):
        r = report[name]
        print(f"| {name} | {r['hit@1']:.3f} | {r['hit@5']:.3f} | {r['hit@10']:.3f} "
              f"| {r['ms_per_question']:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
