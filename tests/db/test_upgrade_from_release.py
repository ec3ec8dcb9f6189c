"""An upgrade from a release (ALTER EXTENSION donto UPDATE from 0.1.0 or 0.2.0).

It keeps what its users forgot. In those releases the only way a statement was retracted
was donto.retract, a caller's request ("forget my PIN"): the database retracted nothing of
its own. Migration 032 marked every retraction made before it as the database's own
(by_hand false), so a recall chunk its user had retracted was no forgetting (034, 035):
`donto-pg reproject`, the step the upgrade asks for, cut a standing statement over its
words, current, and recall_payload showed the PIN in its standing memory.

And a session that ran the release's PL/Python goes on with the updated SQL.

Found by a review of deployment against migrations 033-035.
"""

from __future__ import annotations

import json
import os

import psycopg
import pytest

from donto_pg import build, settings
from donto_pg.db import register_vector_if_present
from donto_pg.embed import embed_pending
from tests.db.test_migrate import fresh_db  # noqa: F401

SECRET = "4417"
TURNS = [
    "I opened an account at the harbour bank last spring.",
    f"From now on always remember that my bank PIN is {SECRET} when I ask about my bank.",
    "I also asked the bank about the mortgage rates and the savings account.",
]


def _load(conn) -> tuple[int, int]:
    """A conversation of three user turns (the old functions), cut into recall chunks of
    one turn each; returns (revision, the chunk holding the PIN)."""
    lines = [f"[user #{i}] {t}\n" for i, t in enumerate(TURNS)]
    body = "".join(lines)
    rev = conn.execute("select donto.register_revision('chat:upgrade/pin', %s)",
                       (body,)).fetchone()[0]
    turns, at = [], 0
    for i, line in enumerate(lines):
        head = len(f"[user #{i}] ")
        turns.append({"seq": i, "turn_id": i, "role": "user", "header_start": at,
                      "char_start": at + head, "char_end": at + len(line) - 1})
        at += len(line)
    conn.execute("select donto.record_turns(%s, %s)", (rev, json.dumps(turns)))
    conn.execute("select donto.project_recall(%s, %s)", (rev, max(map(len, lines))))
    # a second cut (windows of two turns): the release's retract left its chunks current
    wide = conn.execute("select donto.project_recall(%s, %s)",
                        (rev, 2 * max(map(len, lines)))).fetchone()[0]
    assert wide >= 1
    chunks = conn.execute(
        "select s.statement_id, substr(r.body, m.char_start + 1, m.char_end - m.char_start) "
        "from donto.x_memory_record m join donto.statement s using (statement_id) "
        "join donto.revision r on r.revision_id = m.revision_id "
        "where m.revision_id = %s order by m.char_end - m.char_start, 1", (rev,)).fetchall()
    pin = [sid for sid, text in chunks if SECRET in text][0]  # the one-turn chunk
    conn.commit()
    return rev, pin


def _release_db(make_db, old: str) -> psycopg.Connection:
    """A fresh database with release OLD of the extension (the current one installed
    beside it, so that ALTER EXTENSION UPDATE can reach it)."""
    sharedir = build.pg_sharedir() / "extension"
    if not os.access(sharedir, os.W_OK):
        pytest.fail(f"installing into {sharedir} needs root (CI runs as root)")
    build.install_extension()
    conn = make_db()
    conn.execute(f"create extension donto version '{old}' cascade")
    settings.write_settings(conn)
    conn.commit()
    return conn


def _shown(conn) -> list[str]:
    """Every text of the conversation a reader is shown now that holds the PIN (what is
    left to embed embedded first)."""
    register_vector_if_present(conn)
    embed_pending(conn, progress=False)
    conn.commit()
    out = []
    for q in ("what is my bank PIN?", "what did I ask the bank about the mortgage?"):
        out += [t for (t,) in conn.execute(
            "select chunk_text from donto.recall(%s, k => 5, arms => 'lexical')", (q,))
            if SECRET in t]
        payload = conn.execute("select donto.recall_payload(%s, 2000, k => 5)::text",
                               (q,)).fetchone()[0]
        if SECRET in payload:
            out.append(payload)
    out += [t for (t,) in conn.execute(
        "select statement_text from donto.standing(donto.recall_context_iri("
        "'chat:upgrade/pin'))") if SECRET in t]
    conn.commit()
    return out


@pytest.mark.parametrize("old", list(build.RELEASED))
def test_alter_extension_update_keeps_a_release_s_forgetting(fresh_db, old):  # noqa: F811
    conn = _release_db(fresh_db, old)
    _, pin = _load(conn)
    conn.execute("select donto.retract(%s, 'forget my PIN')", (pin,))
    conn.commit()
    conn.execute("alter extension donto update")
    conn.commit()
    # a backend that loaded the release's donto_pg keeps it (README): a new session
    where = {"host": conn.info.host, "port": conn.info.port, "user": conn.info.user,
             "dbname": conn.info.dbname}
    conn.close()
    conn = psycopg.connect(**where)
    assert conn.execute("select by_hand from donto.retraction where statement_id = %s",
                        (pin,)).fetchone() == (True,)
    # the wide chunk over the same words went with it (carried, in the upgrade)
    assert conn.execute(
        "select count(*) from donto.statement_current s join donto.x_memory_record m "
        "using (statement_id) join donto.revision r on r.revision_id = m.revision_id "
        "where substr(r.body, m.char_start + 1, m.char_end - m.char_start) like %s",
        (f"%{SECRET}%",)).fetchone() == (0,)
    assert conn.execute("select count(*) from donto.setting where key = 'carry_forgetting'"
                        ).fetchone() == (0,)
    assert _shown(conn) == []
    # the step an upgrade asks for: cut what the release did not (recall keys, standing
    # memory); what is cut over the forgotten words is retracted as it is filed
    assert conn.execute("select count(*) from donto.stale_revisions()").fetchone()[0] == 1
    conn.execute("select * from donto.reproject()")
    conn.commit()
    assert conn.execute("select count(*) from donto.stale_revisions()").fetchone()[0] == 0
    assert _shown(conn) == []
    conn.close()



@pytest.mark.parametrize("old", list(build.RELEASED))
def test_a_session_that_ran_the_release_s_python_goes_on_after_the_update(
        fresh_db, old):  # noqa: F811
    """A backend that booted the release's PL/Python (its donto._py_boot cached
    donto_pg.plpy_entry in GD) runs the updated SQL in the same session (a pooled
    connection, or the DBA's psql): every topic the current SQL calls is there. Before,
    the standing and append topics were missing (AttributeError: donto.reproject, the
    step an upgrade asks for, and donto.append_turns failed until the session ended)."""
    conn = _release_db(fresh_db, old)
    _load(conn)  # project_recall: the release's PL/Python, booted in this backend
    conn.execute("alter extension donto update")
    conn.commit()
    assert conn.execute("select count(*) from donto.reproject()").fetchone()[0] == 1
    conn.commit()
    rev = conn.execute("select donto.append_turns('chat:upgrade/pin', %s, '{}')", (json.dumps(
        [{"role": "user", "content": "I also like tea."}]),)).fetchone()[0]
    conn.commit()
    assert conn.execute("select count(*) from donto.standing(donto.recall_context_iri("
                        "'chat:upgrade/pin'))").fetchone()[0] >= 1
    assert rev > 1
    conn.close()


@pytest.mark.parametrize("old", list(build.RELEASED))
def test_a_release_s_fixed_blocks_run_with_the_current_python(fresh_db, old):  # noqa: F811
    """A database still on a release runs its own SQL with the installed donto_pg: its
    donto._ab_fixed_blocks imports donto_pg.ab.fixed_blocks_sql, which had moved to the
    server floor (AttributeError: the A/B gate's fixed arm failed on such a database)."""
    conn = _release_db(fresh_db, old)
    rev, _ = _load(conn)
    rows = conn.execute("select * from donto._ab_fixed_blocks(%s, 60)", (rev,)).fetchall()
    assert len(rows) >= 3
    conn.close()


def _strangers(conn, role: str) -> list[tuple]:
    """The objects of schema donto that ROLE owns."""
    rows = conn.execute(
        "select 'relation', c.oid::regclass::text from pg_class c join pg_roles r "
        "on r.oid = c.relowner where c.relnamespace = 'donto'::regnamespace "
        "and r.rolname = %s union all "
        "select 'function', p.oid::regprocedure::text from pg_proc p join pg_roles r "
        "on r.oid = p.proowner where p.pronamespace = 'donto'::regnamespace "
        "and r.rolname = %s order by 1, 2", (role, role)).fetchall()
    conn.commit()
    return rows


@pytest.mark.parametrize("how", ["alter extension", "migrate"])
def test_an_upgrade_by_another_superuser_leaves_every_object_to_the_owner(
        fresh_db, how):  # noqa: F811
    """A DBA's own superuser account upgrades (ALTER EXTENSION donto UPDATE from 0.2.0, or
    `donto-pg migrate` of a database at 034): what the upgrade creates (tables, views,
    types, functions, security definers among them) belongs to the schema's owner, as in
    a fresh install, not to that account, which can then be dropped. Before, 124 functions
    (25 security definers) and 55 relations of an update from 0.2.0 were that account's
    and DROP ROLE failed."""
    from donto_pg import migrate

    if how == "alter extension":
        build.install_extension()
    conn = fresh_db()
    if how == "alter extension":
        conn.execute("create extension donto version '0.2.0' cascade")
        settings.write_settings(conn)
    else:
        migrate.migrate(conn, upto="034")
    conn.commit()
    dba = f"dba_{os.getpid()}"
    conn.execute(f"drop role if exists {dba}")
    conn.execute(f"create role {dba} superuser login password 'pw'")
    conn.commit()
    try:
        d = psycopg.connect(host=conn.info.host, port=conn.info.port, user=dba, password="pw",
                            dbname=conn.info.dbname)
        if how == "alter extension":
            d.execute("alter extension donto update")
            d.commit()
        else:
            assert migrate.migrate(d) == [m.name for m in migrate.migrations()
                                          if m.name[:3] > "034"]
        d.close()
        assert _strangers(conn, dba) == []
        _, pin = _load(conn)  # the functions work, as the owner's
        conn.execute("select donto.retract(%s, 'forget my PIN')", (pin,))
        conn.commit()
    finally:
        conn.execute(f"drop role {dba}")  # nothing of the schema depends on it
        conn.commit()
