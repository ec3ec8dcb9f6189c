"""What an up-to-date `donto-pg migrate` costs, and what it makes readers wait for.

    nice -n 5 .venv/bin/python benchmarks/migrate_noop.py [--rounds 5] [--json]

In one scratch database and one run, alternating, ROUNDS times each:
  - ``migrate()`` on a database that records its sql/ as applied (it skips sql/);
  - ``migrate(repair=True)``, which runs sql/ again (what every migrate did before).
Then, with a reader's transaction left open on a donto table, each way again with
``lock_wait`` 2 s: whether it finishes, and how long a second reader's query of that
table waits meanwhile (replacing a trigger locks its table, and queries queue behind
the lock). Prints seconds (medians).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import machine, scratch_database  # noqa: E402

from donto_pg import migrate  # noqa: E402

WAYS = {"skip (recorded as applied)": False, "repair (runs sql/ again)": True}


def timed(url: str, repair: bool, lock_wait: float = 60.0) -> tuple[float, str]:
    with psycopg.connect(url) as conn:
        t = time.perf_counter()
        try:
            migrate.migrate(conn, repair=repair, lock_wait=lock_wait)
            outcome = "done"
        except migrate.MigrationError:
            outcome = "gave up (lock wait)"
        return time.perf_counter() - t, outcome


def reader_wait(url: str, repair: bool) -> dict[str, object]:
    """A reader holds a donto table open; migrate runs; a second reader queries the table
    while it does: how long that query took."""
    with psycopg.connect(url) as holder, psycopg.connect(url) as second:
        holder.execute("select count(*) from donto.statement")  # left open
        result: dict[str, object] = {}
        run = threading.Thread(target=lambda: result.update(
            zip(("migrate_s", "migrate"), timed(url, repair, lock_wait=2.0), strict=True)))
        run.start()
        time.sleep(0.5)  # migrate is waiting by now, if it waits at all
        t = time.perf_counter()
        second.execute("select count(*) from donto.statement")
        result["second_reader_s"] = round(time.perf_counter() - t, 4)
        second.rollback()
        run.join()
        holder.rollback()
        return result


def main(rounds: int = typer.Option(5, help="Measurements per way, alternating."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    out: dict[str, object] = {"rounds": rounds, "machine": machine()}
    times: dict[str, list[float]] = {w: [] for w in WAYS}
    with scratch_database(dsn) as url:
        for _ in range(rounds):
            for way, repair in WAYS.items():
                times[way].append(timed(url, repair)[0])
        out["seconds"] = {w: round(statistics.median(t), 4) for w, t in times.items()}
        out["with_an_open_reader"] = {w: reader_wait(url, repair) for w, repair in WAYS.items()}
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for way, s in out["seconds"].items():
        typer.echo(f"{way:30} {s:8.4f} s")
    for way, r in out["with_an_open_reader"].items():
        typer.echo(f"open reader, {way:30} migrate {r['migrate']} in {r['migrate_s']:.2f} s; "
                   f"a second reader's query took {r['second_reader_s']:.3f} s")


if __name__ == "__main__":
    typer.run(main)
