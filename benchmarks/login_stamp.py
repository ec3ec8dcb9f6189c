"""What checking the login before every insert (migration 029) costs a writer's load.

    nice -n 19 .venv/bin/python benchmarks/login_stamp.py [PATH] [--rounds 2] [--json]

Since 029 every donto table has a statement-level BEFORE INSERT trigger (login_guard) that,
for a session that is not the owner's, checks which role the login name stands for and
binds it on first use (``donto._session_login``). In one scratch database and one run:
  1. per call: ``donto._session_login()`` against ``session_user`` over N rows, for a
     writer's session (``SET SESSION AUTHORIZATION``);
  2. per load: one BEAM conversation (default 500K/13) recorded by the writer (revision,
     turns, questions, projection A with lexical vectors, standing memory) under a new
     document IRI each time, with the guards enabled and disabled, alternately, ROUNDS
     times each.
Prints microseconds per call, rows filed per load and load wall times (medians).
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
from _common import SHARED_BEAM, machine, scratch_database  # noqa: E402

from donto_pg import beam, loader, migrate  # noqa: E402
from donto_pg import db as dbmod  # noqa: E402

WRITER = "bench_stamp_writer"
STAMPED = ("select sum(n) from (select count(*) as n from donto.statement union all "
           "select count(*) from donto.x_turn_key union all select count(*) from "
           "donto.projection union all select count(*) from donto.revision) as t")


def per_call(conn: psycopg.Connection, expr: str, n: int) -> float:
    t = time.perf_counter()
    conn.execute(f"select count({expr}) from generate_series(1, %s)", (n,))  # noqa: S608
    return (time.perf_counter() - t) / n * 1e6


def set_guards(conn: psycopg.Connection, enabled: bool) -> None:
    """Every login_guard trigger enabled (always) or disabled, as the owner."""
    conn.execute("reset session authorization")
    conn.execute(f"select set_config('{migrate.ALLOW_DDL}', 'on', true)")
    tables = [r[0] for r in conn.execute(
        "select tgrelid::regclass::text from pg_trigger where tgname = 'login_guard'")]
    for t in tables:
        conn.execute(f"alter table {t} {'enable always' if enabled else 'disable'} "
                     "trigger login_guard")
    conn.commit()


def main(path: str = typer.Argument(str(SHARED_BEAM / "chats" / "500K" / "13")),
         rounds: int = typer.Option(2, help="Loads per setting, alternating."),
         calls: int = typer.Option(200_000, help="Rows for the per-call figure."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    conv = next(beam.iter_beam(path))
    out: dict[str, object] = {"conversation": conv.conversation_id, "machine": machine()}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        conn.execute(f"drop role if exists {WRITER}")
        conn.execute(f"create role {WRITER} in role donto_writer")
        conn.commit()
        conn.execute(f"set session authorization {WRITER}")
        conn.execute("select donto._session_login()")  # a writer's first call binds
        calls_us = {"session_user": per_call(conn, "session_user", calls),
                    "donto._session_login()": per_call(conn, "donto._session_login()", calls)}
        conn.commit()
        out["writer_us_per_call"] = {k: round(v, 2) for k, v in calls_us.items()}
        times: dict[str, list[float]] = {"guards": [], "no guards": []}
        rows = 0
        for i in range(rounds * 2):
            setting = list(times)[(i + i // 2) % 2]  # guards, none, none, guards, ...
            set_guards(conn, setting == "guards")
            conn.execute(f"set session authorization {WRITER}")
            before = conn.execute(STAMPED).fetchone()[0]
            t = time.perf_counter()
            loader.record_conversation(conn, conv, f"bench:stamp/{i}", {"source": "bench"})
            times[setting].append(time.perf_counter() - t)
            rows = int(conn.execute(STAMPED).fetchone()[0] - before)
            conn.commit()
        set_guards(conn, True)
        conn.execute("reset session authorization")
        conn.commit()
    with psycopg.connect(dbmod.resolve_dsn(dsn), autocommit=True) as admin:
        admin.execute(f"drop role {WRITER}")
    out["rows_filed_per_load"] = rows
    out["load_seconds_median"] = {k: round(statistics.median(v), 2) for k, v in times.items()}
    out["load_seconds"] = {k: [round(x, 2) for x in v] for k, v in times.items()}
    if as_json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k}: {v}")


if __name__ == "__main__":
    typer.run(main)
