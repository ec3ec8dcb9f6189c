"""What the server needs to run donto's PL/Python: the python path and who may install it.

The PL/Python functions import ``donto_pg`` inside the server, so the server's
Python must find this package and its dependencies. :func:`python_path` says
where they are (from this process's Python), :func:`python_path_setting` is
the value of the server setting ``donto.python_path`` a DBA puts in
``postgresql.conf`` or ``ALTER DATABASE ... SET`` (``donto-pg extension
python-path`` prints that statement), and :func:`write_settings` records the
path in ``donto.setting`` for the databases ``migrate`` and ``CREATE EXTENSION``
install (the fallback ``donto._python_path()`` reads). Installing needs a
superuser (:func:`require_superuser`): only a superuser may create functions in
the untrusted language plpython3u.

Used by :mod:`donto_pg.migrate` (the ledger) and by
:func:`donto_pg.build.create_extension` (the extension); imports neither.
"""

from __future__ import annotations

import json
import sys
import sysconfig
from pathlib import Path

import psycopg

from donto_pg import resources
from donto_pg.errors import DontoError

__all__ = [
    "InstallError",
    "python_path",
    "python_path_setting",
    "require_superuser",
    "write_settings",
]


class InstallError(DontoError):
    """The schema cannot be installed here (migrate and CREATE EXTENSION need a superuser)."""


def python_path() -> list[str]:
    """Directories the server's Python needs to import donto_pg and its dependencies:
    the package's parent, this environment's site-packages, then any other
    site-packages this Python imports from (a --system-site-packages venv's, or one
    added by a .pth file)."""
    paths = [str(resources.PACKAGE_PARENT)]
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths()[key]
        if p not in paths:
            paths.append(p)
    for p in sys.path:
        if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir() \
                and p not in paths:
            paths.append(p)
    return paths


def python_path_setting(paths: list[str] | None = None) -> str:
    """The value of the server setting donto.python_path (directories joined by ':')."""
    return ":".join(paths if paths is not None else python_path())


def write_settings(conn: psycopg.Connection, paths: list[str] | None = None) -> None:
    """Record PATHS (default: :func:`python_path`) as donto.setting 'python_path' (a JSON
    array; rewritten only when it changed). The caller commits."""
    conn.execute(
        "insert into donto.setting (key, value) values ('python_path', %s) "
        "on conflict (key) do update set value = excluded.value, set_at = now() "
        "where donto.setting.value is distinct from excluded.value",
        (json.dumps(paths if paths is not None else python_path()),),
    )


def is_superuser(conn: psycopg.Connection) -> bool:
    return conn.execute("select current_setting('is_superuser')").fetchone()[0] == "on"


def require_superuser(conn: psycopg.Connection, what: str,
                      error: type[DontoError] = InstallError) -> None:
    """Stop with what a superuser must run, before a 40-line error from the server."""
    if is_superuser(conn):
        return
    user, db = conn.execute("select current_user, current_database()").fetchone()
    raise error(
        f"{what} must run as a superuser (you are {user}): it creates PL/Python functions, "
        "and PostgreSQL lets only superusers create functions in the untrusted language "
        "plpython3u (GRANT cannot change that).\n"
        f"Ask a superuser to run it on database {db} (or to run CREATE EXTENSION donto CASCADE "
        f"there), then GRANT donto_writer TO {user}; (or donto_reader to read only)."
    )
