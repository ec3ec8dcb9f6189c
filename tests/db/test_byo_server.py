"""Bring-your-own server: a second PostgreSQL cluster, set up the way a DBA would.

The test starts its own cluster (donto_pg.cluster in a temporary directory), puts
only `donto.python_path` in its postgresql.conf, and runs plain `CREATE EXTENSION
donto CASCADE` (no donto-pg on that path, no stored setting): recall works. It also
attacks the setting (a login role that sets donto.python_path by PGOPTIONS to its
own code), and checks the errors a DBA meets: no python_path, another Python minor
version, `donto-pg migrate` by a database owner who is not a superuser.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest

from donto_pg import build, migrate, settings
from donto_pg.cluster import Cluster
from donto_pg.db import register_vector_if_present
from tests.conftest import ROOT

BODY = ("[user #0] I moved to Berlin in March and I adopted a cat named Miso.\n"
        "[assistant #1] Noted: Berlin, and a cat called Miso.\n") * 20


@pytest.fixture(scope="module")
def dba_cluster():
    """A second cluster whose postgresql.conf sets donto.python_path; stopped afterwards."""
    sharedir = build.pg_sharedir() / "extension"
    if not os.access(sharedir, os.W_OK):
        pytest.fail(f"installing the extension into {sharedir} needs root (CI runs as root)")
    home = Path(tempfile.mkdtemp(prefix="donto-byo-"))
    home.chmod(0o755)  # the server's OS user (postgres, when we are root) walks into it
    cluster = Cluster(home, settings={"fsync": "off", "max_connections": "20"})
    cluster.init()
    with (cluster.datadir / "postgresql.conf").open("a") as f:
        f.write(f"\n# donto-pg, as a DBA sets it\n"
                f"donto.python_path = '{settings.python_path_setting()}'\n")
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


def _connect(cluster: Cluster, dbname: str, **kw: object) -> psycopg.Connection:
    """As donto by peer (conninfo requires no authentication exchange), or as another role
    with its password."""
    info = cluster.conninfo(dbname)
    if "password" in kw:
        info.pop("require_auth")
    return psycopg.connect(**{**info, **kw})


def _create_extension(conn: psycopg.Connection) -> None:
    """Plain CREATE EXTENSION donto CASCADE. The server's extension directory is shared by
    every test session on the machine: copy this version's script in just before."""
    build.install_extension()
    conn.execute("create extension donto cascade")


def _new_database(cluster: Cluster, name: str) -> None:
    with _connect(cluster, "postgres", autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')
        admin.execute(f'create database "{name}"')


@pytest.fixture(scope="module")
def dba_db(dba_cluster):
    """CREATE EXTENSION donto CASCADE with nothing else: the GUC is the only path."""
    _new_database(dba_cluster, "dba")
    with _connect(dba_cluster, "dba") as conn:
        _create_extension(conn)
        conn.commit()
    return dba_cluster


def test_create_extension_with_only_the_guc_then_recall(dba_db):
    from donto_pg.embed import embed_pending

    with _connect(dba_db, "dba") as conn:
        assert conn.execute("select count(*) from donto.setting").fetchone()[0] == 0
        assert conn.execute("select source from donto._python_path()").fetchone()[0] == (
            "donto.python_path")
        rev = conn.execute("select donto.register_revision('byo:1', %s)", (BODY,)).fetchone()[0]
        conn.execute("select donto.project_recall(%s)", (rev,))  # PL/Python windows
        conn.commit()
        register_vector_if_present(conn)
        assert embed_pending(conn, progress=False).embedded >= 1
    # a new connection: the server's Python loads donto_pg and the model from the GUC
    with _connect(dba_db, "dba") as conn:
        warm = conn.execute("select donto.warmup()").fetchone()[0]
        assert warm["model"] == "all-MiniLM-L6-v2" and warm["seconds"] > 0
        hits = conn.execute("select chunk_text from donto.recall('where did I move?', k => 1)"
                            ).fetchall()
        assert hits and "Berlin" in hits[0][0]
        again = conn.execute("select donto.warmup()").fetchone()[0]
        assert again["seconds"] < warm["seconds"]  # loaded once per backend
    assert "Loading weights" not in dba_db.logfile.read_text(errors="replace")


def test_python_path_given_by_a_session_is_refused(dba_db, tmp_path):
    """A login role puts its own donto_pg on the server's path with PGOPTIONS: refused,
    its code never runs."""
    evil = Path(tempfile.mkdtemp(prefix="donto-evil-"))
    evil.chmod(0o755)
    marker = evil / "ran"
    (evil / "donto_pg").mkdir()
    (evil / "donto_pg" / "__init__.py").write_text("")
    (evil / "donto_pg" / "plpy_entry.py").write_text(
        f"open({str(marker)!r}, 'w').write('owned')\n")
    os.chmod(evil / "donto_pg", 0o755)
    try:
        with _connect(dba_db, "dba", autocommit=True) as admin:
            admin.execute("drop role if exists byo_mallory")
            admin.execute("create role byo_mallory login password 'mallory-pw'")
            admin.execute("grant donto_reader to byo_mallory")
        for how in ({"options": f"-c donto.python_path={evil}"}, {}):
            with _connect(dba_db, "dba", user="byo_mallory", password="mallory-pw",
                          **how) as conn:
                if not how:
                    conn.execute(f"set donto.python_path = '{evil}'")
                with pytest.raises(psycopg.errors.InsufficientPrivilege,
                                   match="set by this session or connection"):
                    conn.execute("select donto._py_boot()")
        assert not marker.exists()
    finally:
        shutil.rmtree(evil, ignore_errors=True)


def test_no_python_path_says_the_command_that_fixes_it(dba_db):
    _new_database(dba_db, "dba_nopath")
    with _connect(dba_db, "dba_nopath", autocommit=True) as conn:
        conn.execute("alter database dba_nopath set donto.python_path = ''")
    with _connect(dba_db, "dba_nopath") as conn:
        _create_extension(conn)
        conn.commit()
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("select donto._py_boot()")
    msg = str(exc.value)
    assert "ALTER DATABASE dba_nopath SET donto.python_path" in msg
    assert "donto-pg extension python-path dba_nopath" in msg
    assert "donto-pg migrate" not in msg  # it refuses an extension database


def test_another_python_minor_version_is_a_clear_error(dba_db):
    _new_database(dba_db, "dba_py")
    other = "/opt/venv/lib/python3.99/site-packages"
    with _connect(dba_db, "dba_py", autocommit=True) as conn:
        conn.execute(f"alter database dba_py set donto.python_path = '{ROOT}:{other}'")
    with _connect(dba_db, "dba_py") as conn:
        _create_extension(conn)
        conn.commit()
        with pytest.raises(psycopg.Error) as exc:
            conn.execute("select donto._py_boot()")
    assert "installed for Python 3.99" in str(exc.value)
    assert "No module named" not in str(exc.value)


def test_the_cli_prints_the_statement_a_dba_runs(dba_db):
    r = subprocess.run([sys.executable, "-m", "donto_pg", "extension", "python-path", "dba_set"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    _new_database(dba_db, "dba_set")
    with _connect(dba_db, "dba_set", autocommit=True) as conn:
        conn.execute(r.stdout)  # ALTER DATABASE "dba_set" SET donto.python_path = '...'
        _create_extension(conn)
    with _connect(dba_db, "dba_set") as conn:
        conn.execute("select donto._py_boot()")
        config = conn.execute("select setconfig from pg_db_role_setting s join pg_database d "
                              "on d.oid = s.setdatabase where d.datname = 'dba_set'"
                              ).fetchone()[0]
        assert config == [f"donto.python_path={settings.python_path_setting()}"]


def test_migrate_by_an_owner_who_is_not_a_superuser(dba_db):
    """The owner of a database where a superuser made vector and plpython3u: migrate
    stops with two lines saying what the superuser must run (no traceback); after the
    superuser ran it, the owner writes and recalls with the role it was granted."""
    _new_database(dba_db, "owned")
    with _connect(dba_db, "owned", autocommit=True) as conn:
        conn.execute("drop role if exists byo_owner")
        conn.execute("create role byo_owner login password 'owner-pw'")
        conn.execute("alter database owned owner to byo_owner")
        conn.execute("create extension plpython3u")
        conn.execute("create extension vector")
    dsn = (f"host={dba_db.sockdir} port=5432 user=byo_owner password=owner-pw "
           "dbname=owned")
    r = subprocess.run([sys.executable, "-m", "donto_pg", "migrate", "--dsn", dsn],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert "must run as a superuser (you are byo_owner)" in r.stderr
    assert "GRANT donto_writer TO byo_owner" in r.stderr
    with _connect(dba_db, "owned") as conn:  # what the superuser runs
        assert conn.execute("select count(*) from pg_namespace where nspname = 'donto'"
                            ).fetchone()[0] == 0
        migrate.migrate(conn)
        conn.execute("grant donto_writer to byo_owner")
        conn.commit()
    with psycopg.connect(dsn) as conn:
        rev = conn.execute("select donto.register_revision('byo:owner', %s)",
                           (BODY,)).fetchone()[0]
        assert conn.execute("select donto.project_recall(%s)", (rev,)).fetchone()[0] >= 1
