"""Shared helpers for the benchmark scripts: a scratch database and machine facts."""

from __future__ import annotations

import os
import platform
import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg

from donto_pg import db as dbmod
from donto_pg import migrate

SHARED_BEAM = Path(__file__).resolve().parents[2] / "shared" / "data" / "beam"


def default_beam(scale: str = "100K") -> str:
    """The full BEAM sample if it is beside the checkout, else the bundled examples."""
    full = SHARED_BEAM / "chats" / scale
    if full.is_dir():
        return str(full)
    return str(Path(__file__).resolve().parents[1] / "examples" / "beam" / "chats" / scale)


def machine() -> dict[str, object]:
    return {"cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def prioritize(nice: int | None, conn: psycopg.Connection | None = None) -> None:
    """Run this process (CONN: its server backend) at NICE, also as the nice of its
    scheduler autogroup. On Linux with autogroups (sched_autogroup_enabled) the CPU is
    shared between sessions first and nice orders processes only inside one; every
    PostgreSQL backend is a session of its own (setsid), so a backend's nice alone does
    not order it against other sessions' work. NICE < 0 needs root. None: leave as is."""
    if nice is None:
        return
    pid = 0 if conn is None else conn.execute("select pg_backend_pid()").fetchone()[0]
    if conn is not None and not conn.autocommit:
        conn.commit()
    os.setpriority(os.PRIO_PROCESS, pid, nice)
    group = Path(f"/proc/{pid or 'self'}/autogroup")
    if group.exists():
        group.write_text(str(nice))


@contextmanager
def scratch_database(dsn: str | None = None, keep: bool = False):
    """A new, migrated database on the server (embedded by default); dropped afterwards."""
    base = dbmod.resolve_dsn(dsn)
    name = f"donto_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(base, autocommit=True) as admin:
        admin.execute(f'create database "{name}"')
    info = psycopg.conninfo.conninfo_to_dict(base)
    info["dbname"] = name
    url = psycopg.conninfo.make_conninfo(**info)
    try:
        with psycopg.connect(url) as conn:
            migrate.migrate(conn)
        yield url
    finally:
        if not keep:
            with psycopg.connect(base, autocommit=True) as admin:
                admin.execute(f'drop database if exists "{name}" with (force)')
