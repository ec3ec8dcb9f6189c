"""Ingest throughput: load a BEAM scale without embeddings; chunks/s for load+project.

    .venv/bin/python benchmarks/ingest.py [PATH] [--json]

PATH defaults to the full 100K sample beside the checkout (../shared/data/beam),
else the bundled examples. Runs in a scratch database on the embedded cluster
(or DONTO_DSN's server), dropped afterwards. Reports the first load and a
second (idempotent) load of the same files.
"""

from __future__ import annotations

import json
import sys
import time

import psycopg
import typer

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _common import default_beam, machine, scratch_database  # noqa: E402

from donto_pg import loader  # noqa: E402


def load_runs(url: str, path: str, jobs: int) -> list[dict[str, object]]:
    runs = []
    with psycopg.connect(url) as conn:
        for label in ("first load", "second load (idempotent)"):
            t = time.perf_counter()
            res = loader.load_beam(conn, path, jobs=jobs, connect=lambda: psycopg.connect(url))
            dt = time.perf_counter() - t
            chunks = sum(r.chunks for r in res)
            runs.append({"run": f"{label}, {jobs} job(s)", "conversations": sum(r.ok for r in res),
                         "failed": sum(not r.ok for r in res), "chunks": chunks,
                         "seconds": round(dt, 2), "chunks_per_s": round(chunks / dt, 1)})
        # projection A alone, in SQL: a second window size over every revision
        t = time.perf_counter()
        rows = conn.execute("select donto.project_recall(revision_id, 1000) "
                            "from donto.revision").fetchall()
        conn.commit()
        dt = time.perf_counter() - t
        n = sum(r[0] for r in rows)
        runs.append({"run": f"project_recall only (window 1000), {jobs} job(s)",
                     "conversations": len(rows), "chunks": n, "seconds": round(dt, 2),
                     "chunks_per_s": round(n / dt, 1)})
    return runs


def main(path: str = typer.Argument(None), as_json: bool = typer.Option(False, "--json"),
         jobs: list[int] = typer.Option([1, 2], help="Worker counts to compare (repeatable)."),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    path = path or default_beam("100K")
    runs = []
    for j in jobs:
        with scratch_database(dsn) as url:
            runs += load_runs(url, path, j)
    report = {"path": path, "machine": machine(), "runs": runs}
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"ingest benchmark on {path}  ({machine()['cores']} cores)")
    for r in runs:
        print(f"  {r['run']:<46} {r['conversations']:>3} conv  {r['chunks']:>7,} chunks  "
              f"{r['seconds']:>7.2f} s  {r['chunks_per_s']:>9,.1f} chunks/s")


if __name__ == "__main__":
    typer.run(main)
