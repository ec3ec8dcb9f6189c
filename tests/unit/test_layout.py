"""The floors of the package stay honest (read with ast, nothing imported by hand).

- ``donto_pg/core/``: pure Python; imports neither psycopg nor plpy nor any donto_pg
  module outside ``core/``.
- ``donto_pg/server/``: what PL/Python bodies call; imports ``core/`` (and the
  package version), never psycopg nor the client modules.
- Every PL/Python body in ``sql/`` is the boot line and one call
  ``GD['donto_pg'].<topic>.<fn>(plpy, ...)`` of a function that exists.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import donto_pg
from tests.conftest import ROOT

PACKAGE = ROOT / "donto_pg"
FORBIDDEN = ("psycopg", "plpy", "pgvector")


def imports(path: Path, root: Path = ROOT) -> list[str]:
    """Every module a file imports, anywhere in it (functions and TYPE_CHECKING too)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            out.append(module)
            out.extend(f"{module}.{a.name}" for a in node.names
                       if (root / Path(*module.split("."), a.name)).with_suffix(".py").exists())
    return out


def floor_files(floor: str) -> list[Path]:
    files = sorted((PACKAGE / floor).rglob("*.py"))
    assert files, f"donto_pg/{floor}/ is empty"
    return files


def top(module: str) -> str:
    return module.split(".")[0]


def core_violations(path: Path, root: Path = ROOT) -> list[str]:
    return [m for m in imports(path, root)
            if top(m) in FORBIDDEN or (top(m) == "donto_pg" and not m.startswith("donto_pg.core"))]


def server_violations(path: Path, root: Path = ROOT) -> list[str]:
    allowed = ("donto_pg.core", "donto_pg.server")
    return [m for m in imports(path, root)
            if top(m) in ("psycopg", "pgvector")
            or (top(m) == "donto_pg" and m != "donto_pg" and not m.startswith(allowed))]


@pytest.mark.parametrize("path", floor_files("core"), ids=lambda p: p.name)
def test_core_is_pure(path):
    bad = core_violations(path)
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}: core/ stays pure"


@pytest.mark.parametrize("path", floor_files("server"), ids=lambda p: p.name)
def test_server_imports_only_core(path):
    bad = server_violations(path)
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}: server/ imports only core/"


def test_the_checker_sees_a_forbidden_import(tmp_path):
    """The checker itself can fail: hidden and relative imports are all seen."""
    (tmp_path / "donto_pg" / "core").mkdir(parents=True)
    (tmp_path / "donto_pg" / "db.py").write_text("")
    bad = tmp_path / "donto_pg" / "core" / "bad.py"
    bad.write_text("def f():\n    import psycopg\n    from .. import db\n    from . import ok\n")
    assert core_violations(bad, tmp_path) == ["psycopg", "donto_pg", "donto_pg.db"]
    assert server_violations(bad, tmp_path) == ["psycopg", "donto_pg.db"]
    (tmp_path / "donto_pg" / "core" / "fine.py").write_text("import re\nfrom . import bad\n")
    assert core_violations(tmp_path / "donto_pg" / "core" / "fine.py", tmp_path) == []


BODY = re.compile(r"language plpython3u.*?as \$py\$\n(.*?)\$py\$", re.S)
CALL = re.compile(r"^return GD\['donto_pg'\]\.([a-z_]+)\.([a-z_]+)\(\s*plpy\b", re.M)
BOOT = "if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')"


def plpython_bodies() -> list[tuple[str, str]]:
    out = []
    for path in sorted((ROOT / "sql").glob("*.sql")):
        for m in BODY.finditer(path.read_text(encoding="utf-8")):
            if "def " not in m.group(1) and "importlib" not in m.group(1):
                out.append((path.name, m.group(1)))
    return out


def test_every_plpython_body_is_one_call_into_the_server_floor():
    bodies = plpython_bodies()
    assert len(bodies) >= 9
    for name, body in bodies:
        lines = body.strip().splitlines()
        assert lines[0] == BOOT, f"{name}: a PL/Python body starts with the boot line"
        call = CALL.search(body)
        assert call and len(CALL.findall(body)) == 1, f"{name}: {body!r}"
        topic, fn = call.groups()
        module = importlib.import_module(f"donto_pg.server.{topic}")
        assert callable(getattr(module, fn, None)), f"{name}: donto_pg.server.{topic}.{fn}"
        assert "import" not in body, f"{name}: bodies import nothing ({body!r})"



def test_the_released_boot_module_carries_every_topic_the_sql_calls():
    """A backend that booted a release's SQL keeps donto_pg.plpy_entry in GD['donto_pg']
    after ALTER EXTENSION donto UPDATE, and the current bodies call
    GD['donto_pg'].<topic>.<fn> on it: every topic must be there (standing and append were
    not: reproject and append_turns failed in that session)."""
    from donto_pg import plpy_entry

    topics = {CALL.search(body).group(1) for _, body in plpython_bodies()}
    assert {"append", "standing"} <= topics
    for topic in topics:
        assert getattr(plpy_entry, topic, None) is importlib.import_module(
            f"donto_pg.server.{topic}"), f"donto_pg.plpy_entry lacks the topic {topic}"

def test_sql_version_is_the_package_version():
    text = (ROOT / "sql" / "040-python.sql").read_text(encoding="utf-8")
    m = re.search(r"function donto\.sql_version\(\).*?return '([^']+)';", text, re.S)
    assert m, "sql/040-python.sql defines donto.sql_version()"
    assert m.group(1) == donto_pg.__version__, (
        "bump donto.sql_version() in sql/040-python.sql with donto_pg.__version__")


LOCK = re.compile(r"donto\._lock\('([\w-]+)'|_LOCK_KEY = (\d+)")


def lock_keys() -> dict[str, list[str]]:
    """Lock class (donto._lock) or advisory key (migrate's) -> the functions that take it
    (sql/ and the Python package)."""
    out: dict[str, list[str]] = {}
    for path in [*sorted((ROOT / "sql").glob("*.sql")), *sorted(PACKAGE.rglob("*.py"))]:
        where = path.name
        for line in path.read_text(encoding="utf-8").splitlines():
            fn = re.match(r"create or replace function (donto\.\w+)", line)
            if fn:
                where = fn.group(1)
            for m in LOCK.finditer(line):
                out.setdefault(m.group(1) or m.group(2), []).append(where)
    return out


def test_each_lock_has_one_place_and_is_listed_in_the_readme():
    keys = lock_keys()
    assert len(keys) >= 10
    assert {k: v for k, v in keys.items() if len(v) > 1} == {}, "a lock taken in two places"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `?([\w-]+)`? +\| `([\w.]+)`", readme, re.M))
    code = {k: v[0] for k, v in keys.items()}
    code["2055"] = "donto_pg.migrate.migrate"  # the Python side names its module
    assert table == code
    # advisory locks are the migration's alone: any connected role could hold another
    sql = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "sql").glob("*.sql"))
    assert "pg_advisory" not in sql
