"""What a writers' lock costs: a row of donto.writer_lock (migration 031) against the
advisory lock it replaced.

    nice -n 5 .venv/bin/python benchmarks/writer_lock.py [--calls 2000] [--json]

In one scratch database and one run, as the schema's owner (the donto functions take
their locks as the owner), N distinct keys per way, each way in a transaction of its own,
alternating, five times each, each measurement rolled back:
  - ``pg_advisory_xact_lock(2056, k)`` (before 031);
  - ``donto._lock('bench', k)`` for keys never taken (the row is inserted, then locked);
  - ``donto._lock('bench', k)`` again (the row is there: locked only).
Prints microseconds per lock (medians). A load takes about ten locks (document, turns,
recall, lexical, turn keys, standing, ...).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, scratch_database  # noqa: E402

WAYS = {
    "advisory (before 031)": "pg_advisory_xact_lock(2056, k)",
    "donto._lock, first time": "donto._lock('bench', k + %s)",
    "donto._lock, again": "donto._lock('bench', k)",
}


def per_lock(conn: psycopg.Connection, expr: str, n: int) -> float:
    """Microseconds per lock for N keys in one transaction, rolled back (which releases the
    locks and drops the rows a first time inserted, so the next round's are first too)."""
    t = time.perf_counter()
    conn.execute(f"select count(*) from (select {expr} from generate_series(1, %s) as k) as x",
                 (n, n) if "%s" in expr else (n,))
    dt = time.perf_counter() - t
    conn.rollback()
    return dt / n * 1e6


def main(calls: int = typer.Option(2_000, help="Locks per measurement (an advisory lock "
                                   "takes a slot of the server's lock table)."),
         rounds: int = typer.Option(5, help="Measurements per way, alternating."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    out: dict[str, object] = {"calls": calls, "machine": machine()}
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        # the keys "again" takes exist before any measurement; "first time" takes others
        conn.execute("select count(donto._lock('bench', k)) from generate_series(1, %s) as k",
                     (calls,))
        conn.commit()
        for r in range(rounds):
            for way, expr in (list(WAYS.items()) if r % 2 == 0 else list(WAYS.items())[::-1]):
                times[way].append(per_lock(conn, expr, calls))
        rows = conn.execute("select count(*) from donto.writer_lock").fetchone()[0]
    out["us_per_lock_median"] = {w: round(statistics.median(v), 2) for w, v in times.items()}
    out["us_per_lock"] = {w: [round(x, 2) for x in v] for w, v in times.items()}
    out["writer_lock_rows_after"] = rows
    if as_json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    typer.run(main)
