"""Foundation: revisions, turns, I3, bitemporality, roles, comments (real server)."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import psycopg
import pytest
from psycopg import errors

BODY = "=== session 1 | 2024-03-15 ===\n\n[user #0] I moved to Berlin.\n\n[assistant #1] Nice!\n"


def fact_tables(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'donto' and c.relkind = 'r' and c.relname <> 'setting' order by 1"
    ).fetchall()
    return [r[0] for r in rows]


def register(conn, iri="beam:t/1", body=BODY) -> int:
    return conn.execute("select donto.register_revision(%s, %s)", (iri, body)).fetchone()[0]


# -- register_revision ------------------------------------------------------------

def test_register_is_content_addressed_and_idempotent(db):
    rev = register(db)
    assert register(db) == rev
    sha, n, chars = db.execute(
        "select encode(sha256, 'hex'), (select count(*) from donto.revision), body_chars "
        "from donto.revision where revision_id = %s", (rev,)).fetchone()
    assert sha == hashlib.sha256(BODY.encode()).hexdigest()
    assert (n, chars) == (1, len(BODY))


def test_new_body_is_new_revision_superseding_the_old(db):
    r1 = register(db)
    r2 = register(db, body=BODY + "[user #2] more\n")
    assert r2 != r1
    assert db.execute("select supersedes from donto.revision where revision_id = %s",
                      (r2,)).fetchone()[0] == r1


@pytest.mark.parametrize("iri,body,match", [
    ("beam:t/1", "", "body of beam:t/1 is empty"),
    ("", "x", "document_iri is empty"),
])
def test_register_refuses_bad_input(db, iri, body, match):
    with pytest.raises(psycopg.Error, match=match):
        register(db, iri, body)


def test_register_refuses_nul_bytes(db):
    with pytest.raises((psycopg.DataError, ValueError), match="NUL|0x00"):
        register(db, body="a\x00b")


def test_same_body_under_another_document_is_that_documents_own_revision(db):
    """Content-addressed within a document: a second document's copy of a body is a revision
    of its own (issue 10, section 4: whoever registers a public text first blocks nobody)."""
    r1 = register(db)
    r2 = register(db, iri="beam:t/2")
    assert r2 != r1
    assert register(db, iri="beam:t/2") == r2 and register(db) == r1
    assert db.execute("select count(distinct sha256), count(*) from donto.revision "
                      "where revision_id in (%s, %s)", (r1, r2)).fetchone() == (1, 2)


def test_concurrent_registration_returns_one_revision(db, connect):
    db.commit()
    body = "race body\n" * 1000
    results: list[int] = []
    barrier = threading.Barrier(4)

    def worker():
        conn = connect()
        barrier.wait()
        results.append(register(conn, body=body))
        conn.commit()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and len(set(results)) == 1
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == 1


# -- record_turns --------------------------------------------------------------------

def turns_of(body=BODY):
    a = body.index("[user #0] ")
    b = body.index("[assistant #1] ")
    return [
        {"seq": 0, "turn_id": 0, "role": "user", "session": 1, "exchange": 0,
         "date": "2024-03-15", "header_start": a, "char_start": a + 10,
         "char_end": body.index("\n", a)},
        {"seq": 1, "turn_id": 1, "role": "assistant", "session": 1, "exchange": 0,
         "date": "2024-03-15", "header_start": b, "char_start": b + 15,
         "char_end": body.index("\n", b)},
    ]


def record(conn, rev, turns):
    return conn.execute("select donto.record_turns(%s, %s)", (rev, json.dumps(turns))).fetchone()[0]


def test_record_turns_and_spans_give_exact_text(db):
    rev = register(db)
    assert record(db, rev, turns_of()) == 2
    assert record(db, rev, turns_of()) == 2  # idempotent
    texts = db.execute(
        "select donto.span_text(revision_id, char_start, char_end) from donto.turn "
        "where revision_id = %s order by seq", (rev,)).fetchall()
    assert [t[0] for t in texts] == ["I moved to Berlin.", "Nice!"]


@pytest.mark.parametrize("mutate,match", [
    (lambda t: t[1].update(char_end=10_000), "past the body"),
    (lambda t: t[1].update(header_start=t[0]["char_end"] - 3), "overlaps the previous turn"),
    (lambda t: t[1].update(seq=5), "expected seq 1"),
    (lambda t: t[0].update(char_start=t[0]["header_start"] - 1), "not ordered"),
    (lambda t: t[0].pop("role"), "required"),
])
def test_record_turns_validates(db, mutate, match):
    rev = register(db)
    turns = turns_of()
    mutate(turns)
    with pytest.raises(psycopg.Error, match=match):
        record(db, rev, turns)


def test_record_turns_refuses_a_different_table(db):
    rev = register(db)
    record(db, rev, turns_of())
    turns = turns_of()
    turns[1]["role"] = "user"
    with pytest.raises(errors.UniqueViolation, match="different turn table"):
        record(db, rev, turns)


# -- I3 ------------------------------------------------------------------------------

def seed_facts(db) -> int:
    rev = register(db)
    record(db, rev, turns_of())
    ctx = db.execute("select donto.ensure_context('ctx:test')").fetchone()[0]
    sid = db.execute(
        "insert into donto.statement (subject, predicate, object_iri, context_id) "
        "values ('s', 'p', 'o', %s) returning statement_id", (ctx,)).fetchone()[0]
    db.execute("select donto.retract(%s, 'test')", (sid,))
    db.commit()
    return sid


def test_every_fact_table_is_covered(db):
    tables = fact_tables(db)
    assert {"document", "revision", "turn", "statement", "retraction", "context",
            "x_memory_record", "embedding", "migration"} <= set(tables)
    missing = db.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'donto' and c.relkind = 'r' and c.relname <> 'setting' "
        "and not exists (select 1 from pg_trigger t where t.tgrelid = c.oid "
        "and t.tgname = 'i3_refuse') order by 1").fetchall()
    assert missing == []


@pytest.mark.parametrize("op", ["update", "delete", "truncate"])
def test_i3_refuses_owner_on_every_table(db, op):
    seed_facts(db)
    for table in fact_tables(db):
        col = db.execute(
            "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0 "
            "and attidentity = '' and not attisdropped order by attnum limit 1",
            (f"donto.{table}",)).fetchone()[0]
        sql = {"update": f"update donto.{table} set {col} = {col}",
               "delete": f"delete from donto.{table}",
               "truncate": f"truncate donto.{table} cascade"}[op]
        with pytest.raises(psycopg.Error, match="invariant I3") as exc:
            db.execute(sql)
        assert exc.value.sqlstate == "DI003", table
        db.rollback()


@pytest.mark.parametrize("role", ["donto_writer", "donto_reader"])
def test_privileges_withhold_mutation_from_roles(db, connect, role):
    seed_facts(db)
    conn = connect(role)
    for table in fact_tables(db):
        for sql in (f"delete from donto.{table}", f"truncate donto.{table}"):
            with pytest.raises(errors.InsufficientPrivilege):
                conn.execute(sql)
            conn.rollback()


def test_i3_holds_even_for_a_role_granted_update(db, connect):
    """Defence in depth: a mistaken GRANT does not open the door."""
    seed_facts(db)
    db.execute("do $$ begin if not exists (select from pg_roles where rolname = 'sloppy') "
               "then create role sloppy; end if; end $$")
    db.execute("grant usage on schema donto to sloppy")
    db.execute("grant select, update, delete on donto.statement to sloppy")
    db.commit()
    conn = connect("sloppy")
    with pytest.raises(psycopg.Error, match="invariant I3"):
        conn.execute("update donto.statement set subject = 'x'")
    conn.rollback()
    with pytest.raises(psycopg.Error, match="invariant I3"):
        conn.execute("delete from donto.statement")


# -- roles -----------------------------------------------------------------------------

def test_reader_reads_but_cannot_write(db, connect):
    seed_facts(db)
    reader = connect("donto_reader")
    assert reader.execute("select count(*) from donto.statement").fetchone()[0] == 1
    assert reader.execute("select count(*) from donto.statement_current").fetchone()[0] == 0
    for sql in ("select donto.register_revision('beam:x', 'y')",
                "select donto.ensure_context('ctx:x')",
                "insert into donto.document (iri) values ('x')"):
        with pytest.raises(errors.InsufficientPrivilege):
            reader.execute(sql)
        reader.rollback()


def test_writer_writes_through_functions_only(db, connect):
    db.commit()
    writer = connect("donto_writer")
    rev = register(writer, "beam:w/1", "writer body\n")
    writer.commit()
    assert rev > 0
    with pytest.raises(errors.InsufficientPrivilege):
        writer.execute("insert into donto.document (iri) values ('direct')")


# -- bitemporality ---------------------------------------------------------------------

def test_as_of_across_retractions(db):
    ctx = db.execute("select donto.ensure_context('ctx:t')").fetchone()[0]
    sid = db.execute(
        "insert into donto.statement (subject, predicate, object_lit, context_id, valid_time) "
        "values ('user', 'lives_in', '\"Berlin\"', %s, '[2024-03-01,2024-06-01)') "
        "returning statement_id", (ctx,)).fetchone()[0]
    db.commit()
    time.sleep(0.02)
    t_known = db.execute("select now()").fetchone()[0]
    db.commit()
    time.sleep(0.02)
    db.execute("select donto.retract(%s, 'moved again')", (sid,))
    db.commit()
    assert db.execute("select donto.retract(%s, 'again')", (sid,)).fetchone()[0] is not None
    db.commit()

    def as_of(tx, valid=None):
        return [r[0] for r in db.execute(
            "select statement_id from donto.statements_as_of(%s, %s)", (tx, valid))]

    assert as_of(t_known) == [sid]
    assert as_of(t_known, "2024-04-01") == [sid]
    assert as_of(t_known, "2024-07-01") == []
    assert as_of(db.execute("select now()").fetchone()[0]) == []
    assert db.execute("select count(*) from donto.statement_current").fetchone()[0] == 0
    assert db.execute("select count(*) from donto.retraction").fetchone()[0] == 1


# -- documentation in the catalog ------------------------------------------------------

def test_every_table_view_and_function_has_a_comment(db):
    undocumented = db.execute(
        "select c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'donto' and c.relkind in ('r', 'v', 'm') "
        "and obj_description(c.oid, 'pg_class') is null "
        "union all "
        "select p.proname from pg_proc p join pg_namespace n on n.oid = p.pronamespace "
        "where n.nspname = 'donto' and obj_description(p.oid, 'pg_proc') is null").fetchall()
    assert undocumented == []


def test_every_column_of_every_table_and_view_has_a_comment(db):
    """\\d+ donto.<table> explains every column (sql/096-comments.sql for the tables of the
    frozen migrations; a new migration or view comments its own columns)."""
    undocumented = db.execute(
        "select c.relname || '.' || a.attname from pg_attribute a "
        "join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace "
        "where n.nspname = 'donto' and c.relkind in ('r', 'v', 'm', 'p') and a.attnum > 0 "
        "and not a.attisdropped and col_description(c.oid, a.attnum) is null "
        "order by 1").fetchall()
    assert undocumented == []


def test_claims_as_of_follows_transaction_time(db):
    """donto.claims_as_of(tx): a claim appears from its transaction time on, and a later
    retraction does not hide it at an earlier time."""
    from donto_pg import extract

    body = "[user #0] I moved to Berlin in March.\n[assistant #1] Noted: Berlin.\n"
    rev = db.execute("select donto.register_revision('test:asof', %s)", (body,)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s::jsonb)", (rev, json.dumps([
        {"seq": 0, "turn_id": 0, "role": "user", "header_start": 0, "char_start": 10,
         "char_end": 37},
        {"seq": 1, "turn_id": 1, "role": "assistant", "header_start": 38, "char_start": 53,
         "char_end": len(body) - 1}])))
    db.commit()
    before = db.execute("select clock_timestamp()").fetchone()[0]
    extract.project_extraction(db, revision_ids=[rev])
    info = db.info
    extract.run_extraction(lambda: psycopg.connect(host=info.host, port=info.port,
                                                   user=info.user, dbname=info.dbname),
                           revision_ids=[rev], alarm_after=0)
    current = db.execute("select claim_id from donto.claim_provenance where not retracted "
                         "order by 1").fetchall()
    assert current, "the baseline extractor found a claim"
    cid = current[0][0]
    known = db.execute("select clock_timestamp()").fetchone()[0]
    db.commit()
    # the reader may ask (donto_reader)
    assert db.execute("select has_function_privilege('donto_reader', "
                      "'donto.claims_as_of(timestamptz, date)', 'execute')").fetchone()[0]
    db.execute("select donto.retract(%s, 'test')", (cid,))
    db.commit()
    after = db.execute("select clock_timestamp()").fetchone()[0]
    db.commit()  # every time asked about lies before this transaction
    assert db.execute("select count(*) from donto.claims_as_of(%s)", (before,)).fetchone()[0] == 0
    at_known = db.execute("select claim_id, retracted, evidence_text from donto.claims_as_of(%s) "
                          "order by 1", (known,)).fetchall()
    assert [r[0] for r in at_known] == [c for (c,) in current]
    assert not any(r[1] for r in at_known) and all(r[2] for r in at_known)
    now = db.execute("select claim_id from donto.claims_as_of(%s) order by 1",
                     (after,)).fetchall()
    assert (cid,) not in now and len(now) == len(current) - 1


def test_readme_lists_the_public_api(db):
    """`\\df donto.[a-z]*` is the API (helpers start with `_`): README's "The public SQL
    API" names every such function and view, and nothing that does not exist."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("## The public SQL API", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z][a-z0-9_]*)`", section.split("\n- ", 1)[1]))
    api = {r[0] for r in db.execute(
        "select p.proname from pg_proc p where p.pronamespace = 'donto'::regnamespace "
        "and p.proname !~ '^_' union select c.relname from pg_class c "
        "where c.relnamespace = 'donto'::regnamespace and c.relkind = 'v'")}
    assert sorted(api - listed) == [], "public functions or views missing from the README"
    assert sorted(listed - api) == [], "the README lists names the database does not have"
