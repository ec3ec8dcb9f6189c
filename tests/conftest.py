"""Test fixtures: a real PostgreSQL 15 with plpython3u and pgvector.

The suite starts its own private cluster (donto_pg.cluster, the same code as
the embedded default) under DONTO_TEST_HOME (default /tmp/donto-pg-tests-<uid>),
or uses the server at DONTO_TEST_DSN's host. pytest-postgresql fills a template
database once per session with `donto-pg migrate`, and every test that asks
for `db` gets its own clone of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from pytest_postgresql import factories
from pytest_postgresql.janitor import DatabaseJanitor

from donto_pg import migrate, settings
from donto_pg.cluster import PORT, SUPERUSER, Cluster
from donto_pg.db import register_vector_if_present

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "beam"
TEST_HOME = Path(os.environ.get("DONTO_TEST_HOME", f"/tmp/donto-pg-tests-{os.getuid()}"))
CLUSTER = Cluster(TEST_HOME, settings={"fsync": "off", "synchronous_commit": "off",
                                       "full_page_writes": "off",
                                       # test_accountability prepares transactions
                                       "max_prepared_transactions": "4"})


SESSIONS = TEST_HOME / "sessions"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def pytest_configure(config: pytest.Config) -> None:
    """Start the shared test cluster; several pytest sessions may use it at once."""
    if hasattr(config, "workerinput"):
        return
    CLUSTER.start()
    SESSIONS.mkdir(parents=True, exist_ok=True)
    (SESSIONS / str(os.getpid())).touch()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the cluster when the last live session using it ends (unless DONTO_TEST_KEEP)."""
    if hasattr(config, "workerinput"):
        return
    (SESSIONS / str(os.getpid())).unlink(missing_ok=True)
    others = [p for p in SESSIONS.glob("*") if p.name.isdigit() and _alive(int(p.name))]
    if not others and not os.environ.get("DONTO_TEST_KEEP"):
        CLUSTER.stop()


def load_schema(*, host: str, port: int, user: str, dbname: str, password: str | None,
                **_: object) -> None:
    """pytest-postgresql loader: migrate the template database."""
    with psycopg.connect(host=host, port=port, user=user, dbname=dbname) as conn:
        migrate.migrate(conn)


donto_proc = factories.postgresql_noproc(
    host=str(CLUSTER.sockdir), port=PORT, user=SUPERUSER, dbname=f"donto_tests_{os.getpid()}",
    load=[load_schema],
)
_db = factories.postgresql("donto_proc")


@pytest.fixture
def db(_db: psycopg.Connection) -> psycopg.Connection:
    """A connection (owner, superuser) to a fresh clone of the migrated template."""
    register_vector_if_present(_db)
    return _db


@pytest.fixture
def connect(db: psycopg.Connection):
    """Open more connections to the test's database (optionally as another role)."""
    opened: list[psycopg.Connection] = []
    info = db.info

    def _connect(role: str | None = None, **kw: object) -> psycopg.Connection:
        conn = psycopg.connect(host=info.host, port=info.port, user=info.user,
                               dbname=info.dbname, **kw)
        if role:
            conn.execute(f"set role {role}")
            conn.commit()
        register_vector_if_present(conn)
        opened.append(conn)
        return conn

    yield _connect
    for c in opened:
        c.close()


@pytest.fixture
def logins(db: psycopg.Connection):
    """make(group) -> (role, connect): real LOGIN roles (password authentication), each a
    member of GROUP only (default donto_writer), for attacks as a real login; dropped
    afterwards."""
    made: list[str] = []
    opened: list[psycopg.Connection] = []
    info = db.info

    def make(group: str = "donto_writer"):
        role = f"login_{uuid.uuid4().hex[:10]}"
        db.execute(f"create role {role} login password 'pw' in role {group}")
        db.commit()
        made.append(role)

        def connect(**kw) -> psycopg.Connection:
            conn = psycopg.connect(host=info.host, port=info.port, user=role, password="pw",
                                   dbname=info.dbname, **kw)
            opened.append(conn)
            return conn
        return role, connect

    yield make
    for c in opened:
        c.close()
    db.rollback()
    for role in made:
        db.execute(f"drop owned by {role}")
        db.execute(f"drop role {role}")
    db.commit()


@contextmanager
def module_database(request: pytest.FixtureRequest, suffix: str) -> Iterator[psycopg.Connection]:
    """A database of a module's own (a clone of the migrated template), dropped afterwards;
    for module-scoped fixtures that load and embed once."""
    proc = request.getfixturevalue("donto_proc")
    dbname = f"{proc.dbname}_{suffix}"
    janitor = DatabaseJanitor(user=proc.user, host=proc.host, port=proc.port, dbname=dbname,
                              template_dbname=proc.template_dbname, password=proc.password)
    janitor.drop()
    with janitor:
        conn = psycopg.connect(host=proc.host, port=proc.port, user=proc.user, dbname=dbname)
        register_vector_if_present(conn)
        try:
            yield conn
        finally:
            conn.close()


@contextmanager
def embedded_module_database(request: pytest.FixtureRequest, tmp_path_factory, suffix: str,
                             batches) -> Iterator[psycopg.Connection]:
    """module_database with BATCHES loaded as BEAM 100K/1 (no questions) and embedded once."""
    from donto_pg import loader
    from donto_pg.embed import embed_pending

    with module_database(request, suffix) as conn:
        d = write_chat(tmp_path_factory.mktemp(suffix), "1", batches)
        res = loader.load_beam(conn, str(d.parent.parent.parent))
        assert [r.ok for r in res] == [True], res[0].error
        conn.commit()
        embed_pending(conn, progress=False)
        conn.commit()
        yield conn


def write_chat(root: Path, cid: str, batches, questions="{}", scale: str = "100K") -> Path:
    """A BEAM conversation directory root/chats/SCALE/CID: chat.json (BATCHES, a value or
    JSON text) and probing_questions/probing_questions.json (QUESTIONS, a value or JSON
    text; None: no questions file)."""
    d = root / "chats" / scale / cid
    d.mkdir(parents=True)
    (d / "chat.json").write_text(batches if isinstance(batches, str) else json.dumps(batches),
                                 encoding="utf-8")
    if questions is not None:
        (d / "probing_questions").mkdir()
        (d / "probing_questions" / "probing_questions.json").write_text(
            questions if isinstance(questions, str) else json.dumps(questions), encoding="utf-8")
    return d


def small_chat(text="I moved to Berlin in March.", anchor="March-15-2024", ids=(0, 1)):
    """The batches of a one-exchange BEAM conversation (a user message and a reply)."""
    return [{"batch_number": 1, "time_anchor": None, "turns": [[
        {"role": "user", "id": ids[0], "time_anchor": anchor, "content": text + " ->-> 1,1",
         "question_type": "main_question", "index": "1,1"},
        {"role": "assistant", "id": ids[1], "content": "Noted: Berlin."},
    ]]}]


def session_batches(sessions) -> list[dict]:
    """BEAM batches from SESSIONS = [(time anchor, [(role, text), ...]), ...]: one batch
    (one exchange) per session, message ids counted from 0."""
    batches, n = [], 0
    for b, (anchor, msgs) in enumerate(sessions, 1):
        turns = []
        for role, text in msgs:
            msg = {"role": role, "id": n, "content": text}
            if not turns:
                msg["time_anchor"] = anchor
            turns.append(msg)
            n += 1
        batches.append({"batch_number": b, "turns": [turns]})
    return batches


def run_cli(db, *args, **kw) -> subprocess.CompletedProcess[str]:
    """Run ``donto-pg ARGS --dsn <the test database>`` in a subprocess."""
    info = db.info
    dsn = f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"
    return subprocess.run([sys.executable, "-m", "donto_pg", *args, "--dsn", dsn],
                          capture_output=True, text=True, cwd=ROOT, timeout=600, **kw)


def run_cli_as(*args: str, env: dict[str, str], user: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """Run ``donto-pg ARGS``; with ``user``, as that OS user (we must be root)."""
    cmd = [sys.executable, "-m", "donto_pg", *args]
    if user:
        # The venv's interpreter may live under root's closed home: run the system
        # Python 3.11 on the same packages, as the server's PL/Python does.
        env = {**env, "PYTHONPATH": os.pathsep.join(settings.python_path())}
        cmd = ["runuser", "-u", user, "--", "/usr/bin/python3", "-m", "donto_pg", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, timeout=180)
