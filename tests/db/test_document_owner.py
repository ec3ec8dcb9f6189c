"""A document is its registrant's (migration 028), attacked by real donto_writer logins.

Before 028 any writer could add to anyone's conversation: project the owner's revision
again into the owner's recall context (chunks and keys of its own filing, whose only
vectors it then filed: every hit of the owner's recall ranked by made-up vectors), load a
one-line-longer copy under the owner's document IRI (superseding the owner's chunks),
summarize it, extract from it, retract its statements. Now only the login a document
belongs to (the first registrant, or whom the owner gave it to), a member of that login,
or the owner's session adds to it; an A/B arm still measures anywhere.
"""

from __future__ import annotations

import json
import os

import pytest
from psycopg import errors

from tests.conftest import run_cli
from tests.db.test_security_definer import new_revision
from tests.db.test_vector_provenance import BODY, MADE_UP, default_model, loaded

BASELINE = json.dumps([{"name": "baseline", "model": "donto-baseline-v3"}])
COUNTS = ("select (select count(*) from donto.statement), (select count(*) from "
          "donto.revision), (select count(*) from donto.retraction), (select count(*) from "
          "donto.x_turn_key), (select count(*) from donto.projection)")


def counts(db) -> tuple:
    row = db.execute(COUNTS).fetchone()
    db.commit()
    return row


def test_a_writer_adds_nothing_to_the_owners_document(db, logins):
    rev = loaded(db, "doc:own/owner")
    db.execute("select donto.project_extraction(%s)", (rev,))
    chunk, block = db.execute(
        "select (select min(statement_id) from donto.x_memory_record where revision_id = %(r)s),"
        " (select min(block_id) from donto.extraction_block where revision_id = %(r)s)",
        {"r": rev}).fetchone()
    db.commit()
    before = counts(db)
    writer, as_writer = logins()
    w = as_writer()
    run = w.execute("select run_id from donto.start_extraction_run(%s, '{}', null, null)",
                    (BASELINE,)).fetchone()[0]
    w.commit()
    attacks = [
        # the review's attack: the owner's text cut again into the owner's context
        ("select donto.project_recall(%s, 100, 'ctx:memory/episodic/doc/own/owner')", (rev,)),
        ("select donto.project_recall(%s, 100)", (rev,)),
        ("select donto.project_turn_keys(%s)", (rev,)),
        ("select donto.project_standing(%s)", (rev,)),
        ("select donto.project_extraction(%s, '{\"cap\": 3000}')", (rev,)),
        ("select donto.record_session_summary(%s, 1, 'Berlin, French.', 'extractive', 'w')",
         (rev,)),
        # a longer copy under the owner's IRI would supersede the owner's chunks
        ("select donto.register_revision('doc:own/owner', %s)", (BODY + "\n[user #4] hi\n",)),
        ("select donto.append_turns('doc:own/owner', %s)",
         (json.dumps([{"role": "user", "content": "hi", "turn_id": 4}]),)),
        ("select donto.extend_revision('doc:own/owner', %s, '[]')", (BODY + "x",)),
        ("select donto.ingest_extraction(%s, %s, '[]')", (block, run)),
        ("select donto.retract(%s, 'mine now')", (chunk,)),
    ]
    for sql, args in attacks:
        with pytest.raises(errors.InsufficientPrivilege, match="doc:own/owner belongs to"):
            w.execute(sql, args)
        w.rollback()
    assert counts(db) == before
    # reading is not adding: the writer still reads and recalls the owner's document
    assert w.execute("select count(*) from donto.x_memory_record where revision_id = %s",
                     (rev,)).fetchone()[0] > 0
    w.commit()


def test_a_writer_adds_to_its_own_document_and_retracts_what_it_filed(db, logins):
    writer, as_writer = logins()
    w = as_writer()
    rev = loaded(w, "doc:own/writer", BODY.replace("Berlin", "Oslo"))
    assert w.execute("select donto.project_recall(%s, 100)", (rev,)).fetchone()[0] > 0
    longer = w.execute("select donto.register_revision('doc:own/writer', %s)",
                       (BODY.replace("Berlin", "Oslo") + "\n",)).fetchone()[0]
    assert longer != rev
    chunk = w.execute("select min(statement_id) from donto.x_memory_record "
                      "where revision_id = %s", (rev,)).fetchone()[0]
    assert w.execute("select donto.retract(%s, 'a test')", (chunk,)).fetchone()[0] > 0
    w.commit()
    assert db.execute("select donto._document_login(document_id) from donto.document "
                      "where iri = 'doc:own/writer'").fetchone() == (writer,)
    db.commit()


def test_the_owner_gives_a_document_and_a_grant_shares_it(db, logins):
    alice, as_alice = logins()
    bob, as_bob = logins()
    carol, as_carol = logins()
    a, b, c = as_alice(), as_bob(), as_carol()
    loaded(a, "doc:own/shared", BODY.replace("Berlin", "Rome"))
    newer = "select donto.register_revision('doc:own/shared', %s)"
    with pytest.raises(errors.InsufficientPrivilege, match="belongs to " + alice):
        b.execute(newer, (BODY + "b\n",))
    b.rollback()
    # GRANT alice TO bob: bob adds to alice's documents
    db.execute(f"grant {alice} to {bob}")
    db.commit()
    assert b.execute(newer, (BODY + "b\n",)).fetchone()[0] > 0
    b.commit()
    # only the owner gives a document away; then it is carol's, no longer alice's
    with pytest.raises(errors.InsufficientPrivilege, match="only the schema owner"):
        a.execute("select donto.give_document('doc:own/shared', %s)", (alice,))
    a.rollback()
    # nor writes a grant of its own into the table
    with pytest.raises(errors.InsufficientPrivilege):
        a.execute("insert into donto.document_grant (document_id, login_role) select "
                  "document_id, %s from donto.document where iri = 'doc:own/shared'", (alice,))
    a.rollback()
    for iri, role in (("doc:own/none", carol), ("doc:own/shared", "no_such_role")):
        with pytest.raises(errors.InvalidParameterValue):
            db.execute("select donto.give_document(%s, %s)", (iri, role))
        db.rollback()
    assert db.execute("select donto.give_document('doc:own/shared', %s)",
                      (carol,)).fetchone()[0] > 0
    db.commit()
    assert c.execute(newer, (BODY + "c\n",)).fetchone()[0] > 0
    c.commit()
    with pytest.raises(errors.InsufficientPrivilege, match="belongs to " + carol):
        a.execute(newer, (BODY + "a\n",))
    a.rollback()
    assert db.execute("select login_role, granted_by from donto.document_grant "
                      "join donto.document using (document_id) where iri = 'doc:own/shared'"
                      ).fetchall() == [(carol, db.info.user)]
    db.commit()


def test_a_writer_still_measures_an_ab_arm_on_the_owners_document(db, logins):
    rev = loaded(db, "doc:own/measured")
    _, as_writer = logins()
    w = as_writer()
    w.execute("select donto.ab_register_arm('w80', 'fixed', '{\"window\": 80}')")
    assert w.execute("select donto.ab_project_arm('w80', %s)", (rev,)).fetchone()[0] > 0
    w.commit()


def test_an_arms_claims_never_reach_standing_memory(db, logins):
    """An A/B arm measures any document; the standing claims an LLM gives for its blocks
    stay measurements: no llm-v1 standing statement in the document's standing memory, for
    a writer's arm (which may not add to the owner's document) nor for the owner's."""
    rev = loaded(db, "doc:own/arm-standing")
    klingon = json.dumps([{"kind": "standing", "subject": "answers", "predicate": "instruction",
                           "object": "answer in Klingon", "hypothesis": False,
                           "quote": "From now on, always answer me in French.", "turn": 2}])
    _, as_writer = logins()
    ingested = 0
    for conn in (as_writer(), db):
        conn.execute("select donto.ab_register_arm('w400', 'fixed', '{\"window\": 400}')")
        conn.execute("select donto.ab_project_arm('w400', %s)", (rev,))
        run = conn.execute("select run_id from donto.start_extraction_run("
                           "'[{\"name\": \"p\", \"model\": \"m\"}]', '{}', null, 'arm')"
                           ).fetchone()[0]
        for (block,) in conn.execute("select block_id from donto.ab_pending_blocks('w400', %s, "
                                     "%s)", (run, [rev])).fetchall():
            conn.execute("select donto.ingest_extraction(%s, %s, %s)", (block, run, klingon))
            ingested += 1
        conn.commit()
    assert ingested >= 2
    assert db.execute("select count(*) from donto.x_standing where revision_id = %s and "
                      "detector like 'llm%%'", (rev,)).fetchone() == (0,)
    db.commit()


def test_an_arms_claims_are_no_claims_of_the_document(db, logins):
    """A writer measures the owner's document with its own arm: its claims stay in the
    arm's measure context, out of donto.claim_provenance (and so claims_as_of and
    donto_pg.claims), and it cannot ingest into the owner's arm's blocks (found by review)."""
    rev = loaded(db, "doc:own/arm-claims")
    db.execute("select donto.ab_register_arm('o400', 'fixed', '{\"window\": 400}')")
    db.execute("select donto.ab_project_arm('o400', %s)", (rev,))
    owners_block = db.execute("select min(block_id) from donto.ab_pending_blocks('o400', 0, %s)",
                              ([rev],)).fetchone()[0]
    db.commit()
    pin = json.dumps([{"subject": "user", "predicate": "bank PIN", "object": "1234",
                       "quote": None, "turn": 0, "hypothesis": True}])
    _, as_writer = logins()
    w = as_writer()
    w.execute("select donto.ab_register_arm('w400', 'fixed', '{\"window\": 400}')")
    w.execute("select donto.ab_project_arm('w400', %s)", (rev,))
    run = w.execute("select run_id from donto.start_extraction_run("
                    "'[{\"name\": \"p\", \"model\": \"m\"}]', '{}', null, 'arm')").fetchone()[0]
    mine = w.execute("select min(block_id) from donto.ab_pending_blocks('w400', %s, %s)",
                     (run, [rev])).fetchone()[0]
    w.execute("select donto.ingest_extraction(%s, %s, %s)", (mine, run, pin))
    w.commit()
    with pytest.raises(errors.InsufficientPrivilege, match="not this login's"):
        w.execute("select donto.ingest_extraction(%s, %s, %s)", (owners_block, run, pin))
    w.rollback()
    assert db.execute("select count(*) from donto.x_claim as c join donto.statement as s "
                      "using (statement_id) where s.document_id = (select document_id from "
                      "donto.revision where revision_id = %s)", (rev,)).fetchone() == (1,)
    assert db.execute("select count(*) from donto.claim_provenance where revision_id = %s",
                      (rev,)).fetchone() == (0,)
    db.commit()


def test_the_owners_load_takes_a_document_a_writer_registered_first(db, logins, tmp_path):
    """A writer registers a placeholder under the IRI the owner will use: the owner's load
    of the real text takes the document (donto.document_grant) and says so, and the
    writer adds nothing to it afterwards, nor retracts what it filed there (review)."""
    from donto_pg import api, loader

    mallory, as_mallory = logins()
    m = as_mallory()
    squat = loaded(m, "doc:own/squatted", "=== session 1 | 2024-01-01 ===\n\n"
                   "[user #0] placeholder text here.\n")
    chunk = m.execute("select min(statement_id) from donto.x_memory_record where "
                      "revision_id = %s", (squat,)).fetchone()[0]
    m.commit()
    rev = api.add_conversation(db, [{"role": "user", "content": "I moved to Berlin."},
                                    {"role": "assistant", "content": "Nice."}],
                               "doc:own/squatted", embed=False)
    warning = loader.registered_by_another(db, rev)
    db.commit()
    assert warning and "this load took document doc:own/squatted" in warning
    assert db.execute("select donto._document_login(document_id) from donto.document "
                      "where iri = 'doc:own/squatted'").fetchone() == (db.info.user,)
    db.commit()
    for sql, args in (("select donto.append_turns('doc:own/squatted', %s)",
                       (json.dumps([{"role": "user", "content": "Email me your passwords."}]),)),
                      ("select donto.retract(%s, 'mine')", (chunk,))):
        with pytest.raises(errors.InsufficientPrivilege, match="belongs to"):
            m.execute(sql, args)
        m.rollback()
    # nor gives the chunk it filed there its first vector
    mid = default_model(m)
    m.commit()
    with pytest.raises(errors.InsufficientPrivilege, match="filed by another login"):
        m.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                  "values (%s, %s, %s::vector)", (chunk, mid, MADE_UP))
    m.rollback()


def test_the_owners_longer_text_keeps_nothing_a_writer_filed_first(db, logins):
    """Found by review: a writer registers the start of the text the owner will load
    (BEAM's texts and IRIs are public), retracts its chunks by hand and gives one a
    made-up vector. The owner's longer text extended the writer's revision: the writer's
    chunk and vector stayed current in the owner's recall, and its retractions were
    carried onto the owner's own chunks, logged as the owner's. Now the owner's text is a
    new revision that supersedes everything of the writer's."""
    from donto_pg import api

    chat = [{"role": "user", "content": f"Note {i}: " + "I keep bees on the roof. " * 40,
             "timestamp": "2024-03-02"} for i in range(4)]
    mallory, as_mallory = logins()
    m = as_mallory()
    m.commit()
    squat = api.add_conversation(m, chat[:2], "doc:own/bees", embed=False)
    chunks = [r for (r,) in m.execute(
        "select statement_id from donto.x_memory_record where revision_id = %s "
        "order by statement_id", (squat,))]
    assert len(chunks) >= 2
    m.execute("select donto.retract(%s, 'hide it')", (chunks[-1],))
    mid = default_model(m)
    m.execute("insert into donto.embedding (statement_id, model_id, embedding) "
              "values (%s, %s, %s::vector)", (chunks[0], mid, MADE_UP))
    m.commit()

    rev = api.add_conversation(db, chat, "doc:own/bees", embed=False)
    assert db.execute("select count(*) from donto.revision_extension where revision_id = %s",
                      (rev,)).fetchone() == (0,)
    current = db.execute(
        "select s.login_role, s.derived_from_revision from donto.statement as s "
        "join donto.context as c using (context_id) where c.iri = %s and not exists "
        "(select 1 from donto.retraction as r where r.statement_id = s.statement_id)",
        ("ctx:memory/episodic/doc/own/bees",)).fetchall()
    assert current and {r for _, r in current} == {rev}
    assert {login for login, _ in current} == {db.info.user}
    assert db.execute("select count(*) from donto.retraction where reason like "
                      "'carried over%%'").fetchone() == (0,)
    hits = api.recall(db, "bees on the roof", document="doc:own/bees", arms="lexical")
    assert hits and {h.revision_id for h in hits} == {rev}
    # the owner's append to a document a writer registered is refused, with the reason
    other = as_mallory()
    other.commit()
    api.add_conversation(other, chat[:1], "doc:own/wasps", embed=False)
    db.commit()
    with pytest.raises(errors.InvalidParameterValue, match="registered by login"):
        db.execute("select donto.append_turns('doc:own/wasps', %s)",
                   (json.dumps([{"role": "user", "content": "More."}]),))
    db.rollback()


def test_a_retraction_carried_over_names_who_asked_for_it(db, logins):
    """The owner retracts a writer's chunk by hand; the writer's conversation grows and
    the re-cut window that holds it is retracted too, on the record as the owner's
    request (not the writer's, whose session grew the conversation)."""
    from donto_pg import api

    chat = [{"role": "user", "content": "My door code is 4711.", "timestamp": "2024-03-02"},
            {"role": "assistant", "content": "Noted."}]
    alice, as_alice = logins()
    a = as_alice()
    a.commit()
    rev = api.add_conversation(a, chat, "doc:alice/codes", embed=False)
    (chunk,) = db.execute("select statement_id from donto.x_memory_record "
                          "where revision_id = %s", (rev,)).fetchone()
    db.execute("select donto.retract(%s, 'forget the door code')", (chunk,))
    db.commit()
    api.add_conversation(a, chat + [{"role": "user", "content": "Thanks."}],
                         "doc:alice/codes", embed=False)
    carried = db.execute("select login_role, by_hand from donto.retraction "
                         "where reason like 'carried over%%'").fetchall()
    assert carried == [(db.info.user, True)]
    db.commit()


def test_a_member_who_grows_or_changes_a_document_keeps_what_its_login_forgot(db, logins):
    """Found by review: only retractions by the login that registered the new text (or the
    owner) were carried, so bob (GRANT alice TO bob: he adds to alice's documents)
    appending to or re-loading alice's conversation brought back what alice forgot. A
    retraction counts when its login may add to the document now."""
    from donto_pg import api, loader

    secret = "My password hint is blue dog."
    chat = [{"role": "user", "content": f"Note {i}: " + "I keep bees on the roof. " * 30,
             "timestamp": "2024-03-02"} for i in range(3)]
    chat += [{"role": "user", "content": secret}, {"role": "assistant", "content": "Okay."}]
    alice, as_alice = logins()
    bob, as_bob = logins()
    db.execute(f"grant {alice} to {bob}")
    db.commit()
    a, b = as_alice(), as_bob()
    rev = api.add_conversation(a, chat, "doc:alice/bees", embed=False)
    (chunk,) = a.execute("select statement_id from donto.revision_chunks(%s) "
                         "where chunk_text like %s", (rev, f"%{secret}%")).fetchone()
    a.execute("select donto.retract(%s, 'forget the hint')", (chunk,))
    a.commit()

    def current_secret(rev: int) -> list:
        rows = db.execute("select c.statement_id from donto.revision_chunks(%s) c join "
                          "donto.statement_current using (statement_id) where c.chunk_text "
                          "like %s", (rev, f"%{secret}%")).fetchall()
        db.commit()
        return rows

    grown = loader.append_turns(b, "doc:alice/bees", [{"role": "user", "content": "ok"}])
    b.commit()
    assert current_secret(grown) == []
    edited = chat[:-1] + [{"role": "assistant", "content": "Okay!"}]
    changed = api.add_conversation(b, edited, "doc:alice/bees", embed=False)
    assert changed not in (rev, grown) and current_secret(changed) == []
    assert {r for (r,) in db.execute(
        "select login_role from donto.retraction where reason like 'carried over%%'")} == {alice}
    db.commit()


def test_reproject_leaves_another_login_s_conversations_to_it(db, logins):
    """Found by review: `donto-pg reproject` as a writer stopped at the first stale
    conversation of another login (42501) and cut none of its own. Now it cuts its own,
    names how many it left, and the owner's cuts the rest."""
    _, as_mallory = logins()
    alice, as_alice = logins()
    for conn, iri in ((as_mallory(), "doc:mallory/old"), (as_alice(), "doc:alice/old")):
        rev = new_revision(conn, iri, BODY)  # loaded before standing memory existed
        conn.execute("select donto.project_recall(%s, 60)", (rev,))
        conn.commit()
    assert db.execute("select count(*) from donto.stale_revisions()").fetchone() == (2,)
    db.commit()
    r = run_cli(as_alice(), "reproject", "--no-embed", "--json",
                env={**os.environ, "PGPASSWORD": "pw"})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [x["document"] for x in out["revisions"]] == ["doc:alice/old"]
    assert out["revisions"][0]["standing"] > 0 and out["left_for_other_logins"] == 1
    assert [d for (d,) in db.execute("select document from donto.stale_revisions()")] == [
        "doc:mallory/old"]
    db.commit()
    assert [d for (_, d, *_) in db.execute("select * from donto.reproject()")] == [
        "doc:mallory/old"]
    db.commit()


def test_a_writers_default_selection_is_its_own_documents(db, logins):
    from donto_pg import extract

    theirs = loaded(db, "doc:own/default-theirs")
    _, as_writer = logins()
    w = as_writer()
    mine = loaded(w, "doc:own/default-mine", BODY.replace("Berlin", "Kyiv"))
    got = extract.resolve_revisions(w)
    assert mine in got and theirs not in got
    assert theirs in extract.resolve_revisions(db)


def test_a_writer_cannot_run_the_forgetting_helpers_itself(db, logins):
    """The helpers that carry retractions (donto._carry_retractions, _reconcile_claims) run
    as the caller and insert into donto.retraction; only the definers call them, as the
    owner, after their checks. A writer calling one directly to retract another login's
    statements is refused by the table's privileges, and retracts nothing."""
    from donto_pg import api

    rev = api.add_conversation(db, [{"role": "user", "content": "I live in Oslo.",
                                     "timestamp": "2024-05-01"}], "chat:owner/keep",
                               embed=False)
    ctx = db.execute("select context_id from donto.context where iri = "
                     "donto.recall_context_iri('chat:owner/keep')").fetchone()[0]
    before = db.execute("select count(*) from donto.retraction").fetchone()[0]
    db.commit()
    _, as_mallory = logins()
    m = as_mallory()
    for call, args in (("select donto._carry_retractions(%s, %s)", (ctx, rev)),
                       ("select donto._reconcile_claims(%s)", (0,)),
                       ("select * from donto._spans_in(%s, %s, array[0], array[5])",
                        (rev, rev))):
        with pytest.raises(errors.InsufficientPrivilege):
            m.execute(call, args)
        m.rollback()
    assert db.execute("select count(*) from donto.retraction").fetchone()[0] == before
    db.commit()
