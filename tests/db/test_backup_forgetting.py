"""Backup and restore of the state the newest features make (migrations 033-035): a
conversation grown by an append, holding words its writer (a real login in donto_writer)
forgot by hand (writer_then recorded), standing statements, an extraction run with claims
and a lease left by a session that is gone. Both install modes, dumped with pg_dump -Fc
and plain pg_dump, restored with the login roles present, and without them (--no-owner
--no-acl, then `donto-pg migrate` and donto.adopt_logins). After the restore: every row
is back, recall and as_of answer as before, the words stay forgotten (a new filing over
them is retracted as it is filed), the old lease holds nothing, I3 holds.
"""

from __future__ import annotations

import json
import os
import uuid

import psycopg
import pytest

from donto_pg import api, build, loader, migrate
from donto_pg.embed import embed_pending
from tests.conftest import CLUSTER
from tests.db.test_backup import (
    PG_BIN,
    _connect,
    _run,
    server,  # noqa: F401 (the fixture)
    snapshot,
)
from tests.db.test_forget_everywhere import SECRET, _long_turn_chat
from tests.db.test_forget_prompts import ELSEWHERE, HYPOTHESIS, QUOTING

IRI = "chat:backup/forgetting"
PW = "pw-backup-7c1d"
QUESTION = "What did I tell you about my bank PIN and the mortgage?"
STANDING = {"role": "user", "content": "From now on always answer me in metric units.",
            "timestamp": "2024-03-09"}


def _as(info: dict, dbname: str, role: str) -> psycopg.Connection:
    return psycopg.connect(host=info["host"], port=info["port"], user=role, password=PW,
                           dbname=dbname)


def _one(conn: psycopg.Connection, sql: str, args: tuple = ()) -> object:
    row = conn.execute(sql, args).fetchone()
    conn.commit()
    return row[0] if row is not None else None


def _pin_block(conn: psycopg.Connection, rev: int) -> int:
    body = _one(conn, "select donto.revision_body(%s)", (rev,))
    at = body.index(SECRET)
    for block, turns in conn.execute("select block_id, turns from donto.extraction_block "
                                     "where revision_id = %s order by seq", (rev,)).fetchall():
        if any(p["char_start"] <= at < p["char_end"] for p in turns):
            conn.commit()
            return block
    raise AssertionError("no block holds the PIN")


def _run_id(conn: psycopg.Connection, name: str) -> int:
    return _one(conn, "select run_id from donto.start_extraction_run(%s, '{}', null, %s)",
                (json.dumps([{"name": "fake", "model": "fake-model",
                              "base_url": "http://x"}]), name))


def _ingest(conn: psycopg.Connection, block: int, run: int, claims: list[dict]) -> dict:
    return _one(conn, "select donto.ingest_extraction(%s, %s, %s, '{\"model\": \"m\"}')",
                (block, run, json.dumps(claims)))


def _pin_claims(conn: psycopg.Connection) -> int:
    return _one(conn, "select count(*) from donto.claim_provenance as c "
                "join donto.statement_current as s on s.statement_id = c.claim_id "
                "where s.object_lit::text like %s", (f"%{SECRET}%",))


def _recall(conn: psycopg.Connection) -> tuple[list, str]:
    rows = conn.execute("select statement_id, chunk_text, round(score::numeric, 6) "
                        "from donto.recall(%s, k => 5)", (QUESTION,)).fetchall()
    payload = conn.execute("select donto.recall_payload(%s, 2000, k => 5)::text",
                           (QUESTION,)).fetchone()[0]
    conn.commit()
    return rows, payload


def fill(owner: psycopg.Connection, info: dict, name: str, alice: str, reader: str) -> dict:
    """The state: returns what the checks after a restore need."""
    a = _as(info, name, alice)
    try:
        chat = _long_turn_chat()
        rev1 = api.add_conversation(a, chat[:4], IRI, embed=False)
        rev = loader.append_turns(a, IRI, [*chat[4:], STANDING,
                                           {"role": "assistant", "content": "Metric it is."}])
        a.commit()
        assert rev != rev1
        a.execute("select donto.project_extraction(%s, '{}')", (rev,))
        a.commit()
        embed_pending(owner, progress=False)
        owner.commit()
        block = _pin_block(a, rev)
        run = _run_id(a, "before-backup")
        _ingest(a, block, run, [HYPOTHESIS, ELSEWHERE, QUOTING])
        # a lease taken by a session that is gone by the dump (another block of the run)
        other = _one(a, "select block_id from donto.extraction_block where revision_id = %s "
                     "and block_id <> %s order by seq limit 1", (rev, block))
        leaser = _as(info, name, alice)
        assert _one(leaser, "select donto.take_extraction_block(%s, %s)",
                    (run, other)) == "taken"
        leaser.close()
        assert _pin_claims(owner) >= 1
        standing = _one(owner, "select count(*) from donto.x_standing x join "
                        "donto.statement_current s using (statement_id) "
                        "where x.revision_id = %s", (rev,))
        assert standing >= 1
        chunk = _one(a, "select statement_id from donto.revision_chunks(%s) "
                     "where chunk_text like %s", (rev, f"%{SECRET}%"))
        before_forgetting = _one(owner, "select now()")
        a.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
        a.commit()
    finally:
        a.close()
    assert _one(owner, "select writer_then from donto.retraction where statement_id = %s",
                (chunk,)) is True
    assert _pin_claims(owner) == 0
    with _as(info, name, reader) as r:
        rows, payload = _recall(r)
    assert rows and not any(SECRET in t for _, t, _ in rows) and SECRET not in payload
    as_of = _one(owner, "select count(*) from donto.statements_as_of(%s, null) "
                 "where statement_id = %s", (before_forgetting, chunk))
    return {"rev": rev, "block": block, "run": run, "other": other, "chunk": chunk,
            "recall": rows, "payload": payload, "before_forgetting": before_forgetting,
            "as_of": as_of}


@pytest.fixture(scope="module")
def roles(server):  # noqa: F811
    admin, _, _ = server
    tag = uuid.uuid4().hex[:8]
    alice, reader = f"bk_alice_{tag}", f"bk_reader_{tag}"
    admin.execute(f"create role {alice} login password '{PW}' in role donto_writer")
    admin.execute(f"create role {reader} login password '{PW}' in role donto_reader")
    yield alice, reader
    for role in (alice, reader):
        admin.execute(f"drop role if exists {role}")


MODES = ["migrate", "extension"]


@pytest.fixture(scope="module")
def source(request, server, roles):  # noqa: F811
    admin, info, create = server
    name = create(f"fg_{request.param}")
    conn = _connect(info, name)
    if request.param == "migrate":
        migrate.migrate(conn)
    else:
        sharedir = build.pg_sharedir() / "extension"
        if not os.access(sharedir, os.W_OK):
            pytest.fail(f"installing the extension into {sharedir} needs root (CI runs as root)")
        build.install_extension()
        build.create_extension(conn)
    conn.commit()
    _connect(info, name).close()
    state = fill(conn, info, name, *roles)
    yield request.param, name, snapshot(conn), state
    conn.close()


def _restore(info: dict, name: str, target: str, how: str, tmp_path) -> None:
    """HOW: psql (a plain dump), pg_restore --single-transaction, or pg_restore -j 2 (two
    sessions loading the tables at once)."""
    env = {**os.environ, "PGHOST": info["host"], "PGPORT": str(info["port"]),
           "PGUSER": info["user"]}
    if how == "psql":
        dump = _run([str(PG_BIN / "pg_dump"), "-d", name], env=env)
        assert dump.returncode == 0, dump.stderr
        r = _run([str(PG_BIN / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target],
                 input=dump.stdout, env=env)
    else:
        archive = tmp_path / "db.dump"
        dump = _run([str(PG_BIN / "pg_dump"), "-Fc", "-f", str(archive), "-d", name], env=env)
        assert dump.returncode == 0, dump.stderr
        opts = ["-j", "2"] if how.endswith("-j 2") else ["--single-transaction"]
        r = _run([str(PG_BIN / "pg_restore"), *opts, "--exit-on-error", "-d", target,
                  str(archive)], env=env)
    assert r.returncode == 0, r.stderr
    assert "ERROR" not in r.stderr, r.stderr


def _check_after(conn: psycopg.Connection, info: dict, target: str, state: dict,
                 alice: str, reader: str) -> None:
    # recall as before, the words still forgotten
    with _as(info, target, reader) as r:
        rows, payload = _recall(r)
        assert (rows, payload) == (state["recall"], state["payload"])
        # anchor still finds text that stands, and as_of still knows what was known then
        assert _one(r, "select char_start from donto.anchor(%s, 'mortgage rates')",
                    (state["rev"],)) is not None
        assert _one(r, "select count(*) from donto.statements_as_of(%s, null) "
                    "where statement_id = %s",
                    (state["before_forgetting"], state["chunk"])) == state["as_of"]
    # a new filing over the forgotten words is retracted as it is filed
    with _as(info, target, alice) as a:
        run = _run_id(a, "after-restore")
        assert _one(a, "select donto.take_extraction_block(%s, %s)",
                    (run, state["block"])) == "forgotten"
        _ingest(a, state["block"], run, [QUOTING, HYPOTHESIS])
        assert _pin_claims(a) == 0
        # the lease of the session gone before the dump holds nothing
        assert _one(a, "select donto.extraction_block_holder(%s, %s)",
                    (state["run"], state["other"])) is None
        assert _one(a, "select donto.take_extraction_block(%s, %s)",
                    (state["run"], state["other"])) == "taken"
    # I3
    with pytest.raises(psycopg.Error, match="I3"):
        conn.execute("delete from donto.retraction")
    conn.rollback()
    with pytest.raises(psycopg.Error, match="I3"):
        conn.execute("update donto.extraction_lease set taken = false")
    conn.rollback()


@pytest.mark.parametrize("how", ["pg_restore", "psql"])
@pytest.mark.parametrize("source", MODES, indirect=True)
def test_restore_keeps_the_forgetting_the_leases_and_the_claims(
        source, server, roles, how, tmp_path):  # noqa: F811
    _restore_and_check(source, server, roles, how, tmp_path)


@pytest.mark.parametrize("source", ["migrate"], indirect=True)
def test_a_migrate_database_restores_with_parallel_jobs(source, server, roles,  # noqa: F811
                                                         tmp_path):
    """pg_restore -j (README): a migrate database's foreign keys and triggers come after its
    data. (An extension database's exist before it, and sessions loading its tables at once
    fail on their order: one session restores it, the test above.)"""
    _restore_and_check(source, server, roles, "pg_restore -j 2", tmp_path)


def _restore_and_check(source, server, roles, how, tmp_path) -> None:  # noqa: F811
    mode, name, before, state = source
    _, info, create = server
    target = create(f"fg_{mode}_r")
    if mode == "extension":
        build.install_extension()
    _restore(info, name, target, how, tmp_path)
    conn = _connect(info, target)
    try:
        if mode == "extension":
            conn.execute("select donto.ensure_embedding_index(model_id) "
                         "from donto.embedding_model")
            conn.commit()
        after = snapshot(conn)
        for key in before:
            assert after[key] == before[key], f"{key} differs after {how} ({mode})"
        _check_after(conn, info, target, state, *roles)
    finally:
        conn.close()


@pytest.fixture(scope="module")
def other_server():
    """A second cluster of its own (no donto roles, no logins): another server."""
    import shutil

    from donto_pg.cluster import PORT, Cluster
    from tests.conftest import TEST_HOME

    base = TEST_HOME / f"other-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, mode=0o755)
    base.chmod(0o755)
    cluster = Cluster(base / "other", settings={"fsync": "off"})
    try:
        cluster.start()
        yield cluster, {"host": str(cluster.sockdir), "port": PORT, "user": "donto"}
    finally:
        if cluster.is_initialized():
            cluster.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("how", ["pg_restore", "psql"])
@pytest.mark.parametrize("source", MODES, indirect=True)
def test_restore_onto_another_server_without_the_roles(source, other_server, roles, how,
                                                       tmp_path):
    """--no-owner --no-acl onto a server that has none of the roles; `migrate` (a migrate
    database) grants again, the same people get their roles and are adopted."""
    mode, name, before, state = source
    cluster, oinfo = other_server
    alice, reader = roles
    target = f"fg_{mode}_{how.replace('_', '')}"
    with psycopg.connect(**cluster.conninfo(), autocommit=True) as admin:
        admin.execute(f"create database {target} template template0")
    # pg_dump reads the source (the test cluster), psql and pg_restore write the other one
    dump_env = {**os.environ, "PGHOST": str(CLUSTER.sockdir), "PGPORT": str(oinfo["port"]),
                "PGUSER": "donto"}
    if mode == "extension":
        build.install_extension()
    opts = ["--no-owner", "--no-acl"] if how != "psql" else ["--no-owner", "--no-privileges"]
    if how == "psql":
        dump = _run([str(PG_BIN / "pg_dump"), *opts, "-d", name], env=dump_env)
        assert dump.returncode == 0, dump.stderr
        r = _run([str(PG_BIN / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", target,
                  "-h", oinfo["host"], "-U", "donto"], input=dump.stdout, env=dump_env)
    else:
        archive = tmp_path / "db.dump"
        dump = _run([str(PG_BIN / "pg_dump"), "-Fc", "-f", str(archive), "-d", name],
                    env=dump_env)
        assert dump.returncode == 0, dump.stderr
        r = _run([str(PG_BIN / "pg_restore"), *opts, "--single-transaction",
                  "--exit-on-error", "-h", oinfo["host"], "-U", "donto", "-d", target,
                  str(archive)], env=dump_env)
    assert r.returncode == 0, r.stderr
    assert "ERROR" not in r.stderr, r.stderr
    conn = _connect(oinfo, target)
    try:
        if mode == "migrate":
            migrate.migrate(conn)
            conn.commit()
        else:
            conn.execute("select donto.ensure_embedding_index(model_id) "
                         "from donto.embedding_model")
            conn.commit()
        after = snapshot(conn)
        for key in ("revision", "statement", "retraction", "extraction_lease", "x_claim"):
            assert after[key] == before[key], f"{key} differs after {how} ({mode})"
        for role, group in ((alice, "donto_writer"), (reader, "donto_reader")):
            if not conn.execute("select 1 from pg_roles where rolname = %s",
                                (role,)).fetchone():
                conn.execute(f"create role {role} login password '{PW}' in role {group}")
        conn.commit()
        stale = {r[0] for r in conn.execute("select login_role from donto.stale_logins()")}
        conn.commit()
        assert alice in stale
        conn.execute("select * from donto.adopt_logins(%s)", ([*stale],))
        conn.commit()
        _check_after(conn, oinfo, target, state, alice, reader)
    finally:
        conn.close()
