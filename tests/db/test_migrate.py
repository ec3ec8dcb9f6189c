"""Migrations, the extension and the embedded cluster (real server)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

import donto_pg
from donto_pg import build, migrate, settings
from tests.conftest import ROOT, run_cli, run_cli_as

CATALOG = """
select 'column', c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || case when a.attnotnull then ' not null' else '' end
from pg_attribute a join pg_class c on c.oid = a.attrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'donto' and a.attnum > 0 and not a.attisdropped and c.relkind in ('r', 'v')
union all
select 'index', pg_get_indexdef(i.indexrelid)
from pg_index i join pg_class c on c.oid = i.indrelid join pg_namespace n on n.oid = c.relnamespace
where n.nspname = 'donto'
union all
select 'constraint', conrelid::regclass::text || ' ' || pg_get_constraintdef(oid)
from pg_constraint where connamespace = 'donto'::regnamespace
union all
select 'function', p.oid::regprocedure::text || ' ' || md5(p.prosrc) || ' ' || p.provolatile::text
       || ' ' || p.prosecdef::text || ' ' || coalesce(array_to_string(p.proconfig, ','), '')
       || ' ' || coalesce(p.proacl::text, '')
from pg_proc p where p.pronamespace = 'donto'::regnamespace
union all
select 'trigger', tgrelid::regclass::text || ' ' || pg_get_triggerdef(oid)
from pg_trigger where not tgisinternal and tgrelid in
    (select oid from pg_class where relnamespace = 'donto'::regnamespace)
union all
select 'view', c.relname || ' ' || md5(pg_get_viewdef(c.oid))
from pg_class c where c.relnamespace = 'donto'::regnamespace and c.relkind = 'v'
union all
select 'comment', c.relname || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '')
from pg_class c where c.relnamespace = 'donto'::regnamespace and c.relkind in ('r', 'v')
union all
select 'ledger', name || ' ' || sha256 from donto.migration
order by 1, 2
"""


@pytest.fixture
def fresh_db(db):
    """Make empty databases on the test server; drop them afterwards."""
    info = db.info
    names: list[str] = []
    admin = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres",
                            autocommit=True)

    def make() -> psycopg.Connection:
        name = f"donto_fresh_{uuid.uuid4().hex[:8]}"
        admin.execute(f'create database "{name}"')
        names.append(name)
        return psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=name)

    yield make
    for name in names:
        admin.execute(f'drop database if exists "{name}" with (force)')
    admin.close()


def catalog(conn) -> list[tuple[str, str]]:
    return conn.execute(CATALOG).fetchall()


def test_migrate_twice_is_a_no_op(db):
    before = catalog(db)
    assert migrate.migrate(db) == []
    assert catalog(db) == before
    st = migrate.status(db)
    assert st.pending == [] and st.tampered == []
    assert [n for n, _ in st.applied] == [m.name for m in migrate.migrations()]


def test_fresh_install_equals_install_then_upgrade(fresh_db):
    direct, stepwise = fresh_db(), fresh_db()
    assert migrate.migrate(direct) == [m.name for m in migrate.migrations()]
    first = migrate.migrations()[0].name
    assert migrate.migrate(stepwise, upto=first[:3]) == [first]
    assert migrate.status(stepwise).pending  # something left to upgrade
    migrate.migrate(stepwise)
    assert catalog(direct) == catalog(stepwise)


def test_upgrade_to_007_moves_the_full_text_vectors_unchanged(fresh_db):
    """007 moves x_memory_record.tsv into x_memory_lexical: same vectors, nothing lost."""
    conn = fresh_db()
    migrate.migrate(conn, upto="006")
    conn.execute("""
        with d as (insert into donto.document (iri) values ('test:007') returning document_id),
        r as (insert into donto.revision (document_id, sha256, body, body_chars)
              select document_id, sha256('ab'::bytea), 'ab', 2 from d
              returning revision_id, document_id),
        c as (insert into donto.context (iri) values ('ctx:test/007') returning context_id),
        p as (insert into donto.projection (revision_id, kind, strategy, context_id)
              select revision_id, 'recall', 'fixed-window', context_id from r, c
              returning projection_id, revision_id),
        s as (insert into donto.statement (subject, predicate, object_lit, context_id)
              select 'chunk:' || g, 'mem:episodic/chunk', jsonb_build_object('v', 'x'), context_id
              from c, generate_series(0, 1) as g returning statement_id)
        insert into donto.x_memory_record (statement_id, projection_id, revision_id,
                                           chunk_index, char_start, char_end, tsv)
        select s.statement_id, p.projection_id, p.revision_id,
               row_number() over (order by s.statement_id) - 1, 0, 1,
               setweight(to_tsvector('english', 'moved to Berlin ' || s.statement_id), 'A')
        from s, p""")
    before = conn.execute("select statement_id, projection_id, tsv::text "
                          "from donto.x_memory_record order by 1").fetchall()
    conn.commit()
    assert migrate.migrate(conn)[0] == "007-recall-lexical.sql"  # the next one after 006
    after = conn.execute("select statement_id, projection_id, tsv::text "
                         "from donto.x_memory_lexical order by 1").fetchall()
    assert after == before and len(after) == 2
    assert conn.execute("select count(*) from pg_attribute where attrelid = "
                        "'donto.x_memory_record'::regclass and attname = 'tsv' "
                        "and not attisdropped").fetchone()[0] == 0


def test_tampered_migration_is_refused(db, tmp_path, monkeypatch):
    copy = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, copy)
    first = sorted(copy.glob("*.sql"))[0]
    released = first.read_text()
    first.write_text(released + "\n-- edited after release\n")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", copy)
    assert migrate.status(db).tampered == [first.name]
    with pytest.raises(migrate.MigrationError, match=f"changed since.*{first.name}") as err:
        migrate.migrate(db)
    assert "released migrations are frozen" in str(err.value) and "new migration" in \
        err.value.fix
    # an unreleased one: a database of a development build, which a DBA cannot mend by
    # restoring a file (review: the message sent them to the project's sources)
    first.write_text(released)
    last = sorted(copy.glob("*.sql"))[-1]
    assert last.name not in migrate.released_migrations()
    last.write_text(last.read_text() + "\n-- edited before release\n")
    with pytest.raises(migrate.MigrationError, match="development build") as err:
        migrate.migrate(db)
    assert last.name in str(err.value) and "no upgrade path" in str(err.value)
    assert "build the database was made with" in err.value.fix


def test_failing_migration_leaves_nothing_behind(db, tmp_path, monkeypatch):
    copy = tmp_path / "migrations"
    shutil.copytree(migrate.MIGRATIONS_DIR, copy)
    (copy / "999-broken.sql").write_text(
        "create table donto.half_done (x int);\nselect * from no_such_table;\n")
    monkeypatch.setattr(migrate, "MIGRATIONS_DIR", copy)
    with pytest.raises(migrate.MigrationError, match="999-broken.sql failed"):
        migrate.migrate(db)
    assert db.execute("select to_regclass('donto.half_done')").fetchone()[0] is None
    assert "999-broken.sql" in migrate.status(db).pending


def test_a_server_without_an_extension_s_files_is_told_which_package(fresh_db, monkeypatch):
    """A server that lacks one of the extensions the schema needs (its control file: no
    package installed) refuses CREATE EXTENSION (58P01); migrate names the package to
    install for the server's major version and leaves the database as it was."""
    conn = fresh_db()
    monkeypatch.setattr(migrate, "SERVER_EXTENSIONS", {
        **migrate.SERVER_EXTENSIONS, "donto_no_such_ext": "postgresql-{major}-nothing"})
    major = conn.info.server_version // 10000
    with pytest.raises(migrate.MigrationError) as err:
        migrate.migrate(conn)
    assert "the server has no extension donto_no_such_ext" in str(err.value)
    assert f"install postgresql-{major}-nothing on the database host" in err.value.fix
    conn.rollback()
    assert conn.execute("select count(*) from pg_namespace where nspname = 'donto'"
                        ).fetchone() == (0,)
    assert conn.execute("select count(*) from pg_extension where extname in "
                        "('vector', 'plpython3u')").fetchone() == (0,)
    conn.close()


def recall_error(conn) -> list[str]:
    """The lines `donto-pg recall` fails with on CONN's database (committed first)."""
    info = conn.info
    conn.commit()
    r = subprocess.run([sys.executable, "-m", "donto_pg", "recall", "x", "--dsn",
                        f"host={info.host} port={info.port} user={info.user} "
                        f"dbname={info.dbname}"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    return r.stderr.splitlines()


def test_a_schema_behind_this_build_says_so(fresh_db):
    """A database of this version that lacks some of its migrations (an earlier build of
    an unreleased version) failed on the first function it lacked ("function
    donto._may_embed(...) does not exist"); every command now says what is missing."""
    conn = fresh_db()
    last = migrate.migrations()[-1].name
    migrate.migrate(conn, upto=f"{int(last[:3]) - 1:03d}")
    assert recall_error(conn) == [
        f"error: the database's donto schema is an earlier build of {donto_pg.__version__}: "
        f"it lacks migration(s) {last}", "  fix: run `donto-pg migrate`"]


def test_a_schema_of_another_version_says_which_and_what_to_do(fresh_db):
    """Found by review: a database migrated by 0.2.0 was called "an earlier build of
    0.3.0", a newer one was told to migrate with this (older) donto-pg, and one with a
    later build's migrations passed unnoticed."""

    old = fresh_db()
    migrate.migrate(old, upto=build.RELEASED["0.2.0"][:3])  # what 0.2.0's migrate left
    assert recall_error(old) == [
        f"error: the database's donto schema is version 0.2.0, this donto-pg is "
        f"{donto_pg.__version__}",
        f"  fix: upgrade the database with `donto-pg migrate` (from donto-pg "
        f"{donto_pg.__version__}), or use donto-pg 0.2.0"]
    later = fresh_db()
    migrate.migrate(later)
    later.execute("insert into donto.migration (name, sha256) values ('999-later.sql', 'x')")
    lines = recall_error(later)
    assert "of a later donto-pg" in lines[0] and "999-later.sql" in lines[0]
    assert lines[1] == "  fix: install the donto-pg that migrated it: a database is never " \
                       "downgraded"
    newer = fresh_db()
    migrate.migrate(newer)
    newer.execute("set donto.allow_ddl = 'on'")
    newer.execute("create or replace function donto.sql_version() returns text "
                  "language sql as $$ select '9.9.9' $$")
    assert recall_error(newer) == [
        f"error: the database's donto schema is version 9.9.9, this donto-pg is "
        f"{donto_pg.__version__}",
        "  fix: install the donto-pg that migrated it (9.9.9): a database is never downgraded"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the server must run as another OS user "
                    "(root's clusters run as postgres; CI runs as root)")
def test_migrate_fails_when_the_server_cannot_load_donto_pg(fresh_db, tmp_path):
    """Found by review: migrate from a venv the server's OS user cannot read said
    "applied ..." and exited 0; the first command after it failed."""
    closed = tmp_path / "closed"  # pytest's tmp_path is 0700: postgres cannot enter it
    for name in ("donto_pg", "sql", "migrations", "extension"):
        shutil.copytree(ROOT / name, closed / name,
                        ignore=shutil.ignore_patterns("__pycache__", "_data"))
    shutil.copy2(ROOT / "pyproject.toml", closed)  # a checkout: its sql/ is the one used
    conn = fresh_db()
    info = conn.info
    conn.commit()
    r = subprocess.run([sys.executable, "-m", "donto_pg", "migrate", "--dsn",
                        f"host={info.host} port={info.port} user={info.user} "
                        f"dbname={info.dbname}"], capture_output=True, text=True,
                       cwd=closed, env={**os.environ, "PYTHONPATH": str(closed)}, timeout=600)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "the schema is migrated, but the server's Python cannot load donto_pg" in r.stderr
    assert str(closed) in r.stderr  # it names the directories the server could not read


def test_the_python_api_names_a_missing_or_older_schema(fresh_db):
    """Found by review: the API raised psycopg's UndefinedColumn / UndefinedFunction /
    InvalidSchemaName where the CLI said what to run."""
    from donto_pg import api
    from donto_pg.errors import SchemaMissing, SchemaVersion

    empty = fresh_db()
    with pytest.raises(SchemaMissing, match="no donto schema"):
        api.recall(empty, "where?", arms="lexical")
    with pytest.raises(SchemaMissing):
        api.add_conversation(empty, [{"role": "user", "content": "hi"}], "chat:x/1",
                             embed=False)
    old = fresh_db()
    migrate.migrate(old, upto=build.RELEASED["0.2.0"][:3])
    old.commit()
    with pytest.raises(SchemaVersion, match="version 0.2.0") as err:
        api.claims(old)
    assert "donto-pg migrate" in err.value.fix
    with old.transaction():  # the caller's own transaction stays usable
        with pytest.raises(SchemaVersion):
            api.recall(old, "where?", arms="lexical")
        assert old.execute("select 1").fetchone() == (1,)


def test_the_python_api_refuses_a_schema_of_a_later_donto_pg_before_using_it(
        db, connect, monkeypatch):
    """Found by review: the CLI refused a database migrated by a later donto-pg, the API
    wrote into it (its check ran only after a query failed); then, that a connection
    checked once was never checked again (a pool's connection lives on while the database
    is migrated): it is checked again after api.SCHEMA_RECHECK_S seconds."""
    from donto_pg import api
    from donto_pg.errors import SchemaVersion

    pooled = connect()
    assert api.claims(pooled) == []  # checked, and accepted
    db.execute("insert into donto.migration (name, sha256) values ('099-future.sql', 'x')")
    db.commit()
    before = db.execute("select count(*) from donto.revision").fetchone()[0]
    db.commit()
    with pytest.raises(SchemaVersion, match="099-future.sql"):
        api.add_conversation(db, [{"role": "user", "content": "I moved to Oslo."}],
                             "chat:later/1", embed=False)
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == before
    db.commit()
    with pytest.raises(SchemaVersion):
        api.recall(db, "where?", arms="lexical")
    with db.transaction():  # inside the caller's transaction: a savepoint, still usable
        with pytest.raises(SchemaVersion):
            api.claims(db)
        assert db.execute("select 1").fetchone() == (1,)
    assert api.claims(pooled) == []  # within SCHEMA_RECHECK_S of its check: not again
    monkeypatch.setattr(api, "SCHEMA_RECHECK_S", 0.0)
    with pytest.raises(SchemaVersion):
        api.claims(pooled)


def test_dry_run_plan_and_a_writable_public_schema(fresh_db):
    conn = fresh_db()
    names = [s.name for s in migrate.plan(conn)]
    assert names[0] == "000-head.sql"
    assert [m.name for m in migrate.migrations()] == names[1:1 + len(migrate.migrations())]
    assert conn.execute("select to_regnamespace('donto')").fetchone()[0] is None
    # --json gives the plan as JSON (name, SHA-256, the SQL), not the SQL itself
    conn.commit()
    r = run_cli(conn, "migrate", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert [p["name"] for p in plan] == names and plan[0]["sql"].strip()
    assert conn.execute("select to_regnamespace('donto')").fetchone()[0] is None
    # a database whose schema public anybody may write (made before PostgreSQL 15): warned
    conn.execute("grant create on schema public to public")
    conn.commit()
    r = run_cli(conn, "migrate", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["applied"], r.stderr
    assert "revoke create on schema public from public" in r.stderr
    conn.execute("revoke create on schema public from public")
    conn.commit()
    r = run_cli(conn, "migrate")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


ALREADY = migrate.ALREADY


def test_an_up_to_date_migrate_locks_no_donto_table(db, logins, connect):
    """Replacing a view or a trigger locks its table until the migrate commits, and every
    query of it queues behind that lock: once the database records that the same sql/ ran
    here, migrate skips it; --repair runs it all the same."""
    owner = connect()
    steps: list[str] = []
    # db is a clone of the migrated template: another database, so sql/ runs here once
    assert migrate.migrate(owner, on_step=steps.append) == []
    assert "sql/090-roles.sql" in steps and ALREADY not in steps
    before = catalog(owner)
    reader, as_reader = logins("donto_reader")
    r = as_reader()
    r.execute("select count(*) from donto.statement")  # a transaction left open
    steps.clear()
    assert migrate.migrate(owner, lock_wait=1, on_step=steps.append) == []
    assert steps == [ALREADY]
    assert migrate.plan(owner) == []
    assert len(migrate.plan(owner, repair=True)) == 1 + len(migrate.idempotent_sources())
    with pytest.raises(migrate.MigrationError, match="waited more than 1 s for a lock"):
        migrate.migrate(owner, lock_wait=1, repair=True)
    r.rollback()
    steps.clear()
    assert migrate.migrate(owner, repair=True, on_step=steps.append) == []
    assert "sql/090-roles.sql" in steps
    assert catalog(owner) == before
    owner.commit()
    db.commit()
    r2 = run_cli(db, "migrate", "--repair")
    assert r2.returncode == 0 and "no migration to apply; ran sql/ again" in r2.stdout, r2.stderr
    assert "--repair" in r2.stdout
    # it says what ran (it said "up to date" always), and counts the conversations to
    # reproject on every run (it did only on a run that applied a migration)
    from tests.db.test_security_definer import new_revision

    rev = new_revision(db, "doc:old/1")  # loaded before recall keys and standing memory
    db.execute("select donto.project_recall(%s, 60)", (rev,))
    db.commit()
    r3 = run_cli(db, "migrate", "--json")
    assert r3.returncode == 0, r3.stderr
    assert json.loads(r3.stdout) == {"applied": [], "sql_ran": False, "stale_revisions": 1}
    r4 = run_cli(db, "migrate")
    assert "up to date" in r4.stdout and "donto-pg reproject" in r4.stderr, r4.stderr


def test_a_migrate_by_another_superuser_leaves_the_owner_s_privileges(db, connect):
    """sql/090 gave the owner's own privileges (donto.setting, the writers' locks) to
    current_user: a migrate run by another superuser granted them to it, and revoked
    nothing from the owner."""
    other = f"super_{uuid.uuid4().hex[:8]}"
    db.execute(f"create role {other} superuser login")
    db.commit()
    try:
        them = connect()
        them.execute(f"set session authorization {other}")
        assert migrate.migrate(them, repair=True) == []
        them.commit()
        owner = db.execute("select nspowner::regrole::text from pg_namespace "
                           "where nspname = 'donto'").fetchone()[0]
        assert owner != other
        acl = dict(db.execute(
            "select c.relname, c.relacl::text from pg_class c "
            "where c.relnamespace = 'donto'::regnamespace "
            "and c.relname in ('setting', 'writer_lock', 'statement')").fetchall())
        assert other not in " ".join(acl.values())
        granted = dict(db.execute(
            "select c.relname, array_agg(a.privilege_type::text order by a.privilege_type) "
            "from pg_class c, aclexplode(c.relacl) a "
            "where c.relnamespace = 'donto'::regnamespace and a.grantee = %s::regrole "
            "and c.relname in ('setting', 'writer_lock', 'statement') group by 1",
            (owner,)).fetchall())  # the owner is a superuser: its grants, not its powers
        assert {"UPDATE", "DELETE", "TRUNCATE"} <= set(granted["setting"])
        assert "UPDATE" in granted["writer_lock"]
        assert not {"UPDATE", "DELETE", "TRUNCATE"} & set(granted["statement"])
        them.close()
    finally:
        db.rollback()
        db.execute(f"drop owned by {other}")
        db.execute(f"drop role {other}")
        db.commit()


def test_changed_sql_sources_run_again(db, tmp_path, monkeypatch):
    migrate.migrate(db)
    copy = tmp_path / "sql"
    shutil.copytree(migrate.SQL_DIR, copy)
    comments = copy / "096-comments.sql"
    comments.write_text(comments.read_text()
                        + "\ncomment on table donto.setting is 'edited after release';\n")
    monkeypatch.setattr(migrate, "SQL_DIR", copy)
    assert [s.name for s in migrate.plan(db)][-1] == "098-dump.sql"
    steps: list[str] = []
    assert migrate.migrate(db, on_step=steps.append) == []
    assert "sql/096-comments.sql" in steps
    assert db.execute("select obj_description('donto.setting'::regclass, 'pg_class')"
                      ).fetchone() == ("edited after release",)
    steps.clear()
    migrate.migrate(db, on_step=steps.append)
    assert steps == [ALREADY]
    # what sql/ made changed by hand: grants taken (a restore in place with --no-acl), a
    # function dropped, a trigger disabled: the next migrate runs sql/ again
    for change, check in (
            ("revoke select on all tables in schema donto from donto_reader",
             "select has_table_privilege('donto_reader', 'donto.statement', 'select')"),
            ("drop function donto._recall_scaffold()",
             "select to_regprocedure('donto._recall_scaffold()') is not null"),
            ("alter table donto.statement disable trigger i3_refuse",
             "select tgenabled = 'A' from pg_trigger where tgname = 'i3_refuse' "
             "and tgrelid = 'donto.statement'::regclass")):
        db.execute("set local donto.allow_ddl = 'on'")
        db.execute(change)
        assert db.execute(check).fetchone() == (False,)
        db.commit()
        steps.clear()
        migrate.migrate(db, on_step=steps.append)
        assert "sql/096-comments.sql" in steps, change
        assert db.execute(check).fetchone() == (True,)
        db.commit()
    # the recorded state is another place's after a restore into another database
    monkeypatch.undo()
    db.execute("update donto.setting set value = to_jsonb('another place'::text) "
               "where key = 'sql_state'")
    db.commit()
    steps.clear()
    migrate.migrate(db, on_step=steps.append)
    assert "sql/096-comments.sql" in steps
    assert db.execute("select obj_description('donto.setting'::regclass, 'pg_class')"
                      ).fetchone() != ("edited after release",)


def test_python_path_setting_is_written(db):
    value = db.execute("select value from donto.setting where key = 'python_path'").fetchone()[0]
    assert str(ROOT) in value
    db.execute("select donto._py_boot()")  # the server's Python imports donto_pg


def test_py_boot_refuses_a_package_of_another_version(db, connect):
    """The SQL and the server's donto_pg must be one version (a stale install says so)."""
    assert db.execute("select donto.sql_version()").fetchone()[0] == donto_pg.__version__
    db.execute("select donto._py_boot()")
    db.execute("select set_config('donto.allow_ddl', 'on', true)")  # past the DDL guard
    db.execute("create or replace function donto.sql_version() returns text language sql "
               "immutable return '0.0.1'")
    db.commit()
    other = connect()  # a new backend: nothing cached in GD yet
    with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState,
                       match=rf"imports donto_pg {re.escape(donto_pg.__version__)} .* installed "
                       r"donto SQL is version 0\.0\.1\. Upgrade the SQL with `donto-pg migrate`"):
        other.execute("select donto.anchor(1, 'x', null)")


def test_committed_extension_files_match_sources():
    for name, text in build.extension_files().items():
        assert (ROOT / "extension" / name).read_text() == text, (
            f"extension/{name} is stale: run `donto-pg extension build`")


def test_create_extension_gives_the_same_schema(fresh_db):
    sharedir = build.pg_sharedir() / "extension"
    if not os.access(sharedir, os.W_OK):
        pytest.skip(f"installing into {sharedir} needs root (CI runs as root)")
    build.install_extension()
    via_ext, via_migrate = fresh_db(), fresh_db()
    build.create_extension(via_ext)
    migrate.migrate(via_migrate)
    assert catalog(via_ext) == catalog(via_migrate)
    with pytest.raises(psycopg.Error, match="invariant I3"):
        via_ext.execute("delete from donto.migration")
    via_ext.rollback()
    with pytest.raises(migrate.MigrationError, match="ALTER EXTENSION"):
        migrate.migrate(via_ext)


@pytest.mark.parametrize("old", list(build.RELEASED))
def test_alter_extension_update_from_a_release_keeps_the_data(fresh_db, old):
    """CREATE EXTENSION donto VERSION <a release>, load a conversation with that
    release's functions, ALTER EXTENSION donto UPDATE (through every later release):
    the schema equals a fresh install and the chunks keep their full-text vectors
    (in x_memory_record.tsv before 0.2.0, in donto.x_memory_lexical since)."""
    sharedir = build.pg_sharedir() / "extension"
    if not os.access(sharedir, os.W_OK):
        pytest.skip(f"installing into {sharedir} needs root (CI runs as root)")
    build.install_extension()
    updated, fresh = fresh_db(), fresh_db()
    updated.execute(f"create extension donto version '{old}' cascade")
    settings.write_settings(updated)
    line = "[user #0] I moved to Berlin in March.\n"
    rev = updated.execute("select donto.register_revision('test:update', %s)",
                          (line * 80,)).fetchone()[0]
    updated.execute("select donto.record_turns(%s, %s)", (rev, json.dumps([
        {"seq": i, "turn_id": i, "role": "user", "header_start": i * len(line),
         "char_start": i * len(line) + len("[user #0] "), "char_end": (i + 1) * len(line) - 1}
        for i in range(80)])))
    chunks = updated.execute("select donto.project_recall(%s, 200)", (rev,)).fetchone()[0]
    lexical = "x_memory_record" if old == "0.1.0" else "x_memory_lexical"
    before = updated.execute(f"select statement_id, tsv::text from donto.{lexical} "
                             "order by 1").fetchall()
    updated.commit()
    # this donto-pg says what the older database needs, before it runs anything there
    r = run_cli(updated, "recall", "Berlin", "--arms", "lexical")
    assert r.returncode == 1 and f"schema is version {old}" in r.stderr, r.stderr
    assert "ALTER EXTENSION donto UPDATE" in r.stderr and "Traceback" not in r.stderr
    updated.execute("alter extension donto update")
    updated.commit()
    assert updated.execute("select extversion from pg_extension where extname = 'donto'"
                           ).fetchone()[0] == build.__version__
    build.create_extension(fresh)
    assert catalog(updated) == catalog(fresh)
    assert updated.execute("select statement_id, tsv::text from donto.x_memory_lexical "
                           "order by 1").fetchall() == before and len(before) == chunks > 1
    # what a load cuts now and that release did not (recall keys, standing memory) is
    # named, and cut by donto.reproject, once (migrate's note, `donto-pg reproject`)
    rules = updated.execute("select donto.standing_rules()").fetchone()[0]
    assert updated.execute("select revision_id, document, missing from donto.stale_revisions()"
                           ).fetchall() == [(rev, "test:update",
                                             ["recall keys", f"standing memory ({rules})"])]
    updated.commit()
    r = run_cli(updated, "reproject", "--no-embed", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["revisions"] == [
        {"revision_id": rev, "document": "test:update", "keys": 80, "standing": 0}]
    assert updated.execute("select count(*) from donto.stale_revisions()").fetchone() == (0,)
    assert updated.execute("select count(*) from donto.reproject()").fetchone() == (0,)
    # the updated functions work on the old data: a second window size, vectors included
    assert updated.execute("select donto.project_recall(%s, 300)", (rev,)).fetchone()[0] > 0
    assert updated.execute("select count(*) = (select count(*) from donto.x_memory_record) "
                           "from donto.x_memory_lexical").fetchone()[0]


def test_embedded_cluster_lifecycle_as_an_ordinary_user(tmp_path):
    """As root: run the CLI as the unprivileged 'nobody'; otherwise as ourselves."""
    user = "nobody" if os.geteuid() == 0 else None
    home = Path("/tmp") / f"donto-cli-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o777)
    home.chmod(0o1777)  # as /tmp: sticky (a home under a dir others may change is refused)
    env = {k: v for k, v in os.environ.items() if k != "DONTO_DSN"}
    env["DONTO_HOME"] = str(home / "h")
    try:
        r = run_cli_as("db", "start", env=env, user=user)
        assert r.returncode == 0, r.stderr
        assert "started" in r.stdout
        url = run_cli_as("db", "url", env=env, user=user).stdout.strip()
        assert url.startswith("postgresql://donto@/donto?host=")
        r = run_cli_as("migrate", "--json", env=env, user=user)
        assert r.returncode == 0, r.stderr
        assert '"applied"' in r.stdout
        r = run_cli_as("migrate", env=env, user=user)
        assert "up to date" in r.stdout
        r = run_cli_as("migrate", "--status", env=env, user=user)
        assert "applied  001-core.sql" in r.stdout
        psql = subprocess.run(["psql", url, "-Atc", "select count(*) from donto.migration"],
                              capture_output=True, text=True,
                              user=user if user else None)
        assert psql.stdout.strip() == str(len(migrate.migrations())), psql.stderr
        r = run_cli_as("db", "stop", env=env, user=user)
        assert "stopped" in r.stdout
        assert run_cli_as("db", "status", "--json", env=env, user=user).stdout.count(
            '"running": false') == 1
    finally:
        run_cli_as("db", "stop", env=env, user=user)
        shutil.rmtree(home, ignore_errors=True)
