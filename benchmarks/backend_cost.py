"""Benchmark: what one server connection (backend) pays for donto.recall.

The embedding model loads inside each PostgreSQL backend, on the first call that
embeds a query. This script measures, in a scratch database holding one small
conversation with its vectors (on the embedded cluster, or --dsn's server):

* the resident memory (VmRSS of the backend process, /proc/<pid>/status) of a new
  connection, after its first donto.recall, and after donto.warmup();
* the latency of the first donto.recall in a new connection (package and model
  load included), of the second one, and of the first one after donto.warmup();
* the time donto.warmup() itself takes.

Each figure is the median over --connections new connections. The client must run
on the server's host as a user that may read the backend's /proc entry (root, or
the server's OS user).

    python benchmarks/backend_cost.py                 # the embedded cluster
    python benchmarks/backend_cost.py --connections 5 --json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg

from donto_pg.embed import embed_pending

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, scratch_database  # noqa: E402

BODY = "".join(
    f"[user #{2 * i}] Day {i}: I moved the plants, called Ana in Porto and fixed the bike.\n"
    f"[assistant #{2 * i + 1}] Noted for day {i}: plants, Ana in Porto, the bike.\n"
    for i in range(200))
QUERY = "who lives in Porto?"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for backend {pid}")


def timed(conn: psycopg.Connection, sql: str) -> float:
    t = time.perf_counter()
    conn.execute(sql).fetchall()
    return (time.perf_counter() - t) * 1000


def one_connection(url: str, warm: bool) -> dict[str, float]:
    recall = f"select statement_id from donto.recall('{QUERY}', k => 5)"
    with psycopg.connect(url, autocommit=True) as conn:
        pid = conn.execute("select pg_backend_pid()").fetchone()[0]
        out = {"rss_new_mb": rss_mb(pid)}
        if warm:
            out["warmup_ms"] = timed(conn, "select donto.warmup()")
            out["rss_after_warmup_mb"] = rss_mb(pid)
            out["first_recall_after_warmup_ms"] = timed(conn, recall)
        else:
            out["first_recall_ms"] = timed(conn, recall)
            out["rss_after_recall_mb"] = rss_mb(pid)
            out["second_recall_ms"] = timed(conn, recall)
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", default=None)
    ap.add_argument("--connections", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with scratch_database(args.dsn) as url:
        with psycopg.connect(url) as conn:
            rev = conn.execute("select donto.register_revision('bench:backend', %s)",
                               (BODY,)).fetchone()[0]
            conn.execute("select donto.project_recall(%s)", (rev,))
            conn.commit()
            embed_pending(conn, progress=False)
        runs = [one_connection(url, warm) for warm in (False, True)
                for _ in range(args.connections)]
    keys = sorted({k for r in runs for k in r})
    result = {k: round(statistics.median(r[k] for r in runs if k in r), 1) for k in keys}
    report = {"connections": args.connections, "median": result, "machine": machine()}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for k in keys:
        print(f"{k:32} {result[k]:10.1f}")
    print(f"(median of {args.connections} new connections each; {machine()})")


if __name__ == "__main__":
    main()
