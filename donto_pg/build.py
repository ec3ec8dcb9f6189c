"""Build artefacts from the sources: the extension scripts and the generated SQL seeds.

Not on the runtime path (``migrate`` and the server never import it): the extension,
from its sources to a database:

- ``extension/``: :func:`build_extension` assembles ``donto.control``,
  ``donto--<version>.sql`` (head, every migration with its ledger row, sql/) and the
  update script from the last release; :func:`install_extension` copies them into
  the server's extension directory (``pg_config --sharedir``).
- a database: :func:`create_extension` runs ``CREATE EXTENSION donto CASCADE`` in
  one and records the python path there (:mod:`donto_pg.settings`), for
  ``donto-pg extension install``;
- the prompt-template seed of ``sql/070-extraction.sql`` (the rows of
  ``donto._prompt_template_seed()``), generated from
  :data:`donto_pg.core.render.TEMPLATES` by :func:`template_seed_sql` and written by
  :func:`write_template_seed`.

``donto-pg extension build`` (or ``python -m donto_pg.build``) does both.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from donto_pg import __version__
from donto_pg.cluster import PG_BIN
from donto_pg.core import render
from donto_pg.migrate import (
    ALLOW_DDL,
    EXTENSION_DIR,
    HEAD,
    SQL_DIR,
    MigrationError,
    Source,
    head,
    idempotent_sources,
    migrations,
)
from donto_pg.settings import require_superuser, write_settings

SEED_FILE = SQL_DIR / "070-extraction.sql"
SEED_BEGIN = "-- BEGIN GENERATED TEMPLATES"
SEED_END = "-- END GENERATED TEMPLATES"


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


def pg_config() -> str:
    """The pg_config to ask: $PG_CONFIG, else that of ``DONTO_PG_BIN`` when it is set
    (the PostgreSQL the embedded cluster runs), else the one on PATH, else the Debian one
    of PostgreSQL 15 (/usr/lib/postgresql/15/bin)."""
    chosen = os.environ.get("PG_CONFIG")
    if not chosen and os.environ.get("DONTO_PG_BIN") and (PG_BIN / "pg_config").exists():
        chosen = str(PG_BIN / "pg_config")
    return chosen or shutil.which("pg_config") or str(PG_BIN / "pg_config")


def pg_sharedir(pg_config_path: str | None = None) -> Path:
    """The server's share directory (``pg_config --sharedir``): an absolute path."""
    exe = pg_config_path or pg_config()
    fix = "set PG_CONFIG to the pg_config of the target server"
    try:
        out = subprocess.run([exe, "--sharedir"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise MigrationError(f"cannot run {exe} --sharedir ({exc})",
                             fix="install the PostgreSQL server development files or " + fix
                             ) from exc
    shared = out.stdout.strip()
    if not shared or not os.path.isabs(shared):
        raise MigrationError(f"{exe} --sharedir printed {shared!r}, not an absolute directory",
                             fix=fix)
    return Path(shared)


def install_extension(sharedir: Path | None = None,
                      on_replace: Callable[[Path], None] | None = None) -> list[Path]:
    """Copy the control file and every script (this version's, the update scripts and
    the frozen scripts of older releases) into the server's extension directory.
    ON_REPLACE hears each file there that had other content (an earlier build of an
    unreleased version: the databases created from it stay that build)."""
    target = (sharedir or pg_sharedir()) / "extension"
    if not EXTENSION_DIR.is_dir():
        raise MigrationError(f"there is no {EXTENSION_DIR} to install from",
                             fix="run `donto-pg extension build` in a checkout, or install "
                                 "the donto-pg wheel, which carries it")
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
        src, dst = EXTENSION_DIR / name, target / name
        try:
            if on_replace and dst.exists() and dst.read_bytes() != src.read_bytes():
                on_replace(dst)
            shutil.copyfile(src, dst)
        except PermissionError as exc:
            raise MigrationError(
                f"cannot write {dst}: run as root (or the server's owner)") from exc
        out.append(dst)
    return out


def extension_state(conn) -> str | None:
    """The version of extension donto in the connected database, None when it has none;
    a database that ``donto-pg migrate`` installed is refused (it uses one or the other)."""
    row = conn.execute("select extversion from pg_extension where extname = 'donto'"
                       ).fetchone()
    migrated = conn.execute("select to_regclass('donto.migration') is not null").fetchone()[0]
    conn.commit()
    if row is None and migrated:
        raise MigrationError("this database's donto schema was installed by `donto-pg "
                             "migrate`, not CREATE EXTENSION", "a database uses one or the "
                             "other; nothing was copied",
                             fix="upgrade it with `donto-pg migrate`; to copy only the files "
                                 "for other databases: `donto-pg extension install --no-create`")
    return row[0] if row else None


def require_same_server(conn, sharedir: Path) -> None:
    """Refuse when the connected server reads its extensions from elsewhere than SHAREDIR
    (the pg_config this machine asks): it runs on another host, or is another PostgreSQL
    installation, and files copied here would not reach it (or an older copy there would
    be created). Its ``pg_config`` view is a superuser's; for anyone else this is left to
    CREATE EXTENSION's own refusal."""
    import psycopg

    try:
        with conn.transaction():
            row = conn.execute("select setting from pg_catalog.pg_config "
                               "where name = 'SHAREDIR'").fetchone()
    except psycopg.errors.InsufficientPrivilege:
        return
    if row and Path(row[0]).resolve() != sharedir.resolve():
        raise MigrationError(
            f"the server reads its extensions from {row[0]}/extension, not from "
            f"{sharedir}/extension (where {pg_config()} says)",
            "it is another host or another PostgreSQL installation; nothing was copied",
            fix="run `donto-pg extension install --no-create` on the database host "
                "(PG_CONFIG: that server's pg_config), then CREATE EXTENSION donto CASCADE")


def create_extension(conn, paths: list[str] | None = None) -> None:
    """CREATE EXTENSION donto CASCADE in the connected database (a superuser's
    connection) and write its settings (:func:`donto_pg.settings.write_settings`)."""
    require_superuser(conn, "CREATE EXTENSION donto", MigrationError)
    conn.execute("create extension if not exists donto cascade")
    write_settings(conn, paths)
    conn.commit()


def _sql_text(text: str, indent: str, width: int = 76) -> str:
    """A SQL expression for ``text``: short literals joined by ``||`` (lines <= 100 chars)."""
    tokens: list[str] = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        chunks: list[str] = []
        rest = line
        while len(rest) > width:
            cut = rest.rfind(" ", 0, width) + 1 or width
            chunks.append(rest[:cut])
            rest = rest[cut:]
        if rest or not chunks:
            chunks.append(rest)
        last = len(chunks) - 1
        for k, chunk in enumerate(chunks):
            lit = chunk.replace("'", "''")
            if i < len(lines) - 1 and k == last:
                tokens.append("E'" + lit.replace("\\", "\\\\") + "\\n'")
            elif chunk:
                tokens.append(f"'{lit}'")
    return ("\n" + indent + "|| ").join(tokens or ["''"])


def template_seed_sql() -> str:
    """The rows of ``donto._prompt_template_seed()`` (sql/070-extraction.sql), generated
    from :data:`donto_pg.core.render.TEMPLATES`, in their order (which is version order)."""
    ind = " " * 8
    rows = []
    for n, ((family, version), t) in enumerate(render.TEMPLATES.items(), 1):
        kinds = sorted(k for k, f in render.FAMILY_BY_KIND.items() if f == family)
        fields = [
            str(n),
            f"'{family}'",
            f"'{version}'",
            "array[" + ", ".join(f"'{k}'" for k in kinds) + "]",
            _sql_text(t["system"], ind),
            _sql_text(t["preamble"], ind),
            _sql_text(t["reminder"], ind),
            _sql_text(t["schema_text"], ind),
            "(" + _sql_text(json.dumps(t["schema"], sort_keys=True), ind) + ")::jsonb",
        ]
        rows.append("    (\n" + ind + (",\n" + ind).join(fields) + "\n    )")
    return "    values\n" + ",\n".join(rows) + ";\n"


def write_template_seed(path: Path = SEED_FILE) -> bool:
    """Regenerate the seed between the GENERATED TEMPLATES markers of sql/070-extraction.sql;
    True when the file changed."""
    text = path.read_text(encoding="utf-8")
    start = text.index(SEED_BEGIN) + len(SEED_BEGIN) + 1
    end = text.index(SEED_END)
    new = text[:start] + template_seed_sql() + text[end:]
    if new == text:
        return False
    path.write_text(new, encoding="utf-8")
    return True


if __name__ == "__main__":  # pragma: no cover - `python -m donto_pg.build` builds the files
    write_template_seed()
    for p in build_extension():
        print(p, file=sys.stderr)
