"""The writers' locks are rows only the owner can lock (migration 031), attacked by real logins.

Before 031 the donto functions serialized writers with advisory locks. PostgreSQL lets
every role that may connect take any advisory key: a reader, or a login with no donto
grant at all, held pg_advisory_lock(2056, <document>) and every load of that document
waited for as long as its session lasted. And a writer could take the lock of another's
revision with a call that succeeded (donto.index_lexical checked nothing) and hold it.
Now the locks are rows of donto.writer_lock, locked FOR UPDATE as the owner, after the
checks; migrate, which runs before the schema exists, still takes an advisory lock, and
names who holds it when it must wait.
"""

from __future__ import annotations

import json
import threading

import pytest
from psycopg import errors

from donto_pg import migrate
from donto_pg.db import connect as dbconnect
from tests.conftest import run_cli
from tests.db.test_security_definer import turns
from tests.db.test_vector_provenance import BODY, default_model, loaded

# The advisory classes the donto functions took before 031, keyed by an id.
OLD_ID_CLASSES = (2056, 2057, 2058, 2059, 2060, 2063, 2064, 2065, 2071, 2072, 2080, 2085,
                  2086)
HOLD = ("select count(pg_advisory_lock(c, k)) from unnest(%s::int[]) as c, "
        "generate_series(0, 63) as k")
TURN = json.dumps([{"role": "user", "content": "And I like rye bread.", "turn_id": 4}])


def advisory_held(conn, pid: int) -> int:
    return conn.execute("select count(*) from pg_locks where locktype = 'advisory' "
                        "and pid = %s and granted", (pid,)).fetchone()[0]


def a_writers_whole_load(w, iri: str) -> None:
    """Everything a writer does to its own conversation, each call taking its lock(s):
    document, turns, recall, lexical, turn-keys, standing, extraction, summary,
    extend-recall, ab-arm, ab-project, context-indexes, key-indexes, lexical-indexes."""
    rev = loaded(w, iri)
    w.execute("select donto.index_lexical(%s)", (rev,))
    w.execute("select donto.project_extraction(%s)", (rev,))
    w.execute("select donto.record_session_summary(%s, 1, 'Berlin, French.', 'extractive', "
              "'w')", (rev,))
    w.execute("select donto.append_turns(%s, %s)", (iri, TURN))
    w.execute("select donto.ab_register_arm('w80', 'fixed', '{\"window\": 80}')")
    w.execute("select donto.ab_project_arm('w80', %s)", (rev,))
    w.execute("select donto.ensure_context_indexes(%s)", (default_model(w),))
    w.commit()


@pytest.mark.parametrize("group", ["donto_reader", "pg_read_all_settings"])
def test_no_other_role_holds_a_lock_a_writer_waits_for(db, logins, group):
    """A reader, and a login with no donto role, hold every advisory key the functions took
    before 031 (ids 0-63, and the arm's name): a writer's whole load still runs."""
    _, as_attacker = logins(group)
    _, as_writer = logins()
    a, w = as_attacker(), as_writer()
    held = a.execute(HOLD, (list(OLD_ID_CLASSES),)).fetchone()[0]
    held += a.execute("select count(pg_advisory_lock(2070, hashtext('w80')))").fetchone()[0]
    a.commit()
    assert advisory_held(db, a.info.backend_pid) == held == len(OLD_ID_CLASSES) * 64 + 1
    db.commit()
    w.execute("set lock_timeout = '3s'")
    w.commit()
    # the attack is real: the old lock of document 1 is not to be had
    with pytest.raises(errors.LockNotAvailable):
        w.execute("select pg_advisory_xact_lock(2056, 1)")
    w.rollback()
    a_writers_whole_load(w, "doc:lock/writer")
    assert db.execute("select count(*) from donto.writer_lock").fetchone()[0] >= 10
    db.commit()
    # and the locks themselves are out of reach
    for conn in (a, w):
        for sql in ("select from donto.writer_lock for update",
                    "select donto._lock('document', 1)",
                    "select donto._lock_document(1)",
                    "lock table donto.writer_lock in exclusive mode"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql)
            conn.rollback()


def test_a_writers_call_on_anothers_document_holds_nothing_its_owner_waits_for(db, logins):
    """Another writer's calls on the owner's document, refused or not, its transaction then
    left open: the owner's writes to the same document, revision and session go on (3 s lock
    timeout). Before 031, index_lexical (no check) and record_turns of the table already
    recorded (returned its size) succeeded holding their locks. A refused call holds nothing
    (PostgreSQL releases an aborted transaction's locks at the error)."""
    rev = loaded(db, "doc:lock/owner")
    db.execute("select donto.project_extraction(%s)", (rev,))
    table = json.dumps(turns(BODY))
    db.execute("set lock_timeout = '3s'")
    db.commit()
    _, as_writer = logins()
    w = as_writer()
    calls = [  # (sql, args, refused)
        ("select donto.record_turns(%s, %s)", (rev, table), False),
        ("select donto.index_lexical(%s)", (rev,), True),
        ("select donto.register_revision('doc:lock/owner', %s)", (BODY + "x\n",), True),
        ("select donto.append_turns('doc:lock/owner', %s)", (TURN,), True),
        ("select donto.extend_revision('doc:lock/owner', %s, '[]')", (BODY + "x",), True),
        ("select donto.project_recall(%s, 60)", (rev,), True),
        ("select donto.project_turn_keys(%s)", (rev,), True),
        ("select donto.project_standing(%s)", (rev,), True),
        ("select donto.project_extraction(%s)", (rev,), True),
        ("select donto.record_session_summary(%s, 1, 'Berlin.', 'extractive', 'w')", (rev,),
         True),
    ]
    owners = [
        ("select donto.record_turns(%s, %s)", (rev, table)),
        ("select donto.index_lexical(%s)", (rev,)),
        ("select donto.register_revision('doc:lock/owner', %s)", (BODY + "y\n",)),
        ("select donto.append_turns('doc:lock/owner', %s)", (TURN,)),
        ("select donto.project_recall(%s, 60)", (rev,)),
        ("select donto.project_turn_keys(%s)", (rev,)),
        ("select donto.project_standing(%s)", (rev,)),
        ("select donto.project_extraction(%s)", (rev,)),
        ("select donto.record_session_summary(%s, 1, 'Berlin.', 'extractive', 'owner')",
         (rev,)),
    ]
    for sql, args, refused in calls:
        if refused:
            with pytest.raises(errors.InsufficientPrivilege, match="belongs to"):
                w.execute(sql, args)
        else:
            w.execute(sql, args)
        assert w.info.transaction_status.name == ("INERROR" if refused else "INTRANS")
        for osql, oargs in owners:
            db.execute(osql, oargs)
        db.rollback()
        w.rollback()


def test_migrate_waits_for_its_lock_and_names_who_holds_it(db, logins, connect):
    holder, as_holder = logins("donto_reader")
    h = as_holder()
    owner = connect()
    # an application's one-key lock 2055 is not the migration's (it was, found by review)
    h.execute("select pg_advisory_lock(2055)")
    h.commit()
    assert migrate.migrate(owner, lock_wait=0.5) == []
    h.execute("select pg_advisory_lock(1685024372, 2055)")
    h.commit()
    steps: list[str] = []
    with pytest.raises(migrate.MigrationError, match=f"still held after 0.5 s, by pid "
                       rf"{h.info.backend_pid} \(role {holder}"):
        migrate.migrate(owner, lock_wait=0.5, on_step=steps.append)
    assert steps == [f"waiting up to 0.5 s for the migration lock, held by pid "
                     f"{h.info.backend_pid} (role {holder}, application -, idle)"]
    # released while migrate waits: it goes on, and nothing is pending
    release = threading.Timer(1.0, lambda: (
        h.execute("select pg_advisory_unlock(1685024372, 2055)"), h.commit()))
    release.start()
    steps.clear()
    try:
        assert migrate.migrate(owner, lock_wait=30, on_step=steps.append) == []
    finally:
        release.join()
    assert steps[0].startswith("waiting up to 30 s for the migration lock, held by pid")
    assert steps[1:] == [migrate.ALREADY]  # it ran on after the wait (sql/ ran above)
    # the wait is bounded by its own timeout only: the session's setting is as it was
    assert owner.execute("show lock_timeout").fetchone()[0] == "0"


def test_migrate_on_the_command_line_says_whom_it_waits_for(db, logins):
    holder, as_holder = logins("donto_reader")
    h = as_holder()
    h.execute("select pg_advisory_lock(1685024372, 2055)")
    h.commit()
    r = run_cli(db, "migrate", "--lock-wait", "0.2")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    waiting, error = r.stderr.strip().splitlines()
    assert waiting == (f"migrate: waiting up to 0.2 s for the migration lock, held by pid "
                       f"{h.info.backend_pid} (role {holder}, application -, idle)")
    assert error.startswith("error: the migration lock (advisory lock (1685024372, 2055)) is "
                            f"still held after 0.2 s, by pid {h.info.backend_pid} (role {holder}")
    assert "pg_terminate_backend" in error


def test_a_writer_files_no_context_name_for_another_load(db, logins):
    """donto.ensure_context checks nothing: a writer who filed the name of another login's
    next context (in an open transaction) made that load wait on the name's unique index."""
    _, as_writer = logins()
    w = as_writer()
    for sql in ("select donto.ensure_context('ctx:memory/episodic/chat/someone/1', 'recall')",
                "select donto._ensure_lexical_indexes()",
                "select donto._ensure_key_indexes(1)"):
        with pytest.raises(errors.InsufficientPrivilege):
            w.execute(sql)
        w.rollback()


def test_a_summary_filed_before_a_give_away_holds_nothing(db, logins):
    """A login that filed a summary, then lost the document, called record_session_summary
    again: the call returned its old id and kept the new writer's lock."""
    alice, as_alice = logins()
    bob, as_bob = logins()
    a, b = as_alice(), as_bob()
    rev = loaded(a, "doc:lock/given")
    summary = "select donto.record_session_summary(%s, 1, %s, 'extractive', 'sx')"
    a.execute(summary, (rev, "alice's"))
    a.commit()
    db.execute("select donto.give_document('doc:lock/given', %s)", (bob,))
    db.commit()
    with pytest.raises(errors.InsufficientPrivilege, match="belongs to " + bob):
        a.execute(summary, (rev, "alice's again"))
    b.execute("set lock_timeout = '3s'")
    assert b.execute(summary, (rev, "bob's")).fetchone()[0] > 0
    b.commit()
    a.rollback()


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_a_write_needs_read_committed(db, logins, level):
    """Under REPEATABLE READ a register_revision that waited for another writer took its
    snapshot before that writer's revision: both superseded the same one (a fork)."""
    _, as_writer = logins()
    w = as_writer()
    loaded(w, "doc:lock/iso")
    w.execute(f"set transaction isolation level {level}")
    with pytest.raises(errors.InvalidTransactionState,
                       match="READ COMMITTED transaction, not " + level):
        w.execute("select donto.register_revision('doc:lock/iso', %s)", (BODY + "x\n",))
    w.rollback()
    # reading and registering a text already there need no lock
    w.execute(f"set transaction isolation level {level}")
    assert w.execute("select donto.register_revision('doc:lock/iso', %s)",
                     (BODY,)).fetchone()[0] > 0
    w.rollback()


def test_an_index_already_there_takes_no_lock_on_the_vectors(db, logins):
    """CREATE INDEX IF NOT EXISTS took its SHARE lock on donto.embedding before it found the
    index: a writer holding that open stopped every embed."""
    _, as_writer = logins()
    w = as_writer()
    model = default_model(db)
    db.execute("select donto.ensure_embedding_index(%s)", (model,))
    db.commit()
    w.execute("select donto.ensure_embedding_index(%s)", (model,))  # left open
    held = db.execute("select array_agg(l.mode) from pg_locks as l "
                      "where l.pid = %s and l.relation = 'donto.embedding'::regclass",
                      (w.info.backend_pid,)).fetchone()[0] or []
    db.commit()
    assert "ShareLock" not in held
    w.rollback()


def test_migrate_names_the_open_transaction_its_ddl_waits_for(db, logins, connect):
    """migrate's DDL (sql/ drops and makes triggers) waits for every open transaction that
    read a donto table, and every query of the schema queues behind it: the wait is bounded
    by --lock-wait too, and the error names the session."""
    reader, as_reader = logins("donto_reader")
    r = as_reader()
    r.execute("select count(*) from donto.statement")  # left open
    owner = connect()
    with pytest.raises(migrate.MigrationError,
                       match=rf"waited more than 1 s for a lock on a donto table, held by "
                             rf"pid {r.info.backend_pid} \(role {reader}, application -, "
                             r"idle in transaction"):
        migrate.migrate(owner, lock_wait=1)
    r.rollback()
    assert migrate.migrate(owner, lock_wait=30) == []
    with pytest.raises(migrate.MigrationError, match="0 to 2147483 seconds"):
        migrate.migrate(owner, lock_wait=float("inf"))


def test_an_index_check_with_nothing_to_build_holds_nothing(db, logins):
    """ensure_context_indexes took the model's shared locks on every call: a writer holding
    one with nothing to build made every other login's embed wait (the end of donto-pg embed
    calls it)."""
    _, as_writer = logins()
    w = as_writer()
    model = default_model(db)
    db.execute("set lock_timeout = '3s'")
    db.commit()
    w.execute("select donto.ensure_context_indexes(%s)", (model,))  # left open
    w.execute("select donto.ensure_embedding_index(%s)", (model,))
    assert db.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 0
    assert db.execute("select donto.ensure_embedding_index(%s)",
                      (model,)).fetchone()[0] == f"embedding_hnsw_m{model}"
    db.commit()
    w.rollback()


def test_a_model_gets_its_index_with_its_row_and_only_the_owner_makes_a_missing_one(
        db, logins):
    """Between a model's registration and the end of its first embed a writer's
    ensure_embedding_index made the model's index and held CREATE INDEX's lock on
    donto.embedding for as long as its transaction stayed open."""
    model = db.execute("select donto.ensure_embedding_model('lock-m', 'test', 3)").fetchone()[0]
    index = f"donto.embedding_hnsw_m{model}"
    assert db.execute("select to_regclass(%s) is not null", (index,)).fetchone()[0]
    # a model registered before 031 has none: only the owner's session makes it
    db.execute("select set_config('donto.allow_ddl', 'on', true)")
    db.execute(f"drop index {index}")
    db.commit()
    _, as_writer = logins()
    w = as_writer()
    w.execute("select donto.ensure_embedding_index(%s)", (model,))  # left open
    modes = db.execute("select array_agg(mode) from pg_locks where pid = %s "
                       "and relation = 'donto.embedding'::regclass",
                       (w.info.backend_pid,)).fetchone()[0] or []
    assert "ShareLock" not in modes
    assert db.execute("select to_regclass(%s) is null", (index,)).fetchone()[0]
    db.commit()
    w.rollback()
    db.execute("select donto.ensure_embedding_index(%s)", (model,))
    db.commit()
    assert db.execute("select to_regclass(%s) is not null", (index,)).fetchone()[0]
    db.commit()


def test_the_clients_connections_read_committed_whatever_the_default(db, logins):
    """A login whose default isolation was REPEATABLE READ could no longer write through
    donto-pg (donto._lock refuses it); the package's connections set READ COMMITTED."""
    writer, _ = logins()
    db.execute(f"alter role {writer} set default_transaction_isolation = 'repeatable read'")
    db.commit()
    info = db.info
    dsn = (f"host={info.host} port={info.port} user={writer} password=pw "
           f"dbname={info.dbname}")
    for autocommit in (False, True):
        with dbconnect(dsn, autocommit=autocommit) as conn:
            assert conn.execute("show transaction_isolation").fetchone()[0] == "read committed"
            assert conn.execute("select donto.register_revision(%s, %s)",
                                (f"doc:lock/rr{autocommit}", BODY)).fetchone()[0] > 0
