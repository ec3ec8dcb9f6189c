-- PL/Python plumbing. PL/Python bodies stay a few lines: they import plain
-- modules of the donto_pg package (unit-tested as ordinary Python). Where the
-- package lives for the server's Python is the setting python_path, written
-- by `donto-pg migrate` / `donto-pg extension install`.
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

create or replace function donto._py_boot()
returns void
language plpython3u
volatile
set search_path to pg_catalog, pg_temp
as $py$
# Put donto_pg on the server's sys.path (from setting python_path), import its server
# floor, check its version against the SQL's, cache it in GD.
import importlib
import json
import os
import sys

rows = plpy.execute("select value from donto.setting where key = 'python_path'")
paths = json.loads(rows[0]["value"]) if rows.nrows() else []
for p in reversed(paths):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
try:
    server = importlib.import_module("donto_pg.server")
except ImportError as exc:
    plpy.error(
        "donto: the server's Python cannot import donto_pg (%s); python_path = %r. "
        "Run `donto-pg migrate` (or `donto-pg extension install`) from the environment where "
        "donto-pg is installed, and make sure the server's OS user can read it." % (exc, paths)
    )
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
'(PL/Python), using setting python_path; fails (55000) when its version is not '
'donto.sql_version().';
