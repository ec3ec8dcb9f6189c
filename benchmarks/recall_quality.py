"""Benchmark: LLM-free recall quality of donto.recall on the loaded BEAM probing questions.

Runs :func:`donto_pg.evaluate.eval_recall` against the database at DONTO_DSN
(or ``--dsn``; default: the embedded cluster under DONTO_HOME) and prints
hit@k per ability and arm, plus the random baseline. Load the questions
first, e.g. ``donto-pg load-beam <BEAM>/chats/100K``.

    python benchmarks/recall_quality.py                      # table
    python benchmarks/recall_quality.py --k 1 --k 5 --k 10   # the default ks
    python benchmarks/recall_quality.py --json               # machine-readable
    python benchmarks/recall_quality.py -c 100K/1 -c 100K/2  # some conversations
    python benchmarks/recall_quality.py --set recall_unit=chunk  # an ablation
"""

from __future__ import annotations

import argparse
import json
import sys

from donto_pg import db as dbmod
from donto_pg.evaluate import ARMS, eval_recall, format_table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=None, help="PostgreSQL DSN (default: DONTO_DSN or embedded)")
    ap.add_argument("--k", type=int, action="append", help="k to report (repeatable)")
    ap.add_argument("--arm", action="append", choices=ARMS, help="arm (repeatable)")
    ap.add_argument("-c", "--conversation", action="append", help="conversation id, e.g. 100K/1")
    ap.add_argument("--pool", type=int, default=None, help="candidate pool of donto.recall")
    ap.add_argument("--model", default=None,
                    help="embedding model name as registered (default: all-MiniLM-L6-v2); "
                         "embed with `donto-pg embed --model NAME` first")
    ap.add_argument("--no-random", action="store_true", help="leave out the random baseline")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="recall setting for this session, e.g. recall_unit=chunk, "
                         "recall_rrf_k=60 (repeatable; see donto.recall_by_vector)")
    ap.add_argument("--questions", action="store_true",
                    help="with --json: keep the per-question detail")
    ap.add_argument("--turn-recall", action="store_true",
                    help="also print the fraction of gold turns hit")
    ap.add_argument("--plot", help="write a hit@k PNG chart here (needs matplotlib)")
    ap.add_argument("--json", action="store_true", help="print JSON")
    args = ap.parse_args(argv)

    with dbmod.connect(args.dsn) as conn:
        for item in args.set:
            name, sep, value = item.partition("=")
            if not sep:
                ap.error(f"--set wants NAME=VALUE, got {item!r}")
            name = name if name.startswith("donto.") else f"donto.{name}"
            conn.execute("select set_config(%s, %s, false)", (name, value))
        conn.commit()
        report = eval_recall(conn, ks=args.k or (1, 5, 10), arms=args.arm or ARMS,
                             conversations=args.conversation, pool=args.pool,
                             model=args.model,
                             include_random=not args.no_random, seed=args.seed,
                             progress=None if args.json else _progress)
    if not args.json:
        print(file=sys.stderr)
    if args.plot:
        from donto_pg.plots import plot_recall

        plot_recall(report, args.plot)
    report["settings"] = args.set
    if args.json:
        if not args.questions:
            report.pop("questions")
        print(json.dumps(report, indent=2))
        return 0
    print(format_table(report))
    if args.turn_recall:
        print()
        print(format_table(report, "turn_recall"))
    ms = ", ".join(f"{a} {v} ms" for a, v in report["recall_ms_per_question"].items())
    print(f"\nconversations: {len(report['conversations'])}; recall per question: {ms}; "
          f"{report['seconds']} s in all")
    return 0


def _progress(done: int, total: int) -> None:
    print(f"\r{done}/{total} questions", end="", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
