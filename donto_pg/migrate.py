"""Install and upgrade the donto schema: migrations, idempotent SQL, the extension.

Two kinds of SQL source (see sql/ and migrations/):

- ``sql/000-head.sql`` runs first: the schema and the migration ledger.
- ``migrations/NNN-topic.sql`` run exactly once per database (tables,
  indexes), recorded in ``donto.migration`` with the SHA-256 of the file.
  An applied migration whose file changed afterwards stops ``migrate`` with
  an error: released migrations are frozen; a change is a new file.
- ``sql/NNN-topic.sql`` (NNN > 000) run on every install and upgrade
  (``create or replace``: functions, views, triggers, grants), unless the database
  records that these very files were applied here already and that what they made is
  unchanged (:func:`sources_state`): replacing a view or a trigger locks its table, so an
  up-to-date ``migrate`` on a busy database would otherwise queue every reader behind it.

``migrate`` applies all of it in ONE transaction (all or nothing), under an
advisory lock so two deployments cannot interleave. The same sources build
``extension/donto--<version>.sql`` for ``CREATE EXTENSION donto``: that assembly,
and :func:`donto_pg.build.create_extension` that creates it in a database, are
:mod:`donto_pg.build`. What the server needs to import donto_pg (the python path
and the setting that records it) is :mod:`donto_pg.settings`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql as pgsql

from donto_pg import resources
from donto_pg.errors import DontoError
from donto_pg.settings import is_superuser, require_superuser, write_settings

ROOT = resources.PACKAGE_PARENT
SQL_DIR = resources.data_dir("sql")
MIGRATIONS_DIR = resources.data_dir("migrations")
EXTENSION_DIR = resources.data_dir("extension")
HEAD = "000-head.sql"
_NAME = re.compile(r"^(\d{3})-[a-z0-9-]+\.sql$")
# The migration lock: an advisory lock of the two-key form ('dont' in ASCII, 2055), whose
# space is apart from the one-key (bigint) locks an application takes.
_LOCK_KEY = (0x646F6E74, 2055)
_LOCK_NAME = f"advisory lock ({_LOCK_KEY[0]}, {_LOCK_KEY[1]})"
# The session setting that lets a transaction change the donto schema past the DDL guard
# (sql/095-ddl-guard.sql); migrate and the extension scripts set it for themselves.
ALLOW_DDL = "donto.allow_ddl"


class MigrationError(DontoError):
    """A migration cannot be applied safely (tampered, missing, or failing)."""


@dataclass(frozen=True)
class Source:
    name: str
    text: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()


@dataclass
class Status:
    applied: list[tuple[str, str]] = field(default_factory=list)  # (name, applied_at)
    pending: list[str] = field(default_factory=list)
    tampered: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # in the ledger, not on disk

    def as_dict(self) -> dict[str, object]:
        return {
            "applied": [{"name": n, "applied_at": t} for n, t in self.applied],
            "pending": self.pending,
            "tampered": self.tampered,
            "unknown": self.unknown,
        }


def _read_dir(directory: Path) -> list[Source]:
    if not directory.is_dir():
        raise MigrationError(
            f"SQL sources not found at {directory}",
            fix="this donto-pg install is incomplete: reinstall it (pip install donto-pg, "
                "or pip install -e . in a checkout)")
    out = []
    numbers = set()
    for p in sorted(directory.glob("*.sql")):
        m = _NAME.match(p.name)
        if not m:
            raise MigrationError(f"{p.name}: SQL sources are named NNN-topic.sql")
        if m.group(1) in numbers:
            raise MigrationError(
                f"{p.name}: number {m.group(1)} is used twice in {directory.name}/")
        numbers.add(m.group(1))
        out.append(Source(p.name, p.read_text(encoding="utf-8")))
    return out


def head() -> Source:
    return next(s for s in _read_dir(SQL_DIR) if s.name == HEAD)


def idempotent_sources() -> list[Source]:
    return [s for s in _read_dir(SQL_DIR) if s.name != HEAD]


def migrations(upto: str | None = None) -> list[Source]:
    """Run-once migrations in order (up to and including ``upto``, e.g. '001')."""
    out = _read_dir(MIGRATIONS_DIR)
    if upto is not None:
        out = [m for m in out if m.name[:3] <= upto[:3]]
    return out


def _ledger(conn: psycopg.Connection) -> dict[str, tuple[str, str]]:
    exists = conn.execute("select to_regclass('donto.migration') is not null").fetchone()[0]
    if not exists:
        return {}
    rows = conn.execute("select name, sha256, applied_at::text from donto.migration").fetchall()
    return {name: (sha, at) for name, sha, at in rows}


def status(conn: psycopg.Connection, upto: str | None = None) -> Status:
    ledger = _ledger(conn)
    st = Status()
    on_disk = migrations(upto)
    for m in on_disk:
        if m.name in ledger:
            st.applied.append((m.name, ledger[m.name][1]))
            if ledger[m.name][0] != m.sha256:
                st.tampered.append(m.name)
        else:
            st.pending.append(m.name)
    names = {m.name for m in migrations()}
    st.unknown = sorted(n for n in ledger if n not in names)
    return st


# The server extensions the schema needs, and the Debian/Ubuntu package of each for
# PostgreSQL {major} (pgvector is not packaged for 15 on Debian 12: built from source).
SERVER_EXTENSIONS = {"plpython3u": "postgresql-plpython3-{major}",
                     "vector": "postgresql-{major}-pgvector (pgvector 0.8, or built from its "
                               "source)"}


def _create_extension(conn: psycopg.Connection, name: str, package: str) -> None:
    """CREATE EXTENSION IF NOT EXISTS NAME; a server without its files ("is not
    available", 0A000; 58P01 "could not open" elsewhere) is told which package its host
    lacks."""
    try:
        with conn.transaction():
            conn.execute(pgsql.SQL("create extension if not exists {}").format(
                pgsql.Identifier(name)))
    except (psycopg.errors.FeatureNotSupported, psycopg.errors.UndefinedFile) as exc:
        major = conn.info.server_version // 10000
        raise MigrationError(f"the server has no extension {name}",
                             exc.diag.message_primary or str(exc),
                             fix=f"install {package.format(major=major)} on the database "
                                 "host (README, Install into your own PostgreSQL), "
                                 "then run migrate again") from exc


def released_migrations() -> set[str]:
    """The migrations of released versions (pinned in migrations/SHA256SUMS)."""
    sums = MIGRATIONS_DIR / "SHA256SUMS"
    return {line.split()[1] for line in sums.read_text().splitlines() if line.strip()}


def _check(st: Status) -> None:
    from donto_pg import __version__

    released = released_migrations()
    frozen = [n for n in st.tampered if n in released]
    if frozen:
        raise MigrationError(
            "applied migration(s) changed since they were applied: " + ", ".join(frozen),
            "released migrations are frozen",
            fix="restore the file(s) as released and put the change in a new migration")
    if st.tampered:
        raise MigrationError(
            "the database was migrated by a development build of donto-pg "
            f"{__version__}: its migration(s) {', '.join(st.tampered)} changed since",
            "an unreleased version has no upgrade path between its builds",
            fix="use the donto-pg build the database was made with, or load its "
                "conversations into a new database migrated by this one")
    if st.unknown:
        raise MigrationError(
            "the database has migration(s) this donto-pg does not know: "
            + ", ".join(st.unknown), "it was migrated by a newer donto-pg",
            fix="install the donto-pg version that migrated it (pip install -U donto-pg)")


# What the idempotent sql/ depends on besides its text: where it ran (a restore into
# another cluster or database, pg_upgrade), as whom (it grants to current_user), the roles
# it grants to (dropped and made again: their grants are gone), and the extensions it uses.
_PLACE = """
select pg_catalog.concat_ws('/', current_user,
    (select oid from pg_catalog.pg_database where datname = pg_catalog.current_database()),
    (select system_identifier from pg_catalog.pg_control_system()),
    pg_catalog.current_setting('server_version_num'),
    (select pg_catalog.string_agg(rolname || '=' || oid, ',' order by rolname)
     from pg_catalog.pg_roles where rolname in ('donto_reader', 'donto_writer')),
    (select pg_catalog.string_agg(extname || '=' || extversion, ',' order by extname)
     from pg_catalog.pg_extension))
"""
_STATE_KEY = "sql_state"
# What sql/ makes, as the catalog has it now: functions (text, settings, owner, grants),
# relations (kind, grants, comments, view text), column grants and comments, triggers (and
# whether they fire), event triggers, the schemas' grants. A hand-made change, a restore
# in place without grants (pg_restore --clean --no-acl), an older donto-pg's migrate of
# the same version or a dropped function makes it differ from what migrate recorded, and
# then sql/ runs again. (Indexes are not in it: recall builds some as contexts grow.)
_CATALOG = """
select pg_catalog.md5(pg_catalog.string_agg(x, E'\n' order by x)) from (
    select 'f ' || p.oid::regprocedure::text || ' ' || pg_catalog.md5(p.prosrc) || ' '
           || p.provolatile::text || p.prosecdef::text || ' ' || l.lanname || ' '
           || p.proowner::regrole::text || ' '
           || coalesce(pg_catalog.array_to_string(p.proconfig, ','), '') || ' '
           || coalesce(p.proacl::text, '') as x
    from pg_catalog.pg_proc as p inner join pg_catalog.pg_language as l on p.prolang = l.oid
    where p.pronamespace in ('donto'::regnamespace, 'donto_guard'::regnamespace)
    union all
    select 'r ' || c.oid::regclass::text || ' ' || c.relkind::text || ' '
           || c.relowner::regrole::text
           || ' ' || coalesce(c.relacl::text, '') || ' '
           || coalesce(pg_catalog.obj_description(c.oid, 'pg_class'), '') || ' '
           || case when c.relkind = 'v' then pg_catalog.md5(pg_catalog.pg_get_viewdef(c.oid))
                   else '' end
    from pg_catalog.pg_class as c
    where c.relnamespace = 'donto'::regnamespace and c.relkind <> 'i'
    union all
    select 'a ' || a.attrelid::regclass::text || '.' || a.attname || ' '
           || coalesce(a.attacl::text, '') || ' '
           || coalesce(pg_catalog.col_description(a.attrelid, a.attnum), '')
    from pg_catalog.pg_attribute as a inner join pg_catalog.pg_class as c on a.attrelid = c.oid
    where c.relnamespace = 'donto'::regnamespace and c.relkind in ('r', 'v') and a.attnum > 0
          and not a.attisdropped
    union all
    select 't ' || t.tgrelid::regclass::text || ' ' || pg_catalog.pg_get_triggerdef(t.oid)
           || ' ' || t.tgenabled::text
    from pg_catalog.pg_trigger as t inner join pg_catalog.pg_class as c on t.tgrelid = c.oid
    where c.relnamespace = 'donto'::regnamespace and not t.tgisinternal
    union all
    select 'e ' || e.evtname || ' ' || e.evtevent || ' ' || e.evtenabled::text || ' '
           || e.evtfoid::regprocedure::text
    from pg_catalog.pg_event_trigger as e
    union all
    select 'n ' || n.nspname || ' ' || coalesce(n.nspacl::text, '')
    from pg_catalog.pg_namespace as n where n.nspname in ('donto', 'donto_guard')
) as catalog
"""


def sources_state(conn: psycopg.Connection) -> str:
    """The SHA-256 of the sql/ sources, of the place they run in (database, cluster, role,
    the donto roles, the extensions) and of what they made there (the catalog's donto
    functions, relations, triggers and grants). ``migrate`` records it in donto.setting
    'sql_state' after running sql/, and runs sql/ again only when it changed (or when
    asked to repair)."""
    place = conn.execute(_PLACE).fetchone()[0]
    made = conn.execute(_CATALOG).fetchone()[0] if conn.execute(
        "select to_regnamespace('donto_guard') is not null").fetchone()[0] else "-"
    h = hashlib.sha256(f"{place}\0{made}".encode())
    for s in [head(), *idempotent_sources()]:
        h.update(f"\0{s.name}\0{s.sha256}".encode())
    return h.hexdigest()


def _sources_current(conn: psycopg.Connection) -> bool:
    """Whether the database records that these sql/ sources ran here, as they are now."""
    if conn.execute("select to_regclass('donto.setting') is null").fetchone()[0]:
        return False
    return conn.execute("select exists (select 1 from donto.setting where key = %s "
                        "and value = to_jsonb(%s::text))",
                        (_STATE_KEY, sources_state(conn))).fetchone()[0]


def _up_to_date(conn: psycopg.Connection) -> bool:
    """No migration pending, and the database records that these sql/ sources ran here and
    made what the catalog has now: migrate has nothing to do (not even sql/000-head.sql,
    whose comments sql/ may change)."""
    st = status(conn)
    _check(st)
    return not st.pending and _sources_current(conn)


ALREADY = "up to date: sql/ already applied here (--repair applies it again)"


def plan(conn: psycopg.Connection, upto: str | None = None, *,
         repair: bool = False) -> list[Source]:
    """The SQL migrate would run, in order (for --dry-run; [] when it has nothing to do)."""
    # (sources_state reads the cluster's identity, which only a superuser may; migrate
    # itself must be one.)
    if upto is None and not repair and is_superuser(conn) and _up_to_date(conn):
        return []
    st = status(conn, upto)
    _check(st)
    by_name = {m.name: m for m in migrations(upto)}
    return [head(), *(by_name[n] for n in st.pending),
            *([] if upto is not None else idempotent_sources())]


def _extension_installed(conn: psycopg.Connection) -> bool:
    return conn.execute("select 1 from pg_extension where extname = 'donto'").fetchone() is not None


def _describe(rows: list[tuple]) -> str:
    """Sessions as 'pid 123 (role mallory, application 'psql', idle in transaction since
    ...)', comma-separated; the application name quoted, since any client sets it."""
    return ", ".join(f"pid {pid} (role {user}, application {repr(app) if app else '-'}, "
                     f"{state}{f' since {start:%Y-%m-%d %H:%M:%S}' if start else ''})"
                     for pid, user, app, state, start in rows) or "a session that has ended"


_SESSIONS = ("select distinct a.pid, a.usename, a.application_name, a.state, a.xact_start "
             "from pg_locks as l inner join pg_stat_activity as a on a.pid = l.pid "
             "where l.granted and a.pid <> pg_backend_pid() and {} order by a.pid")


def _lock_holders(conn: psycopg.Connection) -> str:
    """Who holds the migration lock."""
    return _describe(conn.execute(_SESSIONS.format(
        "l.locktype = 'advisory' and l.classid = %s and l.objid = %s and l.objsubid = 2 "
        "and l.database = (select oid from pg_database where datname = current_database())"),
        _LOCK_KEY).fetchall())


def _schema_lock_holders(conn: psycopg.Connection) -> str:
    """Who holds a lock on a relation of schema donto (a transaction left open there keeps
    migrate's DDL waiting)."""
    return _describe(conn.execute(_SESSIONS.format(
        "l.locktype = 'relation' and l.relation in (select c.oid from pg_class as c "
        "inner join pg_namespace as n on n.oid = c.relnamespace where n.nspname = 'donto')")
    ).fetchall())


def _lock(conn: psycopg.Connection, wait: float, step: Callable[[str], None]) -> None:
    """Take the migration lock (an advisory lock: it is taken before the schema exists),
    waiting at most WAIT seconds, and bound every later lock wait of this transaction by
    WAIT too (lock_timeout): migrate's DDL waits for every open transaction that touched
    the schema, and every query of the schema queues behind it meanwhile. Any role that may
    connect can take an advisory key, so a wait names who holds it, and a wait past WAIT is
    an error that says so."""
    ms = max(1, round(wait * 1000))
    conn.execute("select set_config('lock_timeout', %s, true)", (f"{ms}ms",))
    if conn.execute("select pg_try_advisory_xact_lock(%s, %s)", _LOCK_KEY).fetchone()[0]:
        return
    step(f"waiting up to {wait:g} s for the migration lock, held by {_lock_holders(conn)}")
    try:
        conn.execute("select pg_advisory_xact_lock(%s, %s)", _LOCK_KEY)
    except psycopg.errors.LockNotAvailable as exc:
        conn.rollback()
        raise MigrationError(
            f"the migration lock ({_LOCK_NAME}) is still held after {wait:g} s, "
            f"by {_lock_holders(conn)}: another migrate, or a session holding that key. End it "
            "(select pg_terminate_backend(<pid>)) or wait for it, then run migrate again"
        ) from exc


def _failed(conn: psycopg.Connection, what: str, exc: psycopg.Error,
            wait: float) -> MigrationError:
    """The error of a file that failed; a lock wait past WAIT, or a deadlock (the DDL of
    sql/ locks the tables one after another, so a busy reader can deadlock with it), names
    who holds locks on the schema."""
    if isinstance(exc, psycopg.errors.DeadlockDetected):
        why = "deadlocked with another session over a donto table"
    elif isinstance(exc, psycopg.errors.LockNotAvailable):
        why = f"waited more than {wait:g} s for a lock on a donto table"
    else:
        return MigrationError(f"{what} failed: {exc}")
    conn.rollback()
    return MigrationError(
        f"{what} {why}, held by {_schema_lock_holders(conn)}: end those transactions "
        "(select pg_terminate_backend(<pid>)) or let them finish, then run migrate again "
        "(nothing was changed)")


def migrate(conn: psycopg.Connection, *, upto: str | None = None,
            paths: list[str] | None = None,
            on_step: Callable[[str], None] | None = None,
            lock_wait: float = 60.0,
            on_wait: Callable[[str], None] | None = None,
            repair: bool = False) -> list[str]:
    """Install or upgrade the donto schema in the connected database.

    Returns the names of the migrations applied now ([] when up to date).
    Runs in one transaction; safe to run again (a no-op for the data).
    With UPTO (tests of upgrades) only the migrations up to it run: the
    idempotent sql/ belongs to the newest version and may need later tables.
    ON_STEP hears the name of each file before it runs (progress). When another session
    holds the migration lock, ON_WAIT (default: ON_STEP) hears who, and migrate waits at
    most LOCK_WAIT seconds for it, then stops with an error naming the holder; so for
    every other lock (a table of the schema that an open transaction has touched), and
    then the error names the sessions holding locks on the schema.
    Nothing runs when no migration is pending and the database records that the same
    sql/ ran here and made what the catalog has now (:func:`sources_state`): an
    up-to-date migrate locks no donto table. REPAIR runs sql/ all the same.
    """
    step = on_step or (lambda _name: None)
    if not 0 <= lock_wait <= 2_147_483:
        raise MigrationError(f"lock_wait must be 0 to 2147483 seconds, not {lock_wait}")
    if conn.autocommit:
        raise MigrationError("migrate needs a connection with autocommit off")
    try:
        _lock(conn, lock_wait, on_wait or step)
        # The DDL guard (sql/095-ddl-guard.sql) lets this transaction, and only it, change
        # the donto schema.
        conn.execute(f"select set_config('{ALLOW_DDL}', 'on', true)")
        if _extension_installed(conn):
            raise MigrationError(
                "this database uses CREATE EXTENSION donto: upgrade it with "
                "ALTER EXTENSION donto UPDATE instead of donto-pg migrate"
            )
        require_superuser(conn, "donto-pg migrate", MigrationError)
        if upto is None and not repair and _up_to_date(conn):
            step(ALREADY)
            write_settings(conn, paths)
            conn.commit()
            return []
        for ext, package in SERVER_EXTENSIONS.items():
            _create_extension(conn, ext, package)
        try:
            conn.execute(head().text)
        except psycopg.Error as exc:
            raise _failed(conn, f"sql/{HEAD}", exc, lock_wait) from exc
        st = status(conn, upto)
        _check(st)
        by_name = {m.name: m for m in migrations(upto)}
        for name in st.pending:
            m = by_name[name]
            step(f"migrations/{name}")
            try:
                conn.execute(m.text)
            except psycopg.Error as exc:
                raise _failed(conn, f"migration {name}", exc, lock_wait) from exc
            conn.execute("insert into donto.migration (name, sha256) values (%s, %s)",
                         (name, m.sha256))
        write_settings(conn, paths)
        if upto is None:  # the sql/ of an older version may need later tables
            _run_sources(conn, step, lock_wait)
        conn.commit()
        return st.pending
    except BaseException:
        conn.rollback()
        raise


def _run_sources(conn: psycopg.Connection, step: Callable[[str], None], wait: float) -> None:
    """Run the idempotent sql/, then record what it made here (:func:`sources_state`)."""
    for s in idempotent_sources():
        step(f"sql/{s.name}")
        try:
            conn.execute(s.text)
        except psycopg.Error as exc:
            raise _failed(conn, f"sql/{s.name}", exc, wait) from exc
    conn.execute("insert into donto.setting (key, value) values (%s, to_jsonb(%s::text)) "
                 "on conflict (key) do update set value = excluded.value, set_at = now()",
                 (_STATE_KEY, sources_state(conn)))


def stale_logins(conn: psycopg.Connection) -> list[str]:
    """After a migrate, as the owner: take back this login's own name if it stood for an
    owner's role before (``donto._session_login``; a restore onto another cluster), then
    describe the login names that stand for roles which no longer have them and that a
    role has now (``donto.stale_logins``), for the owner to check and adopt."""
    conn.execute("select donto._session_login()")
    conn.commit()
    rows = conn.execute("select login_role, renamed_to, was_owner is distinct from owner_now "
                        "from donto.stale_logins() where role_oid is not null").fetchall()
    conn.commit()
    return [name + (f" (renamed to {renamed})" if renamed else "")
            + (" (its standing changed: the owner's login then and a writer's now, or the "
               "reverse, or unknown)" if changed else "")
            for name, renamed, changed in rows]
