"""Issue 10, section 1: no role escalates through the donto functions (real server).

- Every SECURITY DEFINER function of schema donto, enumerated from pg_proc (a function
  added later is covered as it lands), has a pinned search_path from pg_catalog to
  pg_temp over schemas no caller can write, creates no temporary object, reads nothing
  through pg_temp and runs no dynamic SQL (the one reviewed exception is listed).
- A real LOGIN role, member of donto_writer only, shadows every temporary object a
  function once used, with a temp table carrying its own trigger or a temp view calling
  its own function (both try ``alter role <self> superuser``): the role stays an
  ordinary role and the call does exactly what it does without the shadow.
- I3 holds under session_replication_role = replica; the DDL guard refuses changes to
  schema donto outside ``donto-pg migrate`` unless the session sets donto.allow_ddl.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import errors

from donto_pg import beam, loader, migrate, settings
from donto_pg.db import register_vector_if_present
from tests.conftest import EXAMPLES

BODY = ("=== session 1 | 2024-03-15 ===\n\n[user #0] I moved to Berlin in March.\n\n"
        "[assistant #1] Nice! How is Berlin?\n\n[user #2] Cold, but I like my new flat.\n")

# Dynamic EXECUTE in a definer, reviewed: the text is built from integers the function
# reads from donto's own tables (model id and dimension, projection ids), never from caller
# text.
REVIEWED_EXECUTE = {"ensure_embedding_index", "ensure_context_indexes",
                    "_ensure_lexical_indexes", "_ensure_key_indexes"}

DEFINERS = """
select p.proname::text, p.oid::regprocedure::text, p.prosrc, p.proconfig, l.lanname::text
from pg_proc p join pg_language l on l.oid = p.prolang
where p.pronamespace = 'donto'::regnamespace and p.prosecdef
order by 2
"""


def search_path_of(config: list[str] | None) -> list[str]:
    for item in config or []:
        if item.startswith("search_path="):
            return [s.strip().strip('"') for s in item.split("=", 1)[1].split(",")]
    return []


TEMP_OBJECT = re.compile(r"\bcreate\s+(?:(?:global|local)\s+)?(?:temp|temporary)\b"
                         r"|\bpg_temp\s*\.|\bon\s+commit\s+(?:drop|delete)", re.IGNORECASE)
DYNAMIC_SQL = re.compile(r"\bexecute\b(?!\s+(?:function|procedure)\b)", re.IGNORECASE)


def test_every_security_definer_function_is_pinned_and_touches_no_caller_object(db):
    rows = db.execute(DEFINERS).fetchall()
    names = {r[0] for r in rows}
    # the enumeration is real: the writers' API is there (and so is any later definer)
    assert {"register_revision", "record_turns", "project_recall", "index_lexical",
            "ab_project_arm", "ingest_extraction", "retract"} <= names
    assert len(rows) >= 20
    problems = []
    for name, sig, src, config, lang in rows:
        path = search_path_of(config)
        if not path or path[0] != "pg_catalog" or path[-1] != "pg_temp":
            problems.append(f"{sig}: search_path {path} is not pg_catalog, ..., pg_temp")
        for schema in path[1:-1]:
            writable = db.execute(
                "select array_agg(r) from unnest(array['public', 'donto_reader', "
                "'donto_writer']) as r where has_schema_privilege(r, %s, 'CREATE')",
                (schema,)).fetchone()[0]
            if writable:
                problems.append(f"{sig}: search_path schema {schema} is writable by {writable}")
        if TEMP_OBJECT.search(src):
            problems.append(f"{sig}: creates or reads a temporary object "
                            f"({TEMP_OBJECT.search(src).group(0)!r})")
        if lang == "plpgsql" and DYNAMIC_SQL.search(src) and name not in REVIEWED_EXECUTE:
            problems.append(f"{sig}: dynamic EXECUTE")
        if lang not in ("plpgsql", "sql"):
            # PL/Python runs SQL text of its own: none is a definer today; review one first
            problems.append(f"{sig}: a {lang} definer (review plpy.execute text)")
    assert problems == []
    assert REVIEWED_EXECUTE <= names


def test_functions_that_read_a_callers_temp_table_are_invokers_no_definer_calls(db):
    """The binary-COPY embedding path reads the caller's own temp table: only with the
    caller's rights, and never from inside a definer (which would lend it the owner's)."""
    rows = db.execute("select p.proname::text, p.prosecdef, p.prosrc from pg_proc p "
                      "where p.pronamespace = 'donto'::regnamespace").fetchall()
    readers = {name for name, _, src in rows if TEMP_OBJECT.search(src)}
    assert readers == {"ingest_embeddings", "ingest_measure_embeddings"}
    assert all(not secdef for name, secdef, _ in rows if name in readers)
    for name, secdef, src in rows:
        if secdef:
            assert not any(re.search(rf"\b{r}\b", src) for r in readers), name


def test_the_writer_may_insert_only_vectors_of_recall_keys(db, connect):
    """donto_writer's one table privilege (INSERT on donto.embedding) adds nothing but
    vectors of recall keys with their model's dimension: the trigger checks every row."""
    rev = db.execute("select donto.register_revision('doc:w', %s)", (BODY,)).fetchone()[0]
    db.execute("select donto.project_recall(%s, 40)", (rev,))
    model = db.execute("select donto.ensure_embedding_model('m3', 'test', 3)").fetchone()[0]
    chunk = db.execute("select statement_id from donto.x_memory_record limit 1").fetchone()[0]
    other = db.execute("insert into donto.statement (subject, predicate, object_lit, "
                       "context_id) values ('user', 'lives in', '{\"v\": \"Berlin\"}', "
                       "donto.ensure_context('ctx:test')) returning statement_id").fetchone()[0]
    db.commit()
    writer = connect("donto_writer")
    # a vector of another dimension: the model's index (made with its row since 031) casts
    # it to the model's dimension and refuses it before the trigger would
    with pytest.raises(errors.DataException, match="expected 3 dimensions, not 2"):
        writer.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                       "values (%s, %s, '[1,2]')", (chunk, model))
    writer.rollback()
    with pytest.raises(errors.InvalidParameterValue, match="not a recall key"):
        writer.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                       "values (%s, %s, '[1,2,3]')", (other, model))
    writer.rollback()
    with pytest.raises(errors.InsufficientPrivilege):
        writer.execute("insert into donto.embedding (statement_id, model_id, embedding, "
                       "created_at) values (%s, %s, '[1,2,3]', '2000-01-01')", (chunk, model))
    writer.rollback()
    writer.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                   "values (%s, %s, '[1,2,3]')", (chunk, model))
    writer.commit()
    assert db.execute("select count(*) from donto.embedding").fetchone()[0] == 1


# -- the attacks ---------------------------------------------------------------------

ESCALATE = """
create function pg_temp.escalate() returns integer language plpgsql as $f$
begin
    -- who runs the caller's code: the caller (fine) or the owner (the hole)
    perform set_config('attack.ran_as', current_user, false);
    begin
        execute 'alter role {role} superuser';
    exception when insufficient_privilege then
        perform set_config('attack.refused', 'yes', false);
    end;
    return 0;
end $f$;
create function pg_temp.escalate_trigger() returns trigger language plpgsql as $f$
begin perform pg_temp.escalate(); return null; end $f$;
"""

TURN_COLUMNS = ("seq int, turn_id int, role text, session int, exchange int, "
                "time_anchor date, header_start int, char_start int, char_end int, meta jsonb")


def shadow(variant: str, name: str, columns: str = "x int") -> str:
    """SQL making the caller's temp object NAME: a table whose trigger escalates, or a
    view whose rows call the escalation (and yield none)."""
    if variant == "table":
        return (f"create temp table {name} ({columns});\n"
                f"create trigger escalate after insert or update or delete or truncate "
                f"on pg_temp.{name} for each statement "
                f"execute function pg_temp.escalate_trigger();\n")
    cols = ", ".join(f"null::{c.split(' ', 1)[1]} as {c.split(' ', 1)[0]}"
                     for c in columns.split(", "))
    return f"create temp view {name} as select {cols} where pg_temp.escalate() = 1;\n"


def turns(body: str = BODY) -> list[dict]:
    out, pos = [], 0
    for seq, line in enumerate(ln for ln in body.split("\n") if ln.startswith("[")):
        start = body.index(line, pos)
        head = line.index("] ") + 2
        out.append({"seq": seq, "turn_id": seq, "role": line[1:line.index(" ")],
                    "session": 1, "exchange": seq // 2, "date": "2024-03-15",
                    "header_start": start, "char_start": start + head,
                    "char_end": start + len(line)})
        pos = start + len(line)
    return out


def counts(db) -> dict[str, int]:
    """Rows per donto table, but the writers' locks (a row per lock taken, not a fact)."""
    tables = [r[0] for r in db.execute(
        "select c.relname::text from pg_class c where c.relnamespace = 'donto'::regnamespace "
        "and c.relkind = 'r' and c.relname <> 'writer_lock' order by 1").fetchall()]
    return {t: db.execute(f"select count(*) from donto.{t}").fetchone()[0]  # noqa: S608
            for t in tables}


def new_revision(db, iri: str, body: str = BODY, *, with_turns: bool = True) -> int:
    rev = db.execute("select donto.register_revision(%s, %s)", (iri, body)).fetchone()[0]
    if with_turns:
        db.execute("select donto.record_turns(%s, %s)", (rev, json.dumps(turns(body))))
    return rev


def _record_turns(db):
    # the attacker registers the text itself: only the registering login (or the owner)
    # records a revision's turn table (migration 026); its first row binds its login (029)
    return (("select donto.record_turns(donto.register_revision('doc:attack/turns', %s), %s)",
             (BODY, json.dumps(turns()))),
            {"document": 1, "revision": 1, "turn": 3, "login_binding": 1})


def _index_lexical(db):
    rev = new_revision(db, "doc:attack/lexical")
    n = db.execute("select donto.project_recall(%s, 40, null, false)", (rev,)).fetchone()[0]
    return ("select donto.index_lexical(%s)", (rev,)), {"x_memory_lexical": n}


def _project_recall(db):
    rev = new_revision(db, "doc:attack/recall")
    return (("select donto.project_recall(%s, 40)", (rev,)),
            {"projection": 1, "context": 1, "context_owner": 1, "statement": None,
             "x_memory_record": None, "x_memory_lexical": None,
             "x_turn_key": _user_turns(db, rev)})


def _user_turns(db, rev: int) -> int:
    """The recall keys project_recall records: one per user turn with text."""
    return db.execute("select count(*) from donto.turn where revision_id = %s and role = 'user' "
                      "and char_start < char_end", (rev,)).fetchone()[0]


def _ab_project_arm(db):
    rev = new_revision(db, "doc:attack/ab")
    # the attacker projects its own arm (027: only an arm's login projects into it)
    return (("select donto.ab_project_arm('fixed40', %s) from (select donto.ab_register_arm("
             "'fixed40', 'fixed', '{\"window\": 40}')) as arm", (rev,)),
            {"ab_arm": 1, "projection": 1, "context": 1, "context_owner": 1,
             "extraction_block": None, "statement": None, "ab_unit": None})


def _ingest(function):
    def setup(db):
        rev = new_revision(db, f"doc:attack/{function}")
        db.execute("select donto.project_recall(%s, 40)", (rev,))
        model = db.execute("select donto.ensure_embedding_model('m3', 'test', 3)").fetchone()[0]
        return (f"select donto.{function}(%s)", (model,)), {}
    return setup


STAGE = "statement_id bigint, embedding vector"
TARGETS = {
    "record_turns": (_record_turns, [("_donto_turns", TURN_COLUMNS)]),
    "index_lexical": (_index_lexical, [("_donto_lexical", "x int"),
                                       ("_donto_user_text", "x int")]),
    "project_recall": (_project_recall, [("_donto_lexical", "x int"),
                                         ("_donto_user_text", "x int")]),
    "ab_project_arm": (_ab_project_arm, [("_donto_ab_blocks", "x int"),
                                         ("_donto_ab_units", "x int")]),
    "ingest_embeddings": (_ingest("ingest_embeddings"), [("_donto_embedding_stage", STAGE)]),
    "ingest_measure_embeddings": (_ingest("ingest_measure_embeddings"),
                                  [("_donto_embedding_stage", STAGE)]),
}
CASES = [(t, v) for t in sorted(TARGETS) for v in ("table", "view")
         if not (t.startswith("ingest") and v == "table")]


@pytest.fixture
def attacker(db):
    """A real LOGIN role (password authentication) that is a member of donto_writer only."""
    role = f"attacker_{uuid.uuid4().hex[:10]}"
    db.execute(f"create role {role} login password 'attack' in role donto_writer")
    db.commit()
    opened: list[psycopg.Connection] = []
    info = db.info

    def connect() -> psycopg.Connection:
        conn = psycopg.connect(host=info.host, port=info.port, user=role, password="attack",
                               dbname=info.dbname)
        register_vector_if_present(conn)
        opened.append(conn)
        return conn

    yield role, connect
    for c in opened:
        c.close()
    db.rollback()
    db.execute(f"drop owned by {role}")
    db.execute(f"drop role {role}")
    db.commit()


def privileges(db, role: str) -> tuple:
    return db.execute("select rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, "
                      "rolreplication from pg_roles where rolname = %s", (role,)).fetchone()


@pytest.mark.parametrize(("target", "variant"), CASES)
def test_a_writer_shadowing_a_temp_object_gains_nothing(db, attacker, target, variant):
    role, connect = attacker
    setup, objects = TARGETS[target]
    (sql, args), expected = setup(db)
    # the setup's documents are the attacker's to add to (028: a writer adds to its own)
    db.execute("select donto.give_document(iri, %s) from donto.document", (role,))
    db.commit()
    before = counts(db)
    me = connect()
    assert me.execute(
        "select array_agg(g.rolname::text), bool_or(r.rolsuper) from pg_auth_members m "
        "join pg_roles g on g.oid = m.roleid join pg_roles r on r.oid = m.member "
        "where r.rolname = current_user").fetchone() == (["donto_writer"], False)
    me.execute(ESCALATE.format(role=role)
               + "".join(shadow(variant, name, cols) for name, cols in objects))
    me.commit()
    got = me.execute(sql, args).fetchone()[0]
    me.commit()
    ran_as = me.execute("select current_setting('attack.ran_as', true)").fetchone()[0]
    assert ran_as in (None, "", role), f"the caller's code ran as {ran_as}"
    # the caller's objects are still there (they shadowed for real), the role is ordinary
    assert me.execute("select count(*) from pg_class where relnamespace = pg_my_temp_schema() "
                      "and relname = any(%s)", ([n for n, _ in objects],)).fetchone()[0] \
        == len(objects)
    assert privileges(db, role) == (False, False, False, False, False)
    # and the call did what it does, no more
    after = counts(db)
    delta = {t: after[t] - before[t] for t in after if after[t] != before[t]}
    assert set(delta) == set(expected), delta
    for table, n in expected.items():
        assert delta[table] == (n if n is not None else got), table
    if target.startswith("ingest"):
        assert got == 0


def test_the_issues_record_turns_attack_verbatim(db, attacker):
    """The reproduction of issue 10, word for word (with the role's name)."""
    role, connect = attacker
    me = connect()
    me.execute(f"""
create temp table _donto_turns(seq int, turn_id int, role text, session int, exchange int,
  time_anchor date, header_start int, char_start int, char_end int, meta jsonb);
create function pg_temp.p() returns trigger language plpgsql as $$begin
  execute 'alter role {role} superuser'; return null; end$$;
create trigger t after insert on pg_temp._donto_turns execute function pg_temp.p();
""")
    n = me.execute("select donto.record_turns(donto.register_revision('doc:m', "
                   "'hello world' || chr(10)), "
                   "'[{\"seq\":0,\"role\":\"user\",\"header_start\":0,\"char_start\":0,"
                   "\"char_end\":5}]')").fetchone()[0]
    me.commit()
    assert n == 1
    assert privileges(db, role)[0] is False
    assert me.execute("select count(*) from pg_temp._donto_turns").fetchone()[0] == 0


def test_index_lexical_weighs_exactly_the_user_words_of_each_chunk(db):
    """The temp-table-free index_lexical gives every chunk of a real conversation the
    same vector as a plain range join of its user turns (the old formulation)."""
    conv = next(iter(beam.iter_beam(EXAMPLES / "chats" / "100K" / "13")))
    res = loader.load_conversation(db, conv, lexical=False)
    assert res.ok, res.error
    n = db.execute("select donto.index_lexical(%s)", (res.revision_id,)).fetchone()[0]
    assert n > 20
    wrong = db.execute("""
        with u as (
            select m.statement_id, string_agg(substr(s.object_lit ->> 'v',
                       greatest(t.char_start, m.char_start) - m.char_start + 1,
                       least(t.char_end, m.char_end) - greatest(t.char_start, m.char_start)),
                       ' ' order by t.seq) as user_text
            from donto.x_memory_record m join donto.statement s using (statement_id)
            join donto.turn t on t.revision_id = m.revision_id and t.role = 'user'
                 and int4range(t.char_start, t.char_end) && int4range(m.char_start, m.char_end)
            where m.revision_id = %(rev)s group by m.statement_id)
        select count(*) from donto.x_memory_record m
        join donto.statement s using (statement_id)
        join donto.x_memory_lexical l using (statement_id)
        left join u using (statement_id)
        where m.revision_id = %(rev)s
          and l.tsv is distinct from
              setweight(to_tsvector('english', s.object_lit ->> 'v'), 'D')
              || setweight(to_tsvector('english', coalesce(u.user_text, '')), 'A')
    """, {"rev": res.revision_id}).fetchone()[0]
    assert wrong == 0
    assert db.execute("select count(*) from donto.x_memory_lexical l join donto.x_memory_record "
                      "m using (statement_id) where m.revision_id = %s and "
                      "l.tsv::text ~ ':[0-9,]*A'", (res.revision_id,)).fetchone()[0] > 0


# -- I3 under replication mode, and the DDL guard --------------------------------------

def test_i3_fires_with_session_replication_role_replica(db):
    rev = new_revision(db, "doc:replica")
    db.commit()
    db.execute("set session_replication_role = replica")
    for sql in ("update donto.revision set meta = '{\"x\": 1}' where revision_id = %s",
                "delete from donto.turn where revision_id = %s"):
        with pytest.raises(psycopg.Error, match="invariant I3") as exc:
            db.execute(sql, (rev,))
        assert exc.value.sqlstate == "DI003"
        db.rollback()
        db.execute("set session_replication_role = replica")
    assert db.execute("select count(*) from pg_trigger t where t.tgname = 'i3_refuse' "
                      "and t.tgenabled <> 'A'").fetchone()[0] == 0
    db.execute("reset session_replication_role")


GUARDED = {
    "drop function": "drop function donto.span_text(bigint, integer, integer) cascade",
    "alter table": "alter table donto.revision disable trigger i3_refuse",
    "drop trigger": "drop trigger i3_refuse on donto.revision",
    "create or replace function": (
        "create or replace function donto.recall_context_iri(p_document_iri text) "
        "returns text language sql immutable as $$ select 'ctx:evil' $$"),
    "create trigger": ("create trigger sneak before insert on donto.statement for each row "
                       "execute function donto._refuse_mutation()"),
    "create or replace view": ("create or replace view donto.statement_current as "
                               "select * from donto.statement"),
    "drop schema": "drop schema donto cascade",
    "rename schema": "alter schema donto rename to donto_old",
}


@pytest.mark.parametrize("what", sorted(GUARDED))
def test_the_ddl_guard_refuses_schema_changes_without_allow_ddl(db, what):
    sql = GUARDED[what]
    before = db.execute("select md5(string_agg(p.oid::regprocedure::text || p.prosrc, ',' "
                        "order by p.oid)) from pg_proc p "
                        "where p.pronamespace = 'donto'::regnamespace").fetchone()[0]
    db.commit()
    with pytest.raises(errors.InsufficientPrivilege, match="donto.allow_ddl") as exc:
        db.execute(sql)
    assert "refused outside donto-pg migrate" in str(exc.value)
    db.rollback()
    # the same as the owner who opts in, for this transaction only
    db.execute("select set_config('donto.allow_ddl', 'on', true)")
    db.execute(sql)
    db.rollback()
    db.execute("set donto.allow_ddl = 'on'")
    db.execute(sql)
    db.rollback()
    db.execute("reset donto.allow_ddl")
    assert db.execute("select md5(string_agg(p.oid::regprocedure::text || p.prosrc, ',' "
                      "order by p.oid)) from pg_proc p "
                      "where p.pronamespace = 'donto'::regnamespace").fetchone()[0] == before
    assert db.execute("select count(*) from pg_event_trigger where evtname like "
                      "'donto_guard_ddl%%' and evtenabled = 'A'").fetchone()[0] == 2


def test_the_ddl_guard_leaves_other_schemas_and_new_objects_alone(db, connect):
    db.execute("create schema elsewhere")
    db.execute("create table elsewhere.t (a int)")
    db.execute("alter table elsewhere.t add column b int")
    db.execute("create or replace function elsewhere.f() returns int language sql "
               "as 'select 1'")
    db.execute("drop table elsewhere.t")
    db.execute("drop schema elsewhere cascade")
    # a new table, index and comment in donto stay free (tests and tools make them)
    db.execute("create table donto.scratch_notes (note text)")
    db.execute("create index on donto.scratch_notes (note)")
    db.execute("comment on table donto.scratch_notes is 'notes'")
    db.commit()
    # temp objects of a plain role, created, altered, dropped
    writer = connect("donto_writer")
    writer.execute("create temp table t (a int)")
    writer.execute("alter table t add column b int")
    writer.execute("drop table t")
    writer.commit()


def test_migrate_runs_again_past_the_guard(db):
    """migrate drops and recreates the I3 triggers and replaces every function: the guard
    lets it through, twice, and the guard is still there."""
    assert migrate.migrate(db) == []
    assert migrate.migrate(db) == []
    assert db.execute("select current_setting('donto.allow_ddl', true)").fetchone()[0] \
        in (None, "")
    with pytest.raises(errors.InsufficientPrivilege):
        db.execute(GUARDED["drop trigger"])
    db.rollback()


def _evil_package() -> tuple[Path, Path]:
    """A directory holding a donto_pg package whose import writes the file MARKER (which
    the server's OS user may create there): what an attacker would put on the path."""
    evil = Path(tempfile.mkdtemp(prefix="donto-evil-"))
    evil.chmod(0o777)
    marker = evil / "ran"
    (evil / "donto_pg").mkdir(mode=0o755)
    (evil / "donto_pg" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    (evil / "donto_pg" / "__init__.py").chmod(0o644)
    return evil, marker


def _refused_to_boot(logins, marker: Path, match: str) -> None:
    """A reader's backend loading donto_pg is refused (42501, MATCH), and the planted
    package never ran."""
    _, as_reader = logins("donto_reader")
    r = as_reader()
    with pytest.raises(errors.InsufficientPrivilege, match=match):
        r.execute("select donto._py_boot()")
    r.rollback()
    assert not marker.exists()


def test_an_owner_that_is_no_superuser_cannot_name_the_servers_code(db, logins):
    """donto.setting's python_path names the code the server's Python imports, as the
    server's OS user. A restore can leave the schema to an owner that is no superuser
    (made with a plain CREATE ROLE); that owner may write donto.setting, so the stored
    path is read only from a table a superuser owns."""
    assert db.execute("select source from donto._python_path()").fetchone() == (
        "donto.setting",)
    db.commit()
    owner, as_owner = logins("donto_reader")
    evil, marker = _evil_package()
    db.execute("set local donto.allow_ddl = 'on'")
    db.execute(f"alter table donto.setting owner to {owner}")
    db.commit()
    try:
        o = as_owner()
        o.execute(f"grant all on donto.setting to {owner}")
        o.execute("update donto.setting set value = %s where key = 'python_path'",
                  (json.dumps([str(evil)]),))
        o.commit()
        _refused_to_boot(logins, marker,
                         f"donto.setting \\(python_path\\) belongs to {owner}, not a superuser")
    finally:
        db.rollback()
        db.execute("set local donto.allow_ddl = 'on'")
        db.execute("alter table donto.setting owner to current_user")
        settings.write_settings(db)
        db.commit()
        shutil.rmtree(evil, ignore_errors=True)


def test_an_owner_that_is_no_superuser_cannot_replace_the_path_function(db, logins):
    """The same owner may replace donto._python_path() itself (it owns it; the DDL guard is
    a seat belt): donto._py_boot, PL/Python that only a superuser can replace, loads
    nothing while the path function is not a superuser's."""
    owner, as_owner = logins("donto_reader")
    evil, marker = _evil_package()
    db.execute("set local donto.allow_ddl = 'on'")
    db.execute(f"alter function donto._python_path() owner to {owner}")
    db.execute(f"grant create on schema donto to {owner}")
    db.commit()
    try:
        o = as_owner()
        o.execute("set donto.allow_ddl = 'on'")
        o.execute("create or replace function donto._python_path() "
                  "returns table (paths text[], source text) language sql stable "
                  f"as $$ select array['{evil}'], 'donto.python_path' $$")
        o.commit()
        _refused_to_boot(logins, marker,
                         f"donto._python_path\\(\\) belongs to {owner}, not a superuser")
    finally:
        db.rollback()
        db.execute("set local donto.allow_ddl = 'on'")
        db.execute(f"revoke create on schema donto from {owner}")
        db.execute("alter function donto._python_path() owner to current_user")
        db.commit()
        migrate.migrate(db, repair=True)  # the function's own text again
        shutil.rmtree(evil, ignore_errors=True)
