-- PL/Python plumbing. PL/Python bodies stay a few lines: they import plain
-- modules of the donto_pg package (unit-tested as ordinary Python). Where the
-- package lives for the server's Python (donto._python_path):
--   1. the setting donto.python_path (directories separated by ':'), from
--      postgresql.conf, ALTER SYSTEM or ALTER DATABASE / ALTER ROLE ... SET:
--      the way a DBA configures a server;
--   2. else the stored setting python_path in donto.setting, written by
--      `donto-pg migrate` / `donto-pg extension install`.
-- The server runs that code as its OS user, so donto.python_path is trusted only
-- from those sources (only a superuser writes them); a value given by SET or by
-- PGOPTIONS is refused, and so is the stored one when donto.setting's owner (who may
-- write it) is not a superuser.
--
-- Every PL/Python function is two lines over the server floor (donto_pg.server):
--     if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
--     return GD['donto_pg'].<topic>.<fn>(plpy, ...)

create or replace function donto.sql_version()
returns text
language sql
immutable
security invoker
set search_path to pg_catalog, pg_temp
/* The donto-pg version these SQL functions belong to; the server's Python package
   (donto_pg.__version__) must be the same (checked by donto._py_boot). A unit test keeps
   it equal to the package's version. */
return '0.3.0';

comment on function donto.sql_version() is
'The donto-pg version of the installed SQL; donto._py_boot refuses a donto_pg package '
'of another version. Immutable, invoker.';

create or replace function donto._python_path()
returns table (paths text[], source text)
language plpgsql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The directories the server's Python imports donto_pg from, and where they were set:
'donto.python_path' (server or database configuration) or 'donto.setting' (written by
donto-pg). Refuses (42501) a donto.python_path that only this session or connection set.
Security definer: pg_file_settings is for superusers (the owner of the extension).
*/
declare
    v_value text := nullif(
        pg_catalog.current_setting('donto.python_path', true), ''
    );
begin
    if v_value is not null then
        if exists (
            select from pg_catalog.pg_db_role_setting as s
            where
                s.setdatabase in (
                    0, (select d.oid from pg_catalog.pg_database as d
                        where d.datname = pg_catalog.current_database())
                )
                and s.setrole in (
                    0, (select r.oid from pg_catalog.pg_roles as r
                        where r.rolname = session_user)
                )
                and ('donto.python_path=' || v_value) = any(s.setconfig)
        ) or exists (
            select from pg_catalog.pg_file_settings as f
            where f.name = 'donto.python_path' and f.setting = v_value and f.applied
        ) then
            return query select pg_catalog.string_to_array(v_value, ':'), 'donto.python_path';
            return;
        end if;
        raise exception
            'donto: donto.python_path = ''%'' was set by this session or connection '
            '(SET or PGOPTIONS); it names the code the server runs, so it is read only from '
            'postgresql.conf, ALTER SYSTEM or ALTER DATABASE / ALTER ROLE ... SET',
            v_value
            using errcode = '42501',
            hint = pg_catalog.format(
                'As a superuser: ALTER DATABASE %I SET donto.python_path = ''%s''; '
                'then reconnect.', pg_catalog.current_database(), v_value
            );
    end if;
    -- The stored path names code the server runs as its OS user, so it is read only from a
    -- table a superuser owns: the owner may write donto.setting, and an owner that is no
    -- superuser (a restore onto a role made with a plain CREATE ROLE) must not gain the
    -- server's OS user by it.
    if exists (select 1 from donto.setting as s where s.key = 'python_path')
       and not (select r.rolsuper from pg_catalog.pg_class as c
                inner join pg_catalog.pg_roles as r on c.relowner = r.oid
                where c.oid = 'donto.setting'::regclass) then
        raise exception
            'donto: donto.setting (python_path) belongs to %, not a superuser: the server '
            'runs the code it names, so it is read only when a superuser owns it',
            (select c.relowner::regrole from pg_catalog.pg_class as c
             where c.oid = 'donto.setting'::regclass)
            using errcode = '42501',
            hint = pg_catalog.format(
                'As a superuser: ALTER DATABASE %I SET donto.python_path = ''<dirs>'' '
                '(`donto-pg extension python-path` prints it); then reconnect.',
                pg_catalog.current_database());
    end if;
    return query
    select array(select pg_catalog.jsonb_array_elements_text(s.value)), 'donto.setting'
    from donto.setting as s where s.key = 'python_path';
end;
$$;

comment on function donto._python_path() is
'Where the server''s Python finds donto_pg: setting donto.python_path (postgresql.conf, '
'ALTER SYSTEM, ALTER DATABASE/ROLE SET; never SET or PGOPTIONS), else donto.setting.';

create or replace function donto._py_boot()
returns void
language plpython3u
volatile
set search_path to pg_catalog, pg_temp
as $py$
# Put donto_pg on the server's sys.path (donto._python_path), import its server
# floor, check its version against the SQL's, cache it in GD.
import importlib
import os
import re
import sys

# donto._python_path() names the code this backend will run as the server's OS user. Its
# owner may replace it (CREATE OR REPLACE, past the DDL guard), so it counts only while a
# superuser owns it; this function is PL/Python, which only a superuser can replace.
owner = plpy.execute(
    "select r.rolname, r.rolsuper from pg_catalog.pg_proc as p "
    "inner join pg_catalog.pg_roles as r on p.proowner = r.oid "
    "where p.oid = pg_catalog.to_regprocedure('donto._python_path()')")
if not owner.nrows() or not owner[0]["rolsuper"]:
    plpy.error(
        "donto: donto._python_path() %s: it names the code the server runs as its OS user, "
        "so donto_pg is loaded only while a superuser owns it"
        % ("belongs to %s, not a superuser" % owner[0]["rolname"] if owner.nrows()
           else "does not exist"),
        hint="As a superuser: REASSIGN OWNED BY <that role> TO <a superuser> in this "
             "database, or restore it as a superuser with --no-owner (README, Backup and "
             "restore).", sqlstate="42501")
row = plpy.execute("select paths, source from donto._python_path()")
paths = list(row[0]["paths"] or []) if row.nrows() else []
source = row[0]["source"] if row.nrows() else None
db = plpy.execute("select pg_catalog.current_database() as d")[0]["d"]
fix = (
    "as a superuser run ALTER DATABASE %s SET donto.python_path = '<dirs>' (the statement "
    "`donto-pg extension python-path %s` prints where donto-pg is installed), or set "
    "donto.python_path in postgresql.conf; then reconnect" % (plpy.quote_ident(db), db)
)
if source != "donto.python_path" and not plpy.execute(
        "select from pg_catalog.pg_extension where extname = 'donto'").nrows():
    fix = "run `donto-pg migrate` from the environment where donto-pg is installed, or " + fix
if not paths:
    plpy.error("donto: the server's Python does not know where donto_pg is installed "
               "(donto.python_path is not set and donto.setting has no python_path): " + fix)
# A site-packages dir of another minor version (lib/python3.X) holds compiled
# modules this interpreter cannot load: say so instead of failing on an import.
here = "%d.%d" % sys.version_info[:2]
for p in paths:
    m = re.search(r"python(\d+\.\d+)", p)
    if m and m.group(1) != here:
        plpy.error(
            "donto: the server's Python is %s (%s) but %s names a package installed for "
            "Python %s (%s): install donto-pg with a Python %s (python%s -m venv ...) and "
            "point donto.python_path at it" % (here, sys.executable, source, m.group(1), p,
                                              here, here))
for p in reversed(paths):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no bars in the server log
try:
    server = importlib.import_module("donto_pg.server")
except ImportError as exc:
    plpy.error(
        "donto: the server's Python cannot import donto_pg (%s) from %s = %r: %s; and make "
        "sure the server's OS user can read those directories" % (exc, source, paths, fix))
sql_version = plpy.execute("select donto.sql_version() as v")[0]["v"]
if server.__version__ != sql_version:
    plpy.error(
        "donto: the server's Python imports donto_pg %s (from %s) but the installed donto SQL "
        "is version %s. Upgrade the SQL with `donto-pg migrate` (or ALTER EXTENSION donto "
        "UPDATE after `donto-pg extension install`) from donto-pg %s, or point python_path at "
        "a donto-pg %s install." % (server.__version__, os.path.dirname(server.__file__),
                                   sql_version, server.__version__, sql_version),
        sqlstate="55000",
    )
GD["donto_pg"] = server
$py$;

comment on function donto._py_boot() is
'Load the server floor of the donto_pg package (donto_pg.server) into this backend '
'(PL/Python), from donto._python_path() while a superuser owns it (42501 otherwise); '
'refuses a package installed for another Python minor version, and fails (55000) when its '
'version is not donto.sql_version().';

create or replace function donto.warmup(model text default null)
returns jsonb
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Load what the first donto.recall of a connection would load: the donto_pg package and the
embedding model (MODEL, null: the default registered one), about 4 s and 0.5 GB per backend.
Call it once on each new server connection (a pool's connect hook, e.g. psycopg_pool's
configure callback): select donto.warmup();
Returns {"model": name or null, "seconds": time taken}.
*/
declare
    v_start timestamptz := pg_catalog.clock_timestamp();
    v_model text;
begin
    perform donto._py_boot();
    if model is not null or exists (select from donto.embedding_model) then
        select m.name into v_model from donto.embedding_model as m
        where m.model_id = donto.embedding_model_id(model);
    end if;
    if v_model is not null then
        perform donto.embed_query('warm up', v_model);
    end if;
    return pg_catalog.jsonb_build_object(
        'model', v_model,
        'seconds', pg_catalog.round(
            extract(epoch from pg_catalog.clock_timestamp() - v_start)::numeric, 3
        )
    );
end;
$$;

comment on function donto.warmup(text) is
'Load donto_pg and the embedding model into this backend, so that the first donto.recall is '
'fast: for poolers to call on connect. Returns {model, seconds}.';
