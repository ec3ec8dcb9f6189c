"""Benchmark: what turn blocks (or session heads) cost donto.recall, measured in one run.

Every probing question of the given (loaded, embedded) BEAM conversations that asks about
what the user brought up (it matches the default ``donto.recall_turns_pattern``) is asked
``-n`` times with turn blocks off (``recall_turns_chars = 0``) and on (the defaults),
alternating, so that both ways share the machine's state; prints the median milliseconds
of each way and their ratio (``--json``: machine-readable, with the machine).
``--feature heads``: the summary questions (``donto.recall_head_pattern``), session heads
off (``recall_head_weight = 0``) and on (the defaults):

    python benchmarks/recall_turns_cost.py -c 500K/13 -c 500K/14 -n 5
    python benchmarks/recall_turns_cost.py --feature heads -c 500K/13 -c 500K/14 -n 5
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine  # noqa: E402
from recall_sweep import DEFAULTS, _python_re  # noqa: E402

from donto_pg import db as dbmod  # noqa: E402

_QUESTIONS = """
select q.question, donto.recall_context_iri(d.iri)
from donto.probe_question as q
inner join donto.document as d on d.document_id = q.document_id
where d.iri = any(%s)
order by q.question_id
"""


# feature: (the pattern that picks its questions, the setting that turns it off and on)
FEATURES = {"turns": ("recall_turns_pattern", "recall_turns_chars"),
            "heads": ("recall_head_pattern", "recall_head_weight")}


def measure(conn, conversations: list[str], n: int, feature: str = "turns") -> dict:
    iris = [c if ":" in c else f"beam:{c}" for c in conversations]
    pattern_name, setting = FEATURES[feature]
    pattern = re.compile(_python_re(DEFAULTS[pattern_name]), re.I)
    asked = [(q, ctx) for q, ctx in conn.execute(_QUESTIONS, (iris,)).fetchall()
             if pattern.search(q)]
    if not asked:
        raise SystemExit(f"recall_turns_cost: no question of these conversations matches "
                         f"{pattern_name}")
    ms: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(n):
        for q, ctx in asked:
            for way, value in (("off", "0"), ("on", str(DEFAULTS[setting]))):
                conn.execute("select set_config('donto.' || %s, %s, false)", (setting, value))
                t0 = time.perf_counter()
                conn.execute("select count(*) from donto.recall(%s, k => 10, context => %s)",
                             (q, ctx)).fetchone()
                ms[way].append(1000 * (time.perf_counter() - t0))
    conn.rollback()
    off, on = statistics.median(ms["off"]), statistics.median(ms["on"])
    return {"feature": feature, "conversations": conversations, "questions": len(asked),
            "repeats": n,
            "median_ms_off": round(off, 1), "median_ms_on": round(on, 1),
            "ratio": round(on / off, 3), "machine": machine()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-c", "--conversation", action="append", required=True)
    ap.add_argument("-n", type=int, default=3, help="times each question is asked each way")
    ap.add_argument("--feature", choices=sorted(FEATURES), default="turns")
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with dbmod.connect(args.dsn) as conn:
        r = measure(conn, args.conversation, args.n, args.feature)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print(f"{r['questions']} questions x {r['repeats']}: median {r['median_ms_off']} ms "
              f"without {r['feature']}, {r['median_ms_on']} ms with them "
              f"(ratio {r['ratio']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
