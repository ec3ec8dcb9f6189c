"""Ingest throughput: load a BEAM scale without embeddings; chunks/s for load+project.

    .venv/bin/python benchmarks/ingest.py [PATH] [--json]

PATH defaults to the full 100K sample beside the checkout (../shared/data/beam),
else the bundled examples. Runs in scratch databases on the embedded cluster
(or DONTO_DSN's server), dropped afterwards. Reports load + projection with
the full-text vectors deferred and then built by donto.index_lexical (as
embeddings are), load-beam's single pass that does both, a second
(idempotent) load, and project_recall alone with and without the vectors.
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import typer

sys.path.insert(0, __import__("os").path.dirname(__file__))
from _common import default_beam, machine, scratch_database  # noqa: E402

from donto_pg import loader  # noqa: E402


def _timed_load(url: str, path: str, jobs: int, lexical: bool) -> tuple[list, float]:
    with psycopg.connect(url) as conn:
        t = time.perf_counter()
        res = loader.load_beam(conn, path, jobs=jobs, lexical=lexical,
                               connect=lambda: psycopg.connect(url))
        return res, time.perf_counter() - t


def _row(run: str, res: list, seconds: float, chunks: int | None = None) -> dict[str, object]:
    chunks = sum(r.chunks for r in res) if chunks is None else chunks
    return {"run": run, "conversations": sum(r.ok for r in res),
            "failed": sum(not r.ok for r in res), "chunks": chunks,
            "seconds": round(seconds, 2), "chunks_per_s": round(chunks / seconds, 1)}


def index_lexical(url: str, jobs: int) -> tuple[int, float]:
    """donto.index_lexical over every revision, JOBS connections at a time."""
    with psycopg.connect(url) as conn:
        revs = [r[0] for r in conn.execute("select revision_id from donto.revision")]

    def one(rev: int) -> int:
        with psycopg.connect(url) as c:
            return c.execute("select donto.index_lexical(%s)", (rev,)).fetchone()[0]

    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        n = sum(pool.map(one, revs))
    return n, time.perf_counter() - t


def load_runs(dsn: str | None, path: str, jobs: int) -> list[dict[str, object]]:
    """Two scratch databases: load+project with the full-text vectors deferred, then
    donto.index_lexical; and load-beam's own single pass (both at once), twice."""
    runs = []
    with scratch_database(dsn) as url:
        res, dt = _timed_load(url, path, jobs, lexical=False)
        runs.append(_row(f"load + project (lexical deferred), {jobs} job(s)", res, dt))
        n, dt2 = index_lexical(url, jobs)
        runs.append(_row(f"index_lexical of those chunks, {jobs} job(s)", res, dt2, n))
        runs.append(_row(f"  = load + project + lexical, {jobs} job(s)", res, dt + dt2))
    with scratch_database(dsn) as url:
        res, dt = _timed_load(url, path, jobs, lexical=True)
        runs.append(_row(f"load-beam --no-embed (one pass), {jobs} job(s)", res, dt))
        res, dt = _timed_load(url, path, jobs, lexical=True)
        runs.append(_row(f"second load (idempotent), {jobs} job(s)", res, dt))
        # projection A alone, in SQL: a second window size over every revision
        with psycopg.connect(url) as conn:
            for lexical in (True, False):  # true first: it vectors only its own chunks
                t = time.perf_counter()
                rows = conn.execute(
                    "select donto.project_recall(revision_id, %s, lexical => %s) "
                    "from donto.revision", (999 + lexical, lexical)).fetchall()
                conn.commit()
                dt = time.perf_counter() - t
                n = sum(r[0] for r in rows)
                runs.append({"run": f"project_recall only, lexical => {str(lexical).lower()}, "
                                    "1 session",
                             "conversations": len(rows), "failed": 0, "chunks": n,
                             "seconds": round(dt, 2), "chunks_per_s": round(n / dt, 1)})
    return runs


def main(path: str = typer.Argument(None), as_json: bool = typer.Option(False, "--json"),
         jobs: list[int] = typer.Option([1, 2], help="Worker counts to compare (repeatable)."),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    path = path or default_beam("100K")
    runs = []
    for j in jobs:
        runs += load_runs(dsn, path, j)
    report = {"path": path, "machine": machine(), "runs": runs}
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"ingest benchmark on {path}  ({machine()['cores']} cores)")
    for r in runs:
        print(f"  {r['run']:<50} {r['conversations']:>3} conv  {r['chunks']:>7,} chunks  "
              f"{r['seconds']:>7.2f} s  {r['chunks_per_s']:>9,.1f} chunks/s")


if __name__ == "__main__":
    typer.run(main)
