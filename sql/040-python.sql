-- PL/Python plumbing. PL/Python bodies stay a few lines: they import plain
-- modules of the donto_pg package (unit-tested as ordinary Python). Where the
-- package lives for the server's Python is the setting python_path, written
-- by `donto-pg migrate` / `donto-pg extension install`.
--
-- Every PL/Python function starts with:
--     if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
--     D = GD['donto_pg']

create or replace function donto._py_boot()
returns void
language plpython3u
volatile
set search_path to pg_catalog, pg_temp
as $py$
# Put donto_pg on the server's sys.path (from setting python_path); cache it in GD.
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
    GD["donto_pg"] = importlib.import_module("donto_pg.plpy_entry")
except ImportError as exc:
    plpy.error(
        "donto: the server's Python cannot import donto_pg (%s); python_path = %r. "
        "Run `donto-pg migrate` (or `donto-pg extension install`) from the environment where "
        "donto-pg is installed, and make sure the server's OS user can read it." % (exc, paths)
    )
$py$;

comment on function donto._py_boot() is
'Load the donto_pg Python package into this backend (PL/Python), using setting python_path.';
