"""Install and upgrade the donto schema: migrations, idempotent SQL, the extension.

Two kinds of SQL source (see sql/ and migrations/):

- ``sql/000-head.sql`` runs first: the schema and the migration ledger.
- ``migrations/NNN-topic.sql`` run exactly once per database (tables,
  indexes), recorded in ``donto.migration`` with the SHA-256 of the file.
  An applied migration whose file changed afterwards stops ``migrate`` with
  an error: released migrations are frozen; a change is a new file.
- ``sql/NNN-topic.sql`` (NNN > 000) run on every install and upgrade
  (``create or replace``: functions, views, triggers, grants).

``migrate`` applies all of it in ONE transaction (all or nothing), under an
advisory lock so two deployments cannot interleave. The same sources build
``extension/donto--<version>.sql`` for ``CREATE EXTENSION donto``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from donto_pg import __version__

ROOT = Path(__file__).resolve().parent.parent
SQL_DIR = ROOT / "sql"
MIGRATIONS_DIR = ROOT / "migrations"
EXTENSION_DIR = ROOT / "extension"
HEAD = "000-head.sql"
_NAME = re.compile(r"^(\d{3})-[a-z0-9-]+\.sql$")
_LOCK_KEY = 2055
# The session setting that lets a transaction change the donto schema past the DDL guard
# (sql/095-ddl-guard.sql); migrate and the extension scripts set it for themselves.
ALLOW_DDL = "donto.allow_ddl"


class MigrationError(RuntimeError):
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
            f"SQL sources not found at {directory} (is donto-pg installed editable?)")
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


def python_path() -> list[str]:
    """Directories the server's Python needs to import donto_pg and its dependencies."""
    paths = [str(ROOT)]
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths()[key]
        if p not in paths:
            paths.append(p)
    return paths


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


def _check(st: Status) -> None:
    if st.tampered:
        raise MigrationError(
            "applied migration(s) changed since they were applied: "
            + ", ".join(st.tampered)
            + ". Released migrations are frozen: restore the file and put the change in a new "
            "migration."
        )
    if st.unknown:
        raise MigrationError(
            "the database has migration(s) this donto-pg does not know: " + ", ".join(st.unknown)
            + " (it was migrated by a newer version)"
        )


def plan(conn: psycopg.Connection, upto: str | None = None) -> list[Source]:
    """The SQL migrate would run, in order (for --dry-run)."""
    st = status(conn, upto)
    _check(st)
    by_name = {m.name: m for m in migrations(upto)}
    return [head(), *(by_name[n] for n in st.pending), *idempotent_sources()]


def _extension_installed(conn: psycopg.Connection) -> bool:
    return conn.execute("select 1 from pg_extension where extname = 'donto'").fetchone() is not None


def write_settings(conn: psycopg.Connection, paths: list[str] | None = None) -> None:
    conn.execute(
        "insert into donto.setting (key, value) values ('python_path', %s) "
        "on conflict (key) do update set value = excluded.value, set_at = now() "
        "where donto.setting.value is distinct from excluded.value",
        (json.dumps(paths if paths is not None else python_path()),),
    )


def migrate(conn: psycopg.Connection, *, upto: str | None = None,
            paths: list[str] | None = None) -> list[str]:
    """Install or upgrade the donto schema in the connected database.

    Returns the names of the migrations applied now ([] when up to date).
    Runs in one transaction; safe to run again (a no-op for the data).
    With UPTO (tests of upgrades) only the migrations up to it run: the
    idempotent sql/ belongs to the newest version and may need later tables.
    """
    if conn.autocommit:
        raise MigrationError("migrate needs a connection with autocommit off")
    try:
        conn.execute("select pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        # The DDL guard (sql/095-ddl-guard.sql) lets this transaction, and only it, change
        # the donto schema.
        conn.execute(f"select set_config('{ALLOW_DDL}', 'on', true)")
        if _extension_installed(conn):
            raise MigrationError(
                "this database uses CREATE EXTENSION donto: upgrade it with "
                "ALTER EXTENSION donto UPDATE instead of donto-pg migrate"
            )
        conn.execute("create extension if not exists plpython3u")
        conn.execute("create extension if not exists vector")
        conn.execute(head().text)
        st = status(conn, upto)
        _check(st)
        by_name = {m.name: m for m in migrations(upto)}
        for name in st.pending:
            m = by_name[name]
            try:
                conn.execute(m.text)
            except psycopg.Error as exc:
                raise MigrationError(f"migration {name} failed: {exc}") from exc
            conn.execute("insert into donto.migration (name, sha256) values (%s, %s)",
                         (name, m.sha256))
        write_settings(conn, paths)
        for s in idempotent_sources() if upto is None else []:
            try:
                conn.execute(s.text)
            except psycopg.Error as exc:
                raise MigrationError(f"sql/{s.name} failed: {exc}") from exc
        conn.commit()
        return st.pending
    except BaseException:
        conn.rollback()
        raise


# -- the extension -------------------------------------------------------------

CONTROL = """\
# donto-pg: append-only, bitemporal memory substrate for long conversations
comment = 'donto-pg memory substrate: revisions, recall and extraction projections'
default_version = '{version}'
relocatable = false
requires = 'plpython3u, vector'
superuser = true
"""


# The released versions before this one, each with its last migration. Their
# extension/donto--<version>.sql (and update scripts into them) are frozen files;
# only this version's script and the update script from the last release are built.
RELEASED = {"0.1.0": "006-ab.sql", "0.2.0": "007-recall-lexical.sql"}

_CONFIG_DUMP = (
    "-- Let pg_dump keep the data of every table (extension member tables are otherwise\n"
    "-- dumped empty).\n"
    "do $$\ndeclare v regclass;\nbegin\n"
    "    for v in select c.oid::regclass from pg_catalog.pg_class as c\n"
    "        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid\n"
    "        where n.nspname = 'donto' and c.relkind = 'r'\n"
    "    loop\n        perform pg_catalog.pg_extension_config_dump(v, '');\n    end loop;\n"
    "end;\n$$;"
)


# The extension scripts open the DDL guard for themselves (ddl_command_end knows it runs
# in an extension script, sql_drop does not) and restore the session's value at the end.
_ALLOW_DDL_ON = (
    "select pg_catalog.set_config('donto._allow_ddl_was', "
    f"coalesce(pg_catalog.current_setting('{ALLOW_DDL}', true), ''), true);\n"
    f"select pg_catalog.set_config('{ALLOW_DDL}', 'on', true);"
)
_ALLOW_DDL_RESTORE = (
    f"select pg_catalog.set_config('{ALLOW_DDL}', "
    "pg_catalog.current_setting('donto._allow_ddl_was'), true);"
)


def _script(title: str, use: str, head_text: str | None, ms: list[Source]) -> str:
    parts = [title, f'\\echo Use "{use}" to load this file. \\quit', _ALLOW_DDL_ON]
    if head_text is not None:
        parts.append(f"-- {HEAD}\n{head_text}")
    for m in ms:
        parts.append(f"-- migrations/{m.name}\n{m.text}")
        parts.append(
            f"insert into donto.migration (name, sha256) values ('{m.name}', '{m.sha256}');"
        )
    for s in idempotent_sources():
        parts.append(f"-- sql/{s.name}\n{s.text}")
    parts.append(_CONFIG_DUMP)
    parts.append(_ALLOW_DDL_RESTORE)
    return "\n\n".join(parts) + "\n"


def build_extension_script(version: str = __version__) -> str:
    """The CREATE EXTENSION script: head, every migration with its ledger row, sql/."""
    return _script(f"-- donto--{version}.sql: built by `donto-pg extension build` from sql/ "
                   "and migrations/; do not edit.", "CREATE EXTENSION donto CASCADE",
                   head().text, migrations())


def build_update_script(old: str, version: str = __version__) -> str:
    """ALTER EXTENSION donto UPDATE from release OLD: the migrations after OLD's last
    one, with their ledger rows, then every idempotent sql/ file."""
    last = RELEASED[old]
    newer = [m for m in migrations() if m.name > last]
    return _script(f"-- donto--{old}--{version}.sql: built by `donto-pg extension build`; "
                   "do not edit.", "ALTER EXTENSION donto UPDATE", None, newer)


def extension_files(version: str = __version__) -> dict[str, str]:
    """The files `extension build` writes (the frozen ones of older releases aside)."""
    files = {
        "donto.control": CONTROL.format(version=version),
        f"donto--{version}.sql": build_extension_script(version),
    }
    if RELEASED:
        last = list(RELEASED)[-1]
        files[f"donto--{last}--{version}.sql"] = build_update_script(last, version)
    return files


def build_extension(outdir: Path = EXTENSION_DIR) -> list[Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in extension_files().items():
        p = outdir / name
        p.write_text(text, encoding="utf-8")
        written.append(p)
    return written


def pg_sharedir(pg_config: str = "/usr/lib/postgresql/15/bin/pg_config") -> Path:
    out = subprocess.run([pg_config, "--sharedir"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def install_extension(sharedir: Path | None = None) -> list[Path]:
    """Copy the control file and every script (this version's, the update scripts and
    the frozen scripts of older releases) into the server's extension directory."""
    target = (sharedir or pg_sharedir()) / "extension"
    files = extension_files()
    stale = [n for n, t in files.items()
             if not (EXTENSION_DIR / n).exists() or (EXTENSION_DIR / n).read_text() != t]
    if stale:
        raise MigrationError(
            f"extension/ is out of date with sql/ and migrations/ ({', '.join(stale)}): "
            "run `donto-pg extension build` and commit the result"
        )
    out = []
    for name in sorted({*files, *(p.name for p in EXTENSION_DIR.glob("donto--*.sql"))}):
        dst = target / name
        try:
            shutil.copyfile(EXTENSION_DIR / name, dst)
        except PermissionError as exc:
            raise MigrationError(
                f"cannot write {dst}: run as root (or the server's owner)") from exc
        out.append(dst)
    return out


def create_extension(conn: psycopg.Connection, paths: list[str] | None = None) -> None:
    """CREATE EXTENSION donto CASCADE in the connected database and write its settings."""
    conn.execute("create extension if not exists donto cascade")
    write_settings(conn, paths)
    conn.commit()


if __name__ == "__main__":  # pragma: no cover - `python -m donto_pg.migrate` builds the files
    for p in build_extension():
        print(p, file=sys.stderr)
