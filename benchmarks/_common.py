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
            "platform": platform.platform()}


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
