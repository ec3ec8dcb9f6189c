"""Connections: ``--dsn`` > ``DONTO_DSN`` > the embedded cluster (started on demand)."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg

from donto_pg.cluster import Cluster


def resolve_dsn(dsn: str | None = None) -> str:
    """The DSN every command uses. Starts the embedded cluster when it is the one."""
    dsn = dsn or os.environ.get("DONTO_DSN")
    if dsn:
        return dsn
    cluster = Cluster.default()
    cluster.ensure_running()
    return cluster.dsn()


def shown(dsn: str) -> str:
    """DSN without its password, to print (psql asks for it, or reads PGPASSWORD/.pgpass)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(a DSN that does not parse)"
    if "password" not in params:
        return dsn
    params.pop("password")
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def client_options(dsn: str) -> dict[str, str]:
    """What our own connections add to DSN: to the embedded cluster, ``require_auth=none``.

    Its socket directory belongs to the server's OS user, who could put a socket of its
    own there and ask for a password: libpq would send PGPASSWORD (or a ~/.pgpass
    entry), meant for another server, to it. Peer authentication asks for nothing, so
    a connection to the embedded cluster answers no password request at all. (The DSN
    itself, printed by ``db url`` for psql, stays without it: the system's libpq 15 does
    not know the option; psycopg's libpq does.)"""
    from psycopg.conninfo import conninfo_to_dict

    try:
        host = conninfo_to_dict(dsn).get("host")
    except psycopg.ProgrammingError:
        return {}
    if host and os.path.isabs(str(host)) and Path(str(host)) == Cluster.default().sockdir:
        return {"require_auth": "none"}
    return {}


# Seconds to wait for a server to answer a connection (libpq's connect_timeout) unless the
# DSN, the caller or PGCONNECT_TIMEOUT sets it: a host that accepts and never answers
# would otherwise hold a command for minutes.
CONNECT_TIMEOUT = 10


def connect(dsn: str | None = None, *, autocommit: bool = False, vector: bool = True,
            **kwargs: object) -> psycopg.Connection:
    """Open a connection; with ``vector`` the pgvector type is registered when present.
    Its transactions are READ COMMITTED whatever the role's or database's default: the
    donto functions that write refuse any other level (donto._lock). A server that cannot
    be reached, or does not answer within ``CONNECT_TIMEOUT`` seconds, is a
    :class:`~donto_pg.errors.DatabaseError`; a DSN that does not parse an InputError."""
    from psycopg.conninfo import conninfo_to_dict

    from donto_pg.errors import DatabaseError, InputError, from_database

    target = resolve_dsn(dsn)
    try:
        params = conninfo_to_dict(target)
        if not ({"connect_timeout", "service"} & (params.keys() | kwargs.keys())
                or os.environ.get("PGCONNECT_TIMEOUT")):
            kwargs["connect_timeout"] = CONNECT_TIMEOUT
        kwargs = {**client_options(target), **kwargs}
        conn = psycopg.connect(target, autocommit=autocommit, **kwargs)
    except psycopg.ProgrammingError as exc:  # libpq could not parse it: nothing was tried
        raise InputError("the DSN is malformed", str(exc).strip(),
                         fix="give key=value pairs (host=... port=5432 dbname=... user=...) "
                             "or a URI (postgresql://user@host:5432/dbname, spaces and "
                             "symbols percent-encoded)") from exc
    except psycopg.errors.ConnectionTimeout as exc:
        waited = kwargs.get("connect_timeout") or params.get("connect_timeout") or \
            os.environ.get("PGCONNECT_TIMEOUT")
        raise DatabaseError("cannot connect to the database",
                            (f"the server did not answer within {waited} s" if waited
                             else "the server did not answer in time")
                            + f" ({shown(target)})",
                            fix="check the host and port; for a slow network give a longer "
                                "connect_timeout (connect_timeout=60 in the DSN, or "
                                "PGCONNECT_TIMEOUT=60)") from exc
    except psycopg.OperationalError as exc:
        raise from_database(exc) from exc
    conn.execute("set default_transaction_isolation = 'read committed'")
    if not autocommit:
        conn.commit()
    if vector:
        register_vector_if_present(conn)
    return conn


def register_vector_if_present(conn: psycopg.Connection) -> bool:
    from pgvector.psycopg import register_vector

    row = conn.execute("select 1 from pg_type where typname = 'vector'").fetchone()
    if row is not None:
        register_vector(conn)
    if not conn.autocommit:
        conn.commit()  # the connection is handed over idle
    return row is not None


def require_schema(conn: psycopg.Connection, *, end: bool = True) -> None:
    """Raise :class:`~donto_pg.errors.SchemaMissing` unless the donto schema is installed,
    :class:`~donto_pg.errors.SchemaVersion` when it is of another donto-pg version
    (``donto.sql_version()``; a release before it had none), and
    :class:`~donto_pg.errors.SchemaBehind` when it is this version but lacks some of its
    migrations (an earlier build of an unreleased version; migrate: not yet migrated).
    With END (default) the transaction its queries opened is committed; without it, it is
    the caller's (inside ``conn.transaction()``)."""
    from donto_pg import __version__
    from donto_pg.build import RELEASED
    from donto_pg.errors import SchemaBehind, SchemaMissing, SchemaVersion
    from donto_pg.migrate import status

    has, versioned, extension = conn.execute(
        "select to_regclass('donto.migration') is not null, "
        "to_regprocedure('donto.sql_version()') is not null, "
        "exists (select from pg_extension where extname = 'donto')").fetchone()
    version = None
    if has and versioned:
        version = conn.execute("select donto.sql_version()").fetchone()[0]
    elif extension:  # a release before donto.sql_version(): the extension's own version
        version = conn.execute("select extversion from pg_extension where extname = 'donto'"
                               ).fetchone()[0]
    st = status(conn) if has else None
    if end and not conn.autocommit:
        conn.commit()
    if st is None:
        raise SchemaMissing(f"{conn.info.dbname} has no donto.migration table")
    if version is None and st.applied:  # migrated by a release before sql_version()
        last = max(name for name, _ in st.applied)
        version = next((v for v, m in RELEASED.items() if m == last), None)
    if st.unknown:  # migrations of a later build, whatever sql_version() says
        raise SchemaVersion(version if version != __version__ else None, __version__,
                            extension, unknown=st.unknown)
    if version is not None and version != __version__:
        raise SchemaVersion(version, __version__, extension,
                            newer=_release(version) > _release(__version__))
    if st.pending:
        raise SchemaBehind(st.pending, __version__, extension)


def _release(version: str) -> tuple[int, ...]:
    """'0.10.1' -> (0, 10, 1), for ordering versions (anything else sorts first)."""
    try:
        return tuple(int(x) for x in version.split("."))
    except ValueError:
        return ()
