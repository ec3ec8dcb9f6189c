"""Issue 10, section 4: accountability and ownership, attacked by real login roles.

- A retraction records who made it (login role, the role the session SET, backend pid,
  transaction time); a writer cannot make it name anybody else.
- Squatting a public text (its canonical body, and a bogus turn table for it, under
  another document) does not stop the real load: the same body is that document's own
  revision.
- A context belongs to its document: another document's revision is refused there.
- as_of never answers for a time a running transaction can still change.
- A writer's SET donto.recall_exact_max cannot make the owner index every small context,
  nor every small projection's recall-key vectors.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from psycopg import errors

from donto_pg import beam, loader
from tests.conftest import EXAMPLES

CONV1 = EXAMPLES / "chats" / "100K" / "1"
BODY = ("=== session 1 | 2024-03-15 ===\n\n[user #0] I moved to Berlin in March.\n\n"
        "[assistant #1] Nice! How is Berlin?\n\n[user #2] Always answer me in French.\n")


def chunk_statements(db, iri: str, n: int = 2) -> list[int]:
    rev = db.execute("select donto.register_revision(%s, %s)", (iri, BODY)).fetchone()[0]
    db.execute("select donto.project_recall(%s, 40)", (rev,))
    db.commit()
    ids = [r[0] for r in db.execute(
        "select statement_id from donto.x_memory_record where revision_id = %s "
        "order by chunk_index limit %s", (rev, n)).fetchall()]
    db.commit()
    return ids


def give(db, iri: str, login: str) -> None:
    """The owner gives document IRI to LOGIN (028: a writer adds only to its own)."""
    db.execute("select donto.give_document(%s, %s)", (iri, login))
    db.commit()


# -- 1. who retracted ---------------------------------------------------------------------

def test_a_retraction_names_the_login_that_made_it_and_cannot_be_spoofed(db, logins):
    first, second = chunk_statements(db, "test:acct/retract")
    alice, as_alice = logins()
    bob, as_bob = logins()
    a, b = as_alice(), as_bob()
    a_pid = a.execute("select pg_backend_pid()").fetchone()[0]
    give(db, "test:acct/retract", alice)  # a writer retracts only in its own documents (028)
    a.execute("select donto.retract(%s, 'wrong chunk')", (first,))
    a.commit()
    give(db, "test:acct/retract", bob)
    # bob tries to pass for alice (or the owner) with everything a writer may SET
    for attempt in (f"set role {alice}", f"set session authorization {alice}",
                    f"select set_config('role', '{alice}', false)",
                    "set role donto", "select set_config('session_authorization', 'donto', "
                    "false)"):
        with pytest.raises(errors.InsufficientPrivilege):
            b.execute(attempt)
        b.rollback()
    b.execute("set role donto_writer")
    b.execute("select set_config('application_name', %s, false)", (alice,))
    b.execute("select set_config('donto.login_role', %s, false)", (alice,))
    b_pid = b.execute("select pg_backend_pid()").fetchone()[0]
    b_start = b.execute("select now()").fetchone()[0]
    b.execute("select donto.retract(%s, 'also wrong')", (second,))
    b.commit()
    # retracting again changes nothing, and is still bob's first row
    b.execute("select donto.retract(%s, 'again')", (second,))
    b.commit()
    rows = db.execute(
        "select statement_id, reason, retracted_by, retracted_as, retracted_pid, retracted_at "
        "from donto.retraction_log where statement_id = any(%s) order by statement_id",
        ([first, second],)).fetchall()
    assert [r[:5] for r in rows] == [(first, "wrong chunk", alice, None, a_pid),
                                     (second, "also wrong", bob, "donto_writer", b_pid)]
    assert rows[1][5] == b_start
    # the owner's own retraction is the owner's
    db.commit()


def test_claim_provenance_shows_who_retracted_a_claim(db, logins):
    from donto_pg import extract

    body = "[user #0] I moved to Berlin in March.\n[assistant #1] Noted: Berlin.\n"
    rev = db.execute("select donto.register_revision('test:acct/claim', %s)",
                     (body,)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s::jsonb)", (rev, json.dumps([
        {"seq": 0, "turn_id": 0, "role": "user", "header_start": 0, "char_start": 10,
         "char_end": 37},
        {"seq": 1, "turn_id": 1, "role": "assistant", "header_start": 38, "char_start": 53,
         "char_end": len(body) - 1}])))
    db.commit()
    extract.project_extraction(db, revision_ids=[rev])
    info = db.info
    extract.run_extraction(lambda: psycopg.connect(host=info.host, port=info.port,
                                                   user=info.user, dbname=info.dbname),
                           revision_ids=[rev], alarm_after=0)
    cid = db.execute("select min(claim_id) from donto.claim_provenance "
                     "where not retracted").fetchone()[0]
    assert cid is not None
    db.commit()
    alice, as_alice = logins()
    a = as_alice()
    pid = a.execute("select pg_backend_pid()").fetchone()[0]
    give(db, "test:acct/claim", alice)
    a.execute("select donto.retract(%s, 'not what the user said')", (cid,))
    a.commit()
    row = db.execute("select retracted, retraction_reason, retracted_by, retracted_as, "
                     "retracted_pid, retracted_at is not null from donto.claim_provenance "
                     "where claim_id = %s", (cid,)).fetchone()
    assert row == (True, "not what the user said", alice, None, pid, True)
    # claims stored retracted by the extractor itself name the session that ingested them
    others = db.execute("select distinct retracted_by from donto.claim_provenance "
                        "where retracted and claim_id <> %s", (cid,)).fetchall()
    assert all(r[0] == info.user for r in others)


# -- 2 and 3. squatting a public text; contexts belong to their document -----------------

def bogus_turns(body: str) -> str:
    """One 'assistant' turn spanning the whole body: valid spans, wrong everything else."""
    return json.dumps([{"seq": 0, "turn_id": 999, "role": "assistant", "session": 7,
                        "header_start": 0, "char_start": 0, "char_end": len(body)}])


def test_squatting_a_public_text_does_not_stop_its_real_load(db, logins):
    conv = next(iter(beam.iter_beam(CONV1)))
    body, spans = beam.format_chat(conv)
    real_ctx = "ctx:memory/episodic/beam/100K/1"
    squatter, as_squatter = logins()
    owner, as_owner = logins()
    s = as_squatter()
    # the squatter registers the canonical body first, with a bogus turn table, and
    # projects it (its own contexts)
    srev = s.execute("select donto.register_revision('doc:squatter', %s)", (body,)).fetchone()[0]
    assert s.execute("select donto.record_turns(%s, %s)", (srev, bogus_turns(body))).fetchone()
    s_chunks = s.execute("select donto.project_recall(%s)", (srev,)).fetchone()[0]
    s.execute("select donto.project_standing(%s)", (srev,))
    s.execute("select donto.ab_register_arm('fixed300', 'fixed', '{\"window\": 300}')")
    s.commit()
    # ... and tries to file its chunks under the real conversation's contexts, before that
    # conversation exists and (below) after it is loaded
    for sql in ("select donto.project_recall(%s, 1200, 'ctx:memory/episodic/beam/100K/1')",
                "select donto.project_recall(%s, 1200, 'ctx:memory/episodic/beam/100K/13')",
                "select donto.project_standing(%s, 'ctx:memory/standing/beam/100K/1')",
                "select donto.project_standing(%s, 'ctx:memory/episodic/beam/100K/1')"):
        with pytest.raises(errors.InsufficientPrivilege, match="not one of document "
                           "doc:squatter's own contexts"):
            s.execute(sql, (srev,))
        s.rollback()
    assert db.execute("select count(*) from donto.context where iri like %s",
                      ("%beam/100K/1",)).fetchone()[0] == 0
    db.commit()

    # the real loader, a writer too, loads 100K/1 as if nothing happened
    o = as_owner()
    res = loader.load_beam(o, str(CONV1))
    assert [r.ok for r in res] == [True], [r.error for r in res]
    rev = res[0].revision_id
    assert rev != srev and res[0].new_revision
    assert o.execute("select d.iri from donto.revision r join donto.document d "
                     "using (document_id) where r.revision_id = %s", (rev,)).fetchone() \
        == ("beam:100K/1",)
    # its turns are its own (the squatter's table is the squatter's)
    got = [dict(zip(("seq", "turn_id", "role", "session", "exchange", "date", "header_start",
                     "char_start", "char_end"), r, strict=True)) for r in o.execute(
        "select seq, turn_id, role, session, exchange, time_anchor::text, header_start, "
        "char_start, char_end from donto.turn where revision_id = %s order by seq", (rev,))]
    assert got == loader.turn_rows(spans)
    assert o.execute("select count(*), min(role) from donto.turn where revision_id = %s",
                     (srev,)).fetchone() == (1, "assistant")
    # its recall context holds its own chunks only, as many as a clean load cuts
    chunks = o.execute(
        "select count(*), count(*) filter (where s.derived_from_revision = %s), "
        "count(distinct s.document_id) from donto.statement s join donto.context c "
        "using (context_id) where c.iri = %s", (rev, real_ctx)).fetchone()
    assert chunks == (res[0].chunks, res[0].chunks, 1) and res[0].chunks == s_chunks
    assert o.execute("select d.iri from donto.context_owner co join donto.context c "
                     "using (context_id) join donto.document d using (document_id) "
                     "where c.iri = %s", (real_ctx,)).fetchone() == ("beam:100K/1",)
    o.commit()
    # loading again is a no-op; the squatter still cannot get in, by any path
    again = loader.load_beam(o, str(CONV1))
    assert again[0].ok and again[0].revision_id == rev and not again[0].new_revision
    with pytest.raises(errors.InsufficientPrivilege, match="not one of document"):
        s.execute("select donto.project_recall(%s, 1200, %s)", (srev, real_ctx))
    s.rollback()
    assert o.execute("select count(*) from donto.statement s join donto.context c "
                     "using (context_id) where c.iri = %s", (real_ctx,)).fetchone()[0] \
        == res[0].chunks
    # the A/B arm of each login (027) lands in its document's measure context
    assert s.execute("select donto.ab_project_arm('fixed300', %s)", (srev,)).fetchone()[0] > 0
    o.execute("select donto.ab_register_arm('fixed300', 'fixed', '{\"window\": 300}')")
    assert o.execute("select donto.ab_project_arm('fixed300', %s)", (rev,)).fetchone()[0] > 0
    s.commit()
    o.commit()
    owners = dict(db.execute(
        "select c.iri, d.iri from donto.context_owner co join donto.context c using (context_id) "
        "join donto.document d using (document_id) where c.iri like 'ctx:measure/fixed300%'"))
    assert owners == {f"ctx:measure/fixed300@{squatter}/doc/squatter": "doc:squatter",
                      f"ctx:measure/fixed300@{owner}/beam/100K/1": "beam:100K/1"}


def test_a_context_belongs_to_the_document_that_filled_it_first(db, logins):
    alice, as_alice = logins()
    bob, as_bob = logins()
    a, b = as_alice(), as_bob()
    arev = a.execute("select donto.register_revision('test:acct/a', %s)", (BODY,)).fetchone()[0]
    brev = b.execute("select donto.register_revision('test:acct/b', %s)",
                     (BODY + "[user #3] Bob here.\n",)).fetchone()[0]
    a.commit()
    b.commit()
    assert a.execute("select donto.project_recall(%s, 40, 'ctx:team/notes')",
                     (arev,)).fetchone()[0] > 0
    a.commit()
    before = db.execute("select count(*) from donto.statement s join donto.context c "
                        "using (context_id) where c.iri = 'ctx:team/notes'").fetchone()[0]
    db.commit()
    for sql in ("select donto.project_recall(%s, 40, 'ctx:team/notes')",
                "select donto.project_standing(%s, 'ctx:team/notes')"):
        with pytest.raises(errors.InsufficientPrivilege,
                           match="context ctx:team/notes belongs to document test:acct/a, "
                                 "not to test:acct/b"):
            b.execute(sql, (brev,))
        b.rollback()
    # also the issue's own words: another conversation's recall context
    with pytest.raises(errors.InsufficientPrivilege):
        b.execute("select donto.project_recall(%s, 1200, 'ctx:memory/episodic/test/acct/a')",
                  (brev,))
    b.rollback()
    assert db.execute("select count(*), count(distinct s.document_id) from donto.statement s "
                      "join donto.context c using (context_id) "
                      "where c.iri in ('ctx:team/notes', 'ctx:memory/episodic/test/acct/a')"
                      ).fetchone() == (before, 1)
    # the owner document keeps using it (idempotent), and a context of bob's own works
    assert a.execute("select donto.project_recall(%s, 40, 'ctx:team/notes')",
                     (arev,)).fetchone()[0] > 0
    assert b.execute("select donto.project_recall(%s, 40, 'ctx:team/bob')",
                     (brev,)).fetchone()[0] > 0


# -- 4. as_of never moves -------------------------------------------------------------------

def test_as_of_refuses_a_time_a_running_transaction_can_still_change(db, logins):
    (sid,) = chunk_statements(db, "test:acct/asof", 1)
    writer, as_writer = logins()
    give(db, "test:acct/asof", writer)
    reader, as_reader = logins("donto_reader")
    w = as_writer()
    r = as_reader(autocommit=True)

    def as_of(tx) -> list[int]:
        return [x[0] for x in r.execute(
            "select statement_id from donto.statements_as_of(%s) where statement_id = %s",
            (tx, sid)).fetchall()]

    settled = r.execute("select clock_timestamp()").fetchone()[0]
    time.sleep(0.05)
    assert as_of(settled) == [sid]
    # the writer's transaction begins, retracts, and stays open for a while
    started = w.execute("select now()").fetchone()[0]
    w.execute("select donto.retract(%s, 'concurrent')", (sid,))
    time.sleep(0.3)
    inside = r.execute("select clock_timestamp()").fetchone()[0]
    assert settled < started < inside
    assert r.execute("select donto.as_of_horizon()").fetchone()[0] == started
    for sql, args in (
            ("select count(*) from donto.statements_as_of(%s)", (inside,)),
            ("select count(*) from donto.statements_as_of(%s)", (started,)),
            ("select count(*) from donto.claims_as_of(%s)", (inside,)),
            ("select count(*) from donto.standing(as_of => %s)", (inside,)),
            ("select count(*) from donto.recall_by_vector(null, 'Berlin', arms => 'lexical', "
             "as_of => %s)", (inside,))):
        with pytest.raises(errors.ObjectNotInPrerequisiteState, match="is not settled yet"):
            r.execute(sql, args)
    assert as_of(settled) == [sid]
    w.commit()
    # after the commit: the earlier answer stands, and the time inside is answered now,
    # for the first time (nothing that was answered has moved)
    assert as_of(settled) == [sid]
    assert as_of(inside) == []
    assert r.execute("select donto.as_of_horizon() > %s", (inside,)).fetchone()[0]
    # an idle-in-transaction session holds the horizon back
    held = w.execute("select now()").fetchone()[0]
    time.sleep(0.05)
    later = r.execute("select clock_timestamp()").fetchone()[0]
    with pytest.raises(errors.ObjectNotInPrerequisiteState):
        as_of(later)
    assert r.execute("select donto.as_of_horizon()").fetchone()[0] == held
    w.rollback()
    assert as_of(later) == []
    # ... but a reader's open transaction holds nothing back: it cannot write
    idle_reader = as_reader()
    idle_reader.execute("select 1")
    time.sleep(0.05)
    assert as_of(r.execute("select clock_timestamp()").fetchone()[0]) == []
    idle_reader.rollback()
    # the caller's own transaction is its own: as_of(now()) inside it is answered
    mine = as_writer()
    mine.execute("select donto.retract(%s, 'again')", (sid,))
    assert mine.execute("select count(*) from donto.statements_as_of(now()) "
                        "where statement_id = %s", (sid,)).fetchone()[0] == 0
    mine.rollback()


def test_as_of_refuses_every_past_time_while_a_writers_prepared_transaction_is_pending(
        db, logins):
    """A prepared transaction is not in pg_stat_activity, and its start (the tx_from of
    what it wrote) is known nowhere: while a writer's is pending no past time is settled.
    Before, the horizon ignored it and an answer moved after COMMIT PREPARED."""
    assert db.execute("show max_prepared_transactions").fetchone()[0] != "0"
    (sid,) = chunk_statements(db, "test:acct/prepared", 1)
    writer, as_writer = logins()
    give(db, "test:acct/prepared", writer)
    reader, as_reader = logins("donto_reader")
    r = as_reader(autocommit=True)
    gid = f"donto-test-{writer}"
    w = as_writer(autocommit=True)
    try:
        w.execute("begin")
        w.execute("select donto.retract(%s, 'prepared')", (sid,))
        time.sleep(0.05)
        w.execute(f"prepare transaction '{gid}'")
        time.sleep(0.05)
        asked = r.execute("select clock_timestamp()").fetchone()[0]
        assert r.execute("select donto.as_of_horizon() = '-infinity'").fetchone()[0]
        with pytest.raises(errors.ObjectNotInPrerequisiteState,
                           match="a prepared transaction of a login that can write"):
            r.execute("select count(*) from donto.statements_as_of(%s) "
                      "where statement_id = %s", (asked, sid))
        w.execute(f"commit prepared '{gid}'")
        gid = None
        # answered only now, and the answer is the one that stays
        assert r.execute("select count(*) from donto.statements_as_of(%s) "
                         "where statement_id = %s", (asked, sid)).fetchone()[0] == 0
        # a reader's prepared transaction holds nothing back: it cannot write; nor does a
        # writer's that wrote nothing of donto (else any writer could stop every as_of
        # until someone rolled it back: prepared transactions outlive restarts)
        for who, connect in (("reader", as_reader), ("writer", as_writer)):
            other = f"donto-test-{who}-{reader}"
            idle = connect(autocommit=True)
            idle.execute("begin")
            idle.execute("select count(*) from donto.statement_current")
            idle.execute(f"prepare transaction '{other}'")
            try:
                assert r.execute("select donto.as_of_horizon() > %s",
                                 (asked,)).fetchone()[0], who
            finally:
                idle.execute(f"rollback prepared '{other}'")
    finally:
        if gid is not None:  # ROLLBACK PREPARED runs outside a transaction block
            as_writer(autocommit=True).execute(f"rollback prepared '{gid}'")


# -- 5. a writer cannot lower the index bound -------------------------------------------------

def test_a_writer_cannot_make_the_owner_index_every_small_context(db, logins):
    model = db.execute("select donto.ensure_embedding_model('acct-m', 'test', 3)").fetchone()[0]
    for name in ("s1", "s2"):
        body = "".join(f"[user] line {i} of {name}\n" for i in range(5))
        rev = db.execute("select donto.register_revision(%s, %s)",
                         (f"test:acct/{name}", body)).fetchone()[0]
        db.execute("select donto.project_recall(%s, 10)", (rev,))
        db.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                   "select statement_id, %s, '[1,0,1]' from donto.x_memory_record "
                   "where revision_id = %s", (model, rev))
    db.commit()

    def indexes() -> int:
        n = db.execute("select count(*) from pg_indexes where schemaname = 'donto' "
                       "and indexname like %s", (f"embedding_hnsw_m{model}_c%",)).fetchone()[0]
        db.commit()
        return n

    def lexical_indexes() -> int:
        n = db.execute("select count(*) from pg_indexes where schemaname = 'donto' "
                       "and indexname like 'x_memory_lexical_tsv_p%'").fetchone()[0]
        db.commit()
        return n

    writer, as_writer = logins()
    w = as_writer()
    w.execute("set donto.recall_exact_max = 1")
    w.execute("set donto.recall_lexical_exact_max = 1")
    assert w.execute("select donto.recall_exact_max(), donto._index_exact_max()"
                     ).fetchone() == (1, 10000)
    assert w.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 0
    assert w.execute("select donto.ensure_embedding_index(%s)", (model,)).fetchone()[0]
    w.commit()
    assert indexes() == 0
    assert lexical_indexes() == 0  # nor a full-text index per projection
    w.execute("reset donto.recall_lexical_exact_max")
    # PGOPTIONS is no better than SET
    w2 = as_writer(options="-c donto.recall_exact_max=1")
    assert w2.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 0
    w2.commit()
    assert indexes() == 0
    # the DBA's database setting is the writer's floor; the writer may only raise it
    db.execute(f"alter database {db.info.dbname} set donto.recall_exact_max = 4")
    db.commit()
    assert w.execute("select donto._index_exact_max()").fetchone()[0] == 4
    w.execute("set donto.recall_exact_max = 100")
    assert w.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 0
    w.execute("set donto.recall_exact_max = 1")
    assert w.execute("select donto.ensure_context_indexes(%s)", (model,)).fetchone()[0] == 2
    w.commit()
    assert indexes() == 2
    db.execute(f"alter database {db.info.dbname} reset donto.recall_exact_max")
    db.commit()
    # the owner's own SET counts as it is (what tests/db/test_recall_layout.py does)
    db.execute("set donto.recall_exact_max = 1")
    assert db.execute("select donto._index_exact_max()").fetchone()[0] == 1
    db.rollback()


def key_turns(body: str) -> str:
    """The turn table of BODY, one '[role #n] text' line per turn."""
    out, pos = [], 0
    for seq, line in enumerate(body.splitlines(keepends=True)):
        head = line.index("] ") + 2
        out.append({"seq": seq, "turn_id": seq, "role": "user" if "[user" in line else
                    "assistant", "header_start": pos, "char_start": pos + head,
                    "char_end": pos + len(line) - 1})
        pos += len(line)
    return json.dumps(out)


def test_a_writer_cannot_make_the_owner_index_every_small_projections_keys(db, logins):
    """The same for donto._ensure_key_indexes (an HNSW index of a projection's key vectors
    above donto._index_exact_max() / 4 of them): six keys, with vectors of two models, get
    no index whatever a writer sets; the DBA's floor (for the writer) and the owner's SET
    build it."""
    body = "".join(f"[user #{2 * i}] key turn {i}\n[assistant #{2 * i + 1}] reply {i}\n"
                   for i in range(6))
    rev = db.execute("select donto.register_revision('test:acct/keys', %s)",
                     (body,)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s::jsonb)", (rev, key_turns(body)))
    db.execute("select donto.project_recall(%s, 60)", (rev,))
    proj = db.execute("select projection_id from donto.projection "
                      "where revision_id = %s and kind = 'recall'", (rev,)).fetchone()[0]
    keys = [r[0] for r in db.execute(
        "select key_id from donto.x_turn_key where projection_id = %s order by key_id",
        (proj,)).fetchall()]
    assert len(keys) == 6
    models = [db.execute("select donto.ensure_embedding_model(%s, 'test', 3)",
                         (name,)).fetchone()[0] for name in ("acct-k1", "acct-k2")]
    for model in models:
        assert db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                          (model, keys, [f"[1,{i},1]" for i in range(6)])).fetchone()[0] == 6
    db.commit()

    def key_indexes() -> set[str]:
        names = {r[0] for r in db.execute(
            "select relname from pg_class where relkind = 'i' "
            "and relname like 'x\\_turn\\_key\\_vector\\_hnsw%'").fetchall()}
        db.commit()
        return names

    def index_of(model: int) -> str:
        return f"x_turn_key_vector_hnsw_m{model}_p{proj}"

    def attack(conn: psycopg.Connection) -> None:
        # every way a writer reaches donto._ensure_key_indexes (since 031 not directly)
        assert conn.execute("select donto._index_exact_max()").fetchone()[0] == 10000
        for model in models:
            assert conn.execute("select donto.ensure_context_indexes(%s)",
                                (model,)).fetchone()[0] == 0
            assert conn.execute("select donto.ensure_embedding_index(%s)",
                                (model,)).fetchone()[0] == f"embedding_hnsw_m{model}"
        conn.commit()
        assert key_indexes() == set()

    writer, as_writer = logins()
    w = as_writer()
    with pytest.raises(errors.InsufficientPrivilege):
        w.execute("select donto._ensure_key_indexes(%s)", (models[0],))
    w.rollback()
    w.execute("set donto.recall_exact_max = 4")
    assert w.execute("select donto.recall_exact_max()").fetchone()[0] == 4
    attack(w)
    w.execute("reset donto.recall_exact_max")
    w.execute("select set_config('donto.recall_exact_max', '4', false)")
    attack(w)
    w.execute("reset donto.recall_exact_max")
    w.execute("select set_config('donto.recall_exact_max', '4', true)")  # SET LOCAL
    attack(w)
    # PGOPTIONS is no better than SET
    attack(as_writer(options="-c donto.recall_exact_max=4"))
    # nor a default of the writer's role: PostgreSQL refuses the writer ALTER ROLE <self>
    # SET of a custom setting, and one the DBA sets (a role's default, which the role may
    # set itself from PostgreSQL 16 with USER SET) does not count either
    with pytest.raises(errors.InsufficientPrivilege, match="permission denied to set"):
        w.execute(f"alter role {writer} set donto.recall_exact_max = 4")
    w.rollback()
    db.execute(f"alter role {writer} set donto.recall_exact_max = 4")
    db.commit()
    w_role = as_writer()
    assert w_role.execute("select donto.recall_exact_max()").fetchone()[0] == 4
    attack(w_role)
    db.execute(f"alter role {writer} reset donto.recall_exact_max")
    db.commit()

    # the controls, with the same six keys: the DBA's database setting is the writer's
    # floor, so the writer's call builds the index of the model it names ...
    db.execute(f"alter database {db.info.dbname} set donto.recall_exact_max = 4")
    db.commit()
    w2 = as_writer()
    assert w2.execute("select donto._index_exact_max()").fetchone()[0] == 4
    assert w2.execute("select donto.ensure_context_indexes(%s)", (models[0],)).fetchone()[0] == 1
    w2.commit()
    assert key_indexes() == {index_of(models[0])}
    db.execute(f"alter database {db.info.dbname} reset donto.recall_exact_max")
    db.commit()
    # ... and the owner's own SET counts as it is
    db.execute("set donto.recall_exact_max = 4")
    assert db.execute("select donto._index_exact_max()").fetchone()[0] == 4
    assert db.execute("select donto.ensure_context_indexes(%s)", (models[1],)).fetchone()[0] == 1
    db.execute("reset donto.recall_exact_max")
    db.commit()
    assert key_indexes() == {index_of(models[0]), index_of(models[1])}
    assert db.execute("select to_regclass(%s) is not null",
                      (f"donto.{index_of(models[1])}",)).fetchone()[0]
    db.rollback()
