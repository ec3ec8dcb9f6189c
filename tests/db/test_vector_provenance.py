"""A writer's vectors and A/B arms are its own (migration 027), attacked by real
donto_writer logins (password authentication).

Before 027 a writer could file the first vector of anyone's chunk, recall key or standing
statement (only one is ever accepted, so the owner's later ``donto-pg embed`` kept the
writer's), which skews how recall ranks it; and A/B arm names were global, so a writer who
registered ``fixed1200`` with another window first made the owner's gate fail (23505),
and a writer's arm with the same spans handed its made-up unit vectors to the owner's
units through ``donto.ab_reuse_embeddings``.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import errors

from donto_pg.embed import embed_pending
from tests.db.test_security_definer import new_revision

BODY = ("=== session 1 | 2024-03-15 ===\n\n[user #0] I moved to Berlin in March.\n\n"
        "[assistant #1] Nice! How is Berlin?\n\n"
        "[user #2] From now on, always answer me in French.\n\n"
        "[assistant #3] D'accord.\n")
MADE_UP = "[" + ",".join(["0.05"] * 384) + "]"


def loaded(conn, iri: str, body: str = BODY) -> int:
    """A conversation with its turn table, recall chunks and keys, and standing memory."""
    rev = new_revision(conn, iri, body)
    conn.execute("select donto.project_recall(%s, 60)", (rev,))
    conn.execute("select donto.project_standing(%s)", (rev,))
    conn.commit()
    return rev


def default_model(conn) -> int:
    return conn.execute("select donto.ensure_embedding_model('all-MiniLM-L6-v2', 'x', 384)"
                        ).fetchone()[0]


def test_a_writer_files_no_vector_of_the_owners_rows(db, logins):
    rev = loaded(db, "doc:vec/owner")
    mid = default_model(db)
    chunk, key, standing = db.execute(
        "select (select min(statement_id) from donto.x_memory_record where revision_id = %(r)s),"
        " (select min(key_id) from donto.x_turn_key where revision_id = %(r)s),"
        " (select min(statement_id) from donto.x_standing where revision_id = %(r)s)",
        {"r": rev}).fetchone()
    db.commit()
    assert None not in (chunk, key, standing)
    _, as_writer = logins()
    w = as_writer()
    with pytest.raises(errors.InsufficientPrivilege, match="filed by another login"):
        w.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                  "values (%s, %s, %s::vector)", (chunk, mid, MADE_UP))
    w.rollback()
    for fn, ident in (("ingest_turn_key_embeddings", key),
                      ("ingest_standing_embeddings", standing),
                      ("ingest_standing_condition_embeddings", standing)):
        with pytest.raises((errors.InsufficientPrivilege, errors.InvalidParameterValue)):
            w.execute(f"select donto.{fn}(%s, %s, %s)", (mid, [ident], [MADE_UP]))
        w.rollback()
    # the key and the standing statement are refused for whose they are, not for their shape
    for fn, ident in (("ingest_turn_key_embeddings", key),
                      ("ingest_standing_embeddings", standing)):
        with pytest.raises(errors.InsufficientPrivilege, match="filed by another login"):
            w.execute(f"select donto.{fn}(%s, %s, %s)", (mid, [ident], [MADE_UP]))
        w.rollback()
    # a writer's embed leaves the owner's rows for the owner, and says so
    report = embed_pending(w, progress=False, context="ctx:memory/episodic/doc/vec/owner")
    assert (report.embedded, report.keys, report.standing) == (0, 0, 0)
    assert report.others > 0
    assert w.execute("select count(*) from donto.embedding where statement_id = %s",
                     (chunk,)).fetchone() == (0,)
    w.commit()
    # the owner's embed stores them, and every vector says who filed it
    report = embed_pending(db, progress=False, context="ctx:memory/episodic/doc/vec/owner")
    assert report.embedded > 0 and report.others == 0
    assert report.keys > 0 and report.standing > 0
    assert db.execute("select array_agg(distinct login_role) from donto.embedding "
                      "where statement_id = %s", (chunk,)).fetchone()[0] == [db.info.user]


def test_a_writer_embeds_what_it_filed(db, logins):
    writer, as_writer = logins()
    w = as_writer()
    rev = loaded(w, "doc:vec/writer", BODY.replace("Berlin", "Lyon"))
    report = embed_pending(w, progress=False, context="ctx:memory/episodic/doc/vec/writer")
    assert report.embedded > 0 and report.keys > 0 and report.others == 0
    for table, col, ids in (("embedding", "statement_id", "select statement_id from "
                             "donto.x_memory_record where revision_id = %(r)s"),
                            ("x_turn_key_vector", "key_id", "select key_id from "
                             "donto.x_turn_key where revision_id = %(r)s"),
                            ("x_standing_vector", "statement_id", "select statement_id from "
                             "donto.x_standing where revision_id = %(r)s")):
        assert db.execute(f"select array_agg(distinct login_role) from donto.{table} "
                          f"where {col} in ({ids})", {"r": rev}).fetchone()[0] == [writer]
    db.commit()


def test_a_writers_arm_names_are_its_own(db, logins):
    rev = loaded(db, "doc:vec/ab")
    writer, as_writer = logins()
    w = as_writer()
    # the writer takes the owner's arm name first, with another window
    w.execute("select donto.ab_register_arm('fixed1200', 'fixed', '{\"window\": 999}')")
    assert w.execute("select donto.ab_project_arm('fixed1200', %s)", (rev,)).fetchone()[0] > 0
    w.commit()
    mine = w.execute("select name, login_role from donto.ab_arm where name like 'fixed1200@%'"
                     ).fetchall()
    w.commit()
    assert mine == [(f"fixed1200@{writer}", writer)]
    # the owner's arm of that name is still the owner's to register and use
    owners = db.execute("select donto.ab_register_arm('fixed1200', 'fixed', "
                        "'{\"window\": 1200}')").fetchone()[0]
    assert db.execute("select donto.ab_project_arm('fixed1200', %s)", (rev,)).fetchone()[0] > 0
    assert db.execute("select params ->> 'window' from donto.ab_arm where arm_id = %s",
                      (owners,)).fetchone()[0] == "1200"
    contexts = [r[0] for r in db.execute(
        "select distinct c.iri from donto.ab_unit as u join donto.statement as s "
        "using (statement_id) join donto.context as c on c.context_id = s.context_id "
        "where u.revision_id = %s order by 1", (rev,))]
    db.commit()
    assert contexts == ["ctx:measure/fixed1200/doc/vec/ab",
                        f"ctx:measure/fixed1200@{writer}/doc/vec/ab"]
    # readers find each arm: their own first (the owner's name is the owner's own), else
    # the one stored under exactly that name
    writers = db.execute("select arm_id from donto.ab_arm where name = %s",
                         (f"fixed1200@{writer}",)).fetchone()[0]
    assert db.execute("select donto._arm_named('fixed1200'), donto._arm_named(%s)",
                      (f"fixed1200@{writer}",)).fetchone() == (owners, writers)
    db.commit()
    assert w.execute("select donto._arm_named('fixed1200')").fetchone() == (writers,)
    w.commit()
    # a writer can write to no arm but its own, whatever name it gives
    with pytest.raises(errors.InvalidParameterValue, match="bad arm name"):
        w.execute("select donto.ab_register_arm(%s, 'fixed')", (f"x@{writer}",))
    w.rollback()
    _, as_other = logins()
    o = as_other()
    with pytest.raises(errors.InsufficientPrivilege, match="is not this login's"):
        o.execute("select donto.ab_project_arm('fixed1200', %s)", (rev,))
    o.rollback()
    with pytest.raises(errors.InvalidParameterValue, match="no arm"):
        o.execute("select donto.ab_project_arm('nobody-has-this', %s)", (rev,))
    o.rollback()
    with pytest.raises(errors.InsufficientPrivilege, match="is not this login's"):
        o.execute("select donto.ab_reuse_embeddings(%s, 1, %s)", (f"fixed1200@{writer}", [rev]))
    o.rollback()


def test_a_writers_unit_vectors_reach_no_owners_unit(db, logins):
    """Two arms with the same spans share vectors through donto.ab_reuse_embeddings: the
    owner's copies only what it or the owner filed, never a writer's made-up vector."""
    rev = loaded(db, "doc:vec/reuse")
    mid = default_model(db)
    db.commit()
    _, as_writer = logins()
    w = as_writer()
    w.execute("select donto.ab_register_arm('same', 'fixed', '{\"window\": 60}')")
    assert w.execute("select donto.ab_project_arm('same', %s)", (rev,)).fetchone()[0] > 0
    n = w.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                  "select u.statement_id, %s, %s::vector from donto.ab_unit as u "
                  "where u.arm_id = donto._arm_named('same')", (mid, MADE_UP)).rowcount
    w.commit()
    assert n > 0
    db.execute("select donto.ab_register_arm('owners', 'fixed', '{\"window\": 60}')")
    assert db.execute("select donto.ab_project_arm('owners', %s)", (rev,)).fetchone()[0] == n
    assert db.execute("select donto.ab_reuse_embeddings('owners', %s, %s)",
                      (mid, [rev])).fetchone()[0] == 0
    # the owner's own vectors of projection A (the same 60-char spans) are copied
    embed_pending(db, progress=False, context="ctx:memory/episodic/doc/vec/reuse")
    assert db.execute("select donto.ab_reuse_embeddings('owners', %s, %s)",
                      (mid, [rev])).fetchone()[0] == n
    assert db.execute(
        "select count(*) from donto.embedding as e join donto.ab_unit as u using "
        "(statement_id) where u.arm_id = donto._arm_named('owners') "
        "and e.embedding = %s::vector", (MADE_UP,)).fetchone() == (0,)
    db.commit()


def test_login_tags_are_one_to_one(db):
    got = db.execute("select donto._login_tag('alice'), donto._login_tag('Bob ü/x'), "
                     "donto._login_tag('a%41')").fetchone()
    db.commit()
    assert got == ("alice", "%42ob%20%C3%BC%2Fx", "a%2541")


def test_embed_standing_in_the_server_embeds_only_what_the_writer_filed(db, logins):
    """donto.embed_standing (a definer that encodes with the server's model) leaves the owner's
    standing statements to the owner when a writer calls it (found by review)."""
    rev = loaded(db, "doc:vec/server-standing")
    _, as_writer = logins()
    w = as_writer()
    default_model(w)
    assert w.execute("select donto.embed_standing(%s)", (rev,)).fetchone()[0] == 0
    w.commit()
    assert db.execute("select count(*) from donto.x_standing_vector as v join donto.x_standing "
                      "as x using (statement_id) where x.revision_id = %s",
                      (rev,)).fetchone() == (0,)
    assert db.execute("select donto.embed_standing(%s)", (rev,)).fetchone()[0] > 0
    db.commit()


def test_an_owners_arm_stays_the_owners_whichever_owner_login_made_it(db, logins):
    """An arm without @ is the owner's: an admin login (a member of the owner) registers
    it, is dropped, and the owner still projects into it; a writer naming it to write is
    told it is not its own (42501), a reader sees its verdict without naming a gate."""
    rev = loaded(db, "doc:vec/admin-arm")
    owner = db.execute("select nspowner::regrole::text from pg_namespace where nspname = "
                       "'donto'").fetchone()[0]
    admin = f"admin_{uuid.uuid4().hex[:10]}"  # dropped here, so not the logins fixture's
    db.execute(f"create role {admin} login password 'pw' in role {owner}")
    db.commit()
    info = db.info
    with psycopg.connect(host=info.host, port=info.port, user=admin, password="pw",
                         dbname=info.dbname) as a:
        a.execute("select donto.ab_register_arm('fixed900', 'fixed', '{\"window\": 900}')")
    db.execute(f"drop role {admin}")
    db.commit()
    assert db.execute("select login_role from donto.ab_arm where name = 'fixed900'"
                      ).fetchone() == (admin,)
    assert db.execute("select donto.ab_project_arm('fixed900', %s)", (rev,)).fetchone()[0] > 0
    db.commit()
    _, as_writer = logins()
    w = as_writer()
    with pytest.raises(errors.InsufficientPrivilege, match="not this login's"):
        w.execute("select donto.ab_project_arm('fixed900', %s)", (rev,))
    w.rollback()
    # the owner records a result; a reader's verdict finds its gate by default
    model = default_model(db)
    gate = db.execute("select donto.ab_record_gate('g900', %s, '[]', 10, %s, 'hybrid', 0)",
                      ([rev], model)).fetchone()[0]
    run = db.execute("select run_id from donto.start_extraction_run("
                     "'[{\"name\": \"baseline\", \"model\": \"donto-baseline-v3\"}]', '{}', "
                     "null, null)").fetchone()[0]
    db.execute("select donto.ab_record_result('r900', %s, 'fixed900', %s, 'rejected', 0, '{}', "
               "'rejected before the recall pass')", (gate, run))
    db.commit()
    _, as_reader = logins("donto_reader")
    r = as_reader()
    assert r.execute("select gate, verdict from donto.ab_verdict('fixed900')").fetchone() == (
        gate, "reject")
    r.commit()
