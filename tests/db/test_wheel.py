"""A built wheel, installed into a fresh virtualenv, migrates, installs the extension
and runs the demo: the SQL sources and the demo's example travel inside the wheel.

No network: the wheel is built with --no-build-isolation (setuptools from the test's
environment) and installed with --no-deps; the fresh virtualenv sees the test
environment's packages (the dependencies) through a .pth file, never its donto_pg.
Every command runs from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path

import psycopg
import pytest

from tests.conftest import ROOT, write_chat

# What a clean checkout holds that the wheel build reads.
SOURCES = ["pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE", "donto_pg",
           "sql", "migrations", "extension", "examples"]


def _run(*cmd: str, cwd: Path, timeout: int = 600, **kw) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DONTO_DSN")}
    r = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env={**env, **kw.pop("env", {})}, **kw)
    assert r.returncode == 0, f"{cmd}: {r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def wheel_venv():
    """(wheel path, venv dir): the wheel built from a copy of the sources, installed."""
    # The server (the postgres OS user under root) imports from this venv: it must be
    # readable by others, which pytest's tmp_path (0700) is not.
    top = Path(tempfile.mkdtemp(prefix="donto-wheel-"))
    top.chmod(0o755)
    try:
        src = top / "src"
        src.mkdir()
        for name in SOURCES:
            p = ROOT / name
            if p.is_dir():
                shutil.copytree(p, src / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.egg-info", "_data"))
            else:
                shutil.copy2(p, src / name)
        dist = top / "dist"
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "-q", "-w", str(dist), str(src), cwd=top)
        (wheel,) = dist.glob("donto_pg-*.whl")
        venv = top / "venv"
        _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=top)
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" \
            / "site-packages"
        (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        _run(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
             "--no-deps", "--no-index", "-q", str(wheel), cwd=top)
        os.chmod(top, 0o755)
        for d, dirs, _files in os.walk(top):
            for x in dirs:
                os.chmod(Path(d) / x, 0o755)
        yield wheel, venv
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def empty_db(donto_proc):
    """A new, empty database (no donto schema); its DSN."""
    name = f"{donto_proc.dbname}_wheel"
    admin = dict(host=donto_proc.host, port=donto_proc.port, user=donto_proc.user,
                 dbname="postgres", autocommit=True)
    with psycopg.connect(**admin) as c:
        c.execute(f"drop database if exists {name}")
        c.execute(f"create database {name}")
    yield f"host={donto_proc.host} port={donto_proc.port} user={donto_proc.user} dbname={name}"
    with psycopg.connect(**admin) as c:
        c.execute(f"drop database if exists {name} with (force)")


def test_the_wheel_carries_the_sql_sources_and_the_example(wheel_venv):
    wheel, _ = wheel_venv
    names = set(zipfile.ZipFile(wheel).namelist())
    for d in ("sql", "migrations", "extension"):
        on_disk = {p.name for p in (ROOT / d).iterdir() if p.is_file()}
        assert on_disk and {n for n in on_disk if f"donto_pg/_data/{d}/{n}" in names} == on_disk
    assert "donto_pg/_data/examples/beam/chats/100K/13/chat.json" in names
    assert "donto_pg/_data/examples/beam/README.md" in names  # the example's licence
    assert "donto_pg/py.typed" in names
    licence = [n for n in names if n.endswith(".dist-info/LICENSE")
               or "/licenses/LICENSE" in n]
    assert licence, "the wheel carries the project's licence text"
    assert b"Apache License" in zipfile.ZipFile(wheel).read(licence[0])


def test_wheel_install_migrates_and_installs_the_extension(wheel_venv, empty_db, tmp_path):
    _, venv = wheel_venv
    cli = str(venv / "bin" / "donto-pg")
    here = _run(str(venv / "bin" / "python"), "-c",
                "import donto_pg, donto_pg.demo as d; print(donto_pg.__file__); "
                "print(d.EXAMPLE.is_dir())", cwd=tmp_path).stdout.split()
    assert here[0].startswith(str(venv)) and here[1] == "True"

    r = _run(cli, "migrate", "--json", "--dsn", empty_db, cwd=tmp_path)
    # every migration of the checkout, the newest included, comes from the wheel
    assert json.loads(r.stdout)["applied"] == sorted(
        p.name for p in (ROOT / "migrations").glob("[0-9]*.sql"))
    r = _run(cli, "migrate", "--json", "--dsn", empty_db, cwd=tmp_path)
    assert json.loads(r.stdout)["applied"] == []
    with psycopg.connect(empty_db) as c:
        paths = c.execute(
            "select value from donto.setting where key = 'python_path'").fetchone()[0]
        assert paths[0].startswith(str(venv))  # the server imports the installed package
        # ... and it does: a PL/Python function runs the wheel's donto_pg
        rev = c.execute("select donto.register_revision('doc:1', %s)",
                        ("[user #0] hello\n",)).fetchone()[0]
        assert c.execute("select donto.project_recall(%s)", (rev,)).fetchone()[0] == 1

    # extension install: the files come from the wheel and are current
    r = _run(cli, "extension", "install", "--no-create", cwd=tmp_path)
    assert "donto--0.3.0.sql" in r.stdout and "donto.control" in r.stdout
    with psycopg.connect(empty_db, autocommit=True) as c:
        c.execute("create database " + c.info.dbname + "_ext")
    ext_db = empty_db + "_ext"
    try:
        r = _run(cli, "extension", "install", "--dsn", ext_db, cwd=tmp_path)
        assert "created extension donto" in r.stdout
        with psycopg.connect(ext_db) as c:
            assert c.execute("select extversion from pg_extension where extname = 'donto'"
                             ).fetchone()[0] == "0.3.0"
    finally:
        with psycopg.connect(empty_db, autocommit=True) as c:
            c.execute(f"drop database if exists {c.info.dbname}_ext with (force)")


@pytest.mark.slow
def test_wheel_install_runs_the_demo(wheel_venv, empty_db, tmp_path):
    """The demo from the wheel (on a small conversation: the bundled example's 467 chunks
    take minutes to embed on two busy cores; that the example ships is tested above)."""
    _, venv = wheel_venv
    chat = [{"batch_number": 1, "time_anchor": "March-15-2024", "turns": [[
        {"role": "user", "id": 0, "content": "I moved to Berlin in March."},
        {"role": "assistant", "id": 1, "content": "Noted: Berlin."}]]}]
    conv = write_chat(tmp_path, "1", chat, {"information_extraction": [
        {"question": "Where did I move?", "answer": "Berlin", "source_chat_ids": [0]}]})
    for d in (tmp_path, *tmp_path.rglob("*")):
        d.chmod(0o755 if d.is_dir() else 0o644)
    r = _run(str(venv / "bin" / "donto-pg"), "demo", str(conv), "--dsn", empty_db, cwd=tmp_path)
    assert "(the same: idempotent)" in r.stdout
    assert "returns the same text: yes" in r.stdout


def test_an_editable_install_reads_the_checkout(tmp_path):
    """pip install -e: nothing is copied; the checkout's own sql/ etc. are used."""
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        p = ROOT / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns(
                "__pycache__", "*.egg-info", "_data"))
        else:
            shutil.copy2(p, src / name)
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", str(venv), cwd=tmp_path)
    # setuptools for the in-place build (no isolation) comes from the test's environment
    (venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
     / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run(sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--no-deps", "--no-build-isolation", "--no-index", "-q", "-e", str(src), cwd=tmp_path)
    r = _run(str(venv / "bin" / "python"), "-c",
             "import donto_pg.migrate as m, donto_pg.demo as d; "
             "print(m.SQL_DIR, m.MIGRATIONS_DIR, m.EXTENSION_DIR, d.EXAMPLE.is_dir())",
             cwd=tmp_path)
    assert r.stdout.split() == [str(src / "sql"), str(src / "migrations"),
                                str(src / "extension"), "True"]
    assert not (src / "donto_pg" / "_data").exists()
