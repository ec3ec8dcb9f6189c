"""A login name stands for the role that first filed under it (migration 029), attacked by
real donto_writer logins.

Rows, documents, runs, gates and arms name their login. Before 029 a role dropped and made
again under the same name (another person) inherited all of them, and a member of the new
role wrote to the old one's documents. Now a login's first row binds its name to its
role's OID; another role of that name files nothing until the owner adopts it
(donto.adopt_logins), as after a restore onto another server.
"""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from psycopg import errors

from donto_pg import migrate
from tests.conftest import run_cli
from tests.db.test_document_owner import BASELINE
from tests.db.test_migrate import fresh_db  # noqa: F401  (a fixture)
from tests.db.test_vector_provenance import BODY, loaded

STANDS = "stands here for another role"


def oid(db, role: str) -> int:
    row = db.execute("select oid::bigint from pg_roles where rolname = %s", (role,)).fetchone()
    db.commit()
    return row[0]


def bindings(db, role: str) -> list[tuple]:
    rows = db.execute("select role_oid::bigint, reason from donto.login_binding "
                      "where login_role = %s order by binding_id", (role,)).fetchall()
    db.commit()
    return rows


def make_again(db, role: str) -> None:
    """Drop the login ROLE and make a new role of the same name (another person)."""
    db.execute(f"drop role {role}")
    db.execute(f"create role {role} login password 'pw' in role donto_writer")
    db.commit()


def test_a_first_row_binds_the_login_once_and_the_record_is_append_only(db, logins):
    writer, as_writer = logins()
    w = as_writer()
    assert bindings(db, writer) == []
    loaded(w, "doc:bind/first", BODY.replace("Berlin", "Oslo"))
    assert bindings(db, writer) == [(oid(db, writer), "first row")]
    loaded(w, "doc:bind/second", BODY.replace("Berlin", "Lima"))
    assert w.execute("select donto._session_login()").fetchone() == (writer,)
    w.commit()
    assert bindings(db, writer) == [(oid(db, writer), "first row")]
    # the owner's login is bound on its first row too (its session is never refused)
    loaded(db, "doc:bind/owner")
    assert bindings(db, db.info.user) == [(oid(db, db.info.user), "first row")]
    # a writer writes no binding of its own; nobody changes one
    with pytest.raises(errors.InsufficientPrivilege):
        w.execute("insert into donto.login_binding (login_role, role_oid, reason) "
                  "values ('someone', 1, 'adopted')")
    w.rollback()
    with pytest.raises(psycopg.Error, match="invariant I3"):
        db.execute("update donto.login_binding set role_oid = 1")
    db.rollback()
    # every insert into a donto table (but the record itself, the ledger and the settings)
    # checks the login first, once per statement, also under session_replication_role
    unguarded = db.execute(
        "select c.relname from pg_class c where c.relnamespace = 'donto'::regnamespace "
        "and c.relkind = 'r' and not exists (select 1 from pg_trigger t where t.tgrelid = c.oid"
        " and t.tgname = 'login_guard' and t.tgenabled = 'A') order by 1").fetchall()
    db.commit()
    assert unguarded == [("login_binding",), ("migration",), ("setting",)]


def test_a_login_made_again_inherits_nothing_until_the_owner_adopts_it(db, logins):
    alice, as_alice = logins()
    bob, as_bob = logins()
    a = as_alice()
    rev = loaded(a, "doc:bind/alice", BODY.replace("Berlin", "Rome"))
    a.execute("select donto.ab_register_arm('w80', 'fixed', '{\"window\": 80}')")
    # a run the new role would resume (same settings: the same login-scoped key)
    a.execute("select donto.start_extraction_run(%s, '{}', null, null)", (BASELINE,))
    a.commit()
    a.close()
    model = db.execute("select donto.ensure_embedding_model('m3', 'test', 3)").fetchone()[0]
    old = oid(db, alice)
    make_again(db, alice)
    new = oid(db, alice)
    assert new != old
    db.execute(f"grant {alice} to {bob}")
    db.commit()
    a2, b = as_alice(), as_bob()
    longer = BODY.replace("Berlin", "Rome") + "\n[user #4] and Naples\n"
    attacks = [
        ("select donto.register_revision('doc:bind/alice', %s)", (longer,)),
        ("select donto.register_revision('doc:bind/other', %s)", (BODY,)),
        ("select donto.append_turns('doc:bind/alice', %s)",
         (json.dumps([{"role": "user", "content": "hi", "turn_id": 4}]),)),
        ("select donto.project_recall(%s, 100)", (rev,)),
        ("select donto.record_questions(%s, %s)",
         (rev, json.dumps([{"ability": "x", "index": 0, "question": "q?", "answer": "a"}]))),
        ("select donto.retract((select min(statement_id) from donto.x_memory_record "
         "where revision_id = %s), 'mine')", (rev,)),
        ("select donto.ab_project_arm('w80', %s)", (rev,)),
        ("select donto.ab_register_arm('w90', 'fixed', '{\"window\": 90}')", None),
        # a writer's own vector of its own chunk, filed directly (027's one column grant)
        ("insert into donto.embedding (statement_id, model_id, embedding) select "
         "min(statement_id), %s, '[1, 0, 0]' from donto.x_memory_record where revision_id = %s",
         (model, rev)),
        ("select run_id from donto.start_extraction_run(%s, '{}', null, null)", (BASELINE,)),
    ]
    for sql, args in attacks:
        with pytest.raises(errors.InsufficientPrivilege, match=STANDS) as e:
            a2.execute(sql, args)
        assert "adopt_logins" in e.value.diag.message_hint, sql
        a2.rollback()
    # a member of the new role adds nothing to the old one's documents either
    with pytest.raises(errors.InsufficientPrivilege, match="belongs to " + alice) as e:
        b.execute("select donto.register_revision('doc:bind/alice', %s)", (longer,))
    assert STANDS in e.value.diag.message_hint
    b.rollback()
    # reading is not adding
    assert a2.execute("select count(*) from donto.x_memory_record where revision_id = %s",
                      (rev,)).fetchone()[0] > 0
    a2.commit()
    # the owner sees it, gives nothing to the name, and a writer adopts nothing
    assert db.execute("select login_role, bound_oid::bigint, role_oid::bigint "
                      "from donto.stale_logins()").fetchall() == [(alice, old, new)]
    with pytest.raises(errors.ObjectNotInPrerequisiteState, match=STANDS):
        db.execute("select donto.give_document('doc:bind/alice', %s)", (alice,))
    db.rollback()
    with pytest.raises(errors.InsufficientPrivilege, match="only the schema owner"):
        b.execute("select * from donto.adopt_logins()")
    b.rollback()
    with pytest.raises(errors.InvalidParameterValue, match="no role no_such_login"):
        db.execute("select * from donto.adopt_logins(array['no_such_login'])")
    db.rollback()
    # migrate says so (the step after a restore onto another server)
    r = run_cli(db, "migrate")
    assert r.returncode == 0 and f"login name(s) {alice} stand here" in r.stderr, r.stderr
    assert "adopt_logins(array[" in r.stderr
    # the owner adopts it (the same person, say after a restore): all of it is hers again
    assert db.execute("select adopted_login, old_oid::bigint, new_oid::bigint "
                      "from donto.adopt_logins()").fetchall() == [(alice, old, new)]
    db.commit()
    assert db.execute("select * from donto.adopt_logins()").fetchall() == []
    assert db.execute("select count(*) from donto.stale_logins()").fetchone()[0] == 0
    db.commit()
    assert bindings(db, alice) == [(old, "first row"), (new, "adopted")]
    assert a2.execute("select donto.register_revision('doc:bind/alice', %s)",
                      (longer,)).fetchone()[0] > rev
    assert a2.execute("select donto.ab_project_arm('w80', %s)", (rev,)).fetchone()[0] > 0
    a2.commit()
    assert b.execute("select donto.register_revision('doc:bind/alice', %s)",
                     (longer + "b\n",)).fetchone()[0] > rev
    b.commit()


def test_giving_a_document_binds_a_login_never_seen(db, logins):
    loaded(db, "doc:bind/given")
    carol, as_carol = logins()
    db.execute("select donto.give_document('doc:bind/given', %s)", (carol,))
    db.commit()
    assert bindings(db, carol) == [(oid(db, carol), "given")]
    # made again before its first row: the new role is not given what the old one was
    make_again(db, carol)
    with pytest.raises(errors.InsufficientPrivilege, match=STANDS):
        as_carol().execute("select donto.register_revision('doc:bind/given', %s)",
                           (BODY + "c\n",))


def test_an_upgrade_binds_the_logins_that_filed_rows(fresh_db, logins):  # noqa: F811
    conn = fresh_db()
    migrate.migrate(conn, upto="028")
    writer, _ = logins()
    for iri, login in (("doc:up/w", writer), ("doc:up/gone", f"{writer}_x"),
                       ("doc:up/owner", conn.info.user)):
        conn.execute("insert into donto.document (iri) values (%s)", (iri,))
        conn.execute("insert into donto.revision (document_id, sha256, body, body_chars, "
                     "login_role) select document_id, sha256(%s::bytea), %s, 1, %s "
                     "from donto.document where iri = %s", ("x", "x", login, iri))
    conn.commit()
    migrate.migrate(conn)
    # each login is bound to the role of its name now; a name no role has, to OID 0
    owner = conn.info.user
    assert conn.execute("select login_role, role_oid::bigint, reason from donto.login_binding "
                        "order by 1").fetchall() == sorted([
                            (writer, oid(conn, writer), "upgrade"),
                            (f"{writer}_x", 0, "upgrade"),
                            (owner, oid(conn, owner), "upgrade")])
    # a role made under the dropped name later inherits nothing until the owner adopts it
    conn.execute(f"create role {writer}_x")
    conn.commit()
    assert conn.execute("select login_role, bound_oid::bigint, was_owner from "
                        "donto.stale_logins()").fetchall() == [(f"{writer}_x", 0, None)]
    # whose it was is unknown: adopting everything leaves it to be named
    assert conn.execute("select * from donto.adopt_logins()").fetchall() == []
    conn.rollback()
    conn.execute(f"drop role {writer}_x")
    conn.commit()


def test_a_binding_of_another_server_and_a_renamed_login_are_stale(db, logins):
    alice, as_alice = logins()
    a = as_alice()
    loaded(a, "doc:bind/srv", BODY.replace("Berlin", "Kyiv"))
    a.close()
    # a dump of another server where alice had the same OID (clusters set up alike count
    # role OIDs alike): the binding restored here is not this server's alice
    db.execute("insert into donto.login_binding (login_role, role_oid, server_id, owner, "
               "reason) select %s, oid, donto._server_id() + 1, false, 'adopted' from pg_roles "
               "where rolname = %s", (alice, alice))
    db.commit()
    with pytest.raises(errors.InsufficientPrivilege, match=STANDS):
        as_alice().execute("select donto.register_revision('doc:bind/srv2', %s)", (BODY,))
    assert db.execute("select login_role, bound_oid::bigint, role_oid::bigint, other_server, "
                      "renamed_to from donto.stale_logins()").fetchall() == [
        (alice, oid(db, alice), oid(db, alice), True, None)]
    assert [r[0] for r in db.execute("select adopted_login from donto.adopt_logins()")] \
        == [alice]
    db.commit()
    assert as_alice().execute("select donto.register_revision('doc:bind/srv2', %s)",
                              (BODY,)).fetchone()[0] > 0
    # renamed: the old name's work is the renamed role's to claim, so adopting everything
    # leaves it, and only naming it adopts it for the new role of the old name
    db.execute(f"alter role {alice} rename to {alice}_2")
    db.execute(f"create role {alice} login password 'pw' in role donto_writer")
    db.commit()
    assert db.execute("select login_role, renamed_to from donto.stale_logins()").fetchall() \
        == [(alice, f"{alice}_2")]
    # each is told which: the new alice of the rename, the renamed one of the give
    with pytest.raises(errors.InsufficientPrivilege, match=f"now named {alice}_2") as e:
        as_alice().execute("select donto.register_revision('doc:bind/srv3', %s)", (BODY,))
    assert "log in under a name of your own" in e.value.diag.message_hint
    renamed = psycopg.connect(host=db.info.host, port=db.info.port, user=f"{alice}_2",
                              password="pw", dbname=db.info.dbname)
    with pytest.raises(errors.InsufficientPrivilege, match="belongs to " + alice) as e:
        renamed.execute("select donto.register_revision('doc:bind/srv', %s)", (BODY + "r\n",))
    assert f"gives the document to {alice}_2" in e.value.diag.message_hint
    renamed.close()
    assert db.execute("select * from donto.adopt_logins()").fetchall() == []
    assert db.execute("select adopted_login from donto.adopt_logins(%s)",
                      ([alice],)).fetchall() == [(alice,)]
    db.execute(f"drop role {alice}_2")
    db.commit()


def test_two_first_inserts_at_once_bind_once(db, logins):
    writer, as_writer = logins()
    first, second = as_writer(), as_writer()
    new = "select donto.register_revision(%s, %s)"
    first.execute(new, ("doc:bind/race1", BODY))  # bound, not yet committed
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(
        second.execute(new, ("doc:bind/race2", BODY)).fetchone()[0]))
    t.start()
    first.commit()
    t.join(30)
    second.commit()
    assert len(done) == 1
    assert bindings(db, writer) == [(oid(db, writer), "first row")]


def test_an_owners_login_is_bound_and_not_adopted_for_a_writer_of_its_name(db, logins):
    admin, as_admin = logins(db.info.user)  # a member of the schema's owner
    ad = as_admin()
    run = ad.execute("select run_id from donto.start_extraction_run(%s, '{}', null, 'a')",
                     (BASELINE,)).fetchone()[0]
    ad.commit()
    ad.close()
    assert db.execute("select reason, owner from donto.login_binding where login_role = %s",
                      (admin,)).fetchall() == [("first row", True)]
    db.commit()
    # the admin's login is dropped and its name given to a writer (another person)
    db.execute(f"drop role {admin}")
    db.execute(f"create role {admin} login password 'pw' in role donto_writer")
    db.commit()
    w = as_admin()
    for sql, args in (("select donto.record_extraction_event(%s, 'failed', '{}')", (run,)),
                      ("select donto.start_extraction_run(%s, '{}', null, 'a')", (BASELINE,))):
        with pytest.raises(errors.InsufficientPrivilege, match=STANDS):
            w.execute(sql, args)
        w.rollback()
    assert db.execute("select was_owner, owner_now from donto.stale_logins() "
                      "where login_role = %s", (admin,)).fetchone() == (True, False)
    # adopting everything leaves it: only naming it, once checked, gives it the admin's work
    assert db.execute("select * from donto.adopt_logins()").fetchall() == []
    assert db.execute("select adopted_login from donto.adopt_logins(%s)",
                      ([admin],)).fetchall() == [(admin,)]
    db.commit()


def test_an_admins_measurements_and_a_promotion_are_on_the_record(db, logins):
    rev = loaded(db, "doc:bind/measured")
    db.execute("select donto.ab_register_arm('w80', 'fixed', '{\"window\": 80}')")
    db.commit()
    admin, as_admin = logins(db.info.user)
    ad = as_admin()
    assert ad.execute("select donto.ab_project_arm('w80', %s)", (rev,)).fetchone()[0] > 0
    ad.commit()
    assert bindings(db, admin) == [(oid(db, admin), "first row")]
    # a writer made an admin is bound again, as one
    writer, as_writer = logins()
    loaded(as_writer(), "doc:bind/promoted", BODY.replace("Berlin", "Quito"))
    db.execute(f"grant {db.info.user} to {writer}")
    db.commit()
    loaded(as_writer(), "doc:bind/promoted2", BODY.replace("Berlin", "Lagos"))
    assert db.execute("select reason, owner from donto.login_binding where login_role = %s "
                      "order by binding_id", (writer,)).fetchall() \
        == [("first row", False), ("owner", True)]
    db.commit()
    # a writer's name given to an admin: what the writer filed is not the owner's until the
    # owner adopts the name
    other, as_other = logins()
    loaded(as_other(), "doc:bind/other", BODY.replace("Berlin", "Cairo"))
    db.execute(f"drop role {other}")
    db.execute(f"create role {other} login password 'pw' in role {db.info.user}")
    db.commit()
    assert db.execute("select donto._owners_login(%s)", (other,)).fetchone() == (False,)
    db.execute("select * from donto.adopt_logins(%s)", ([other],))
    assert db.execute("select donto._owners_login(%s)", (other,)).fetchone() == (True,)
    db.commit()
    # the helper that attaches triggers is the owner's alone
    assert db.execute("select has_function_privilege('donto_writer', "
                      "'donto._trigger_every_table(text, text, text, text[])', 'execute')"
                      ).fetchone() == (False,)
    db.commit()


def restored_from_elsewhere(db, login: str, owner: bool) -> None:
    """LOGIN's binding as a dump of another cluster (same OID) brings it."""
    db.execute("insert into donto.login_binding (login_role, role_oid, server_id, owner, "
               "reason) select %s, oid, donto._server_id() + 1, %s, 'adopted' from pg_roles "
               "where rolname = %s", (login, owner, login))
    db.commit()


def test_after_a_restore_the_owner_takes_back_its_own_name(db, logins):
    me = db.info.user
    loaded(db, "doc:bind/mine")
    admin, as_admin = logins(me)
    loaded(as_admin(), "doc:bind/admins", BODY.replace("Berlin", "Accra"))
    restored_from_elsewhere(db, me, True)
    restored_from_elsewhere(db, admin, True)
    assert [r[0] for r in db.execute("select login_role from donto.stale_logins()")] \
        == sorted([me, admin])
    db.commit()
    # migrate (the owner's session) takes back the owner's own name, and names the admin
    r = run_cli(db, "migrate")
    assert r.returncode == 0 and f"login name(s) {admin} stand here" in r.stderr, r.stderr
    assert [r[0] for r in db.execute("select login_role from donto.stale_logins()")] \
        == [admin]
    db.commit()
    # a longer text of its own document: the owner does not "take" what is its own
    db.execute("select donto.register_revision('doc:bind/mine', %s)", (BODY + "more\n",))
    assert db.execute("select count(*) from donto.document_grant join donto.document "
                      "using (document_id) where iri = 'doc:bind/mine'").fetchone() == (0,)
    db.commit()
    # an admin adopted as an admin is recorded as one
    assert db.execute("select adopted_login from donto.adopt_logins()").fetchall() \
        == [(admin,)]
    assert db.execute("select reason, owner from donto.login_binding where login_role = %s "
                      "order by binding_id desc limit 1", (admin,)).fetchone() \
        == ("adopted", True)
    db.commit()
