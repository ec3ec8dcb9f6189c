"""Forgetting reaches the prompts, the answers, the races and the hand-overs (migration 035),
with real logins: the document's login retracts the recall chunk that holds a PIN, a
donto_reader login reads, the LLM is a provider's text given to donto.ingest_extraction or
a real local HTTP server (tests/fakellm.py).

Found by a hostile review of migration 034: the forgotten words were still sent to the LLM
(render_for_extraction, the abstractive summary prompt) and came back through a claim whose
own span missed them (an unquoted hypothesis, an object beside a quote from elsewhere in the
block); a claim filed in a transaction open while the chunk was retracted stayed current;
and giving the document to another login brought the words back.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from psycopg import errors

from donto_pg import api, loader, summaries
from donto_pg.embed import embed_pending
from donto_pg.llm import Provider, ProviderPool
from tests.db.test_forget_everywhere import SECRET, _long_turn_chat, _texts
from tests.fakellm import FakeLLM

PIN_QUOTE = f"My bank PIN is {SECRET}, keep it secret."


def _alice_and_reader(logins):
    alice, as_alice = logins()
    _, as_reader = logins("donto_reader")
    a = as_alice()
    a.commit()
    return alice, as_alice, a, as_reader()


def _pin_chunk(conn, rev: int) -> int:
    (sid,) = conn.execute("select statement_id from donto.revision_chunks(%s) "
                          "where chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    conn.commit()
    return sid


def _pin_block(conn, rev: int) -> int:
    conn.execute("select donto.project_extraction(%s, '{}')", (rev,))
    body = conn.execute("select body from donto.revision where revision_id = %s",
                        (rev,)).fetchone()[0]
    at = body.index(SECRET)
    for block, turns in conn.execute("select block_id, turns from donto.extraction_block "
                                     "where revision_id = %s order by seq", (rev,)):
        if any(p["char_start"] <= at < p["char_end"] for p in turns):
            conn.commit()
            return block
    raise AssertionError("no block holds the PIN")


def _run(conn, name: str) -> int:
    run = conn.execute("select run_id from donto.start_extraction_run(%s, '{}', null, %s)",
                       (json.dumps([{"name": "fake", "model": "fake-model",
                                     "base_url": "http://x"}]), name)).fetchone()[0]
    conn.commit()
    return run


def _ingest(conn, block: int, run: int, claims: list[dict], commit: bool = True) -> dict:
    out = conn.execute("select donto.ingest_extraction(%s, %s, %s, '{\"model\": \"m\"}')",
                       (block, run, json.dumps(claims))).fetchone()[0]
    if commit:
        conn.commit()
    return out


HYPOTHESIS = {"subject": "user", "predicate": "has", "object": f"bank PIN {SECRET}",
              "quote": None, "turn": 2, "hypothesis": True}
ELSEWHERE = {"subject": "user", "predicate": "bank PIN is", "object": SECRET,
             "quote": "Understood, the bank matters are noted.", "turn": 3,
             "hypothesis": False}
QUOTING = {"subject": "user", "predicate": "bank PIN is", "object": SECRET,
           "quote": PIN_QUOTE, "turn": 2, "hypothesis": False}


# a claim's words: where the PIN can stand. The rest of its row is bookkeeping (ids, the
# filing login's random hex name, its pid, its transaction time's microseconds) whose digits
# spell 4417 by chance, about once in a few thousand rows.
CLAIM_WORDS = "concat_ws(' ', c.subject, c.predicate, c.object, c.quote, c.evidence_text)"


def _current_pin_claims(conn) -> int:
    """The current claims whose words (subject, predicate, object, quote, evidence) hold the
    PIN, counted through donto.statement_current and through donto.claims_as_of(now()):
    the two agree."""
    n = conn.execute("select count(*) from donto.claim_provenance as c "
                     "join donto.statement_current as s on s.statement_id = c.claim_id "
                     f"where {CLAIM_WORDS} like %s", (f"%{SECRET}%",)).fetchone()[0]
    m = conn.execute("select count(*) from donto.claims_as_of(now()) as c "
                     f"where {CLAIM_WORDS} like %s", (f"%{SECRET}%",)).fetchone()[0]
    conn.commit()
    assert n == m
    return n


def test_the_prompt_never_holds_forgotten_words_and_an_all_forgotten_block_is_not_sent(
        db, logins):
    _, _, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget2/prompt", embed=False)
    block = _pin_block(a, rev)
    run = _run(a, "prompt")
    before = _texts(r, "select donto.render_for_extraction(%s, %s)", (block, run))[0]
    assert SECRET in before and "mortgage rates" in before
    a.execute("select donto.retract(%s, 'forget my PIN')", (_pin_chunk(a, rev),))
    a.commit()
    after = _texts(r, "select donto.render_for_extraction(%s, %s)", (block, run))[0]
    assert SECRET not in after
    assert "savings account" in after  # the rest of the turn: clipped, not dropped
    # a block that holds forgotten words is done with: not listed (its claims would go)
    pending = _texts(a, "select block_id from donto.pending_extraction_blocks(%s)", (run,))
    assert pending and block not in pending

    # a conversation of one chunk: forgetting it leaves its block nothing to send
    chat = [{"role": "user", "content": f"My bank PIN is {SECRET}.", "timestamp": "2024-05-01"},
            {"role": "assistant", "content": "Noted."}]
    small = api.add_conversation(a, chat, "chat:forget2/small", embed=False)
    sblock = _pin_block(a, small)
    srun = _run(a, "small")
    assert _texts(a, "select block_id from donto.pending_extraction_blocks(%s, %s)",
                  (srun, [small])) == [sblock]
    a.execute("select donto.retract(%s, 'forget my PIN')", (_pin_chunk(a, small),))
    a.commit()
    assert _texts(a, "select block_id from donto.pending_extraction_blocks(%s, %s)",
                  (srun, [small])) == []
    with pytest.raises(errors.ObjectNotInPrerequisiteState, match="only forgotten words"):
        r.execute("select donto.render_for_extraction(%s, %s)", (sblock, srun))
    r.rollback()


def test_the_claims_of_a_block_that_holds_forgotten_words_go_before_or_after(db, logins):
    _, _, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget2/claims", embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    # the provider's answers before the forgetting: an unquoted hypothesis repeating the
    # PIN, and a claim whose quote anchors elsewhere in the block but whose object is it
    _ingest(a, block, _run(a, "before"), [HYPOTHESIS, ELSEWHERE])
    assert _current_pin_claims(r) == 2
    # a block taken (its prompt rendered) before the forgetting and answered after it
    late = _run(a, "late")
    assert _texts(a, "select donto.take_extraction_block(%s, %s)", (late, block)) == ["taken"]
    prompt = _texts(a, "select donto.render_for_extraction(%s, %s)", (block, late))[0]
    assert SECRET in prompt

    a.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    a.commit()
    assert _current_pin_claims(r) == 0
    reasons = _texts(db, "select distinct t.reason from donto.x_claim x join donto.retraction "
                     "t using (statement_id) where x.block_id = %s", (block,))
    assert reasons == [f"carried over from statement {chunk}: forget my PIN"]

    _ingest(a, block, late, [HYPOTHESIS, ELSEWHERE])
    assert _current_pin_claims(r) == 0
    # extracted afterwards, from a clipped prompt: the block is done with all the same,
    # every claim goes (no clock tells which prompt a worker rendered)
    after = _run(a, "after")
    assert SECRET not in _texts(a, "select donto.render_for_extraction(%s, %s)",
                                (block, after))[0]
    _ingest(a, block, after, [QUOTING, ELSEWHERE | {"object": "noted"}])
    current = _texts(r, "select s.object_lit ->> 'v' from donto.x_claim x join "
                     "donto.statement_current s using (statement_id) where x.run_id = %s",
                     (after,))
    assert current == []
    # the other blocks of the conversation keep their claims
    other = _texts(a, "select block_id from donto.extraction_block where revision_id = %s "
                   "and block_id <> %s order by seq", (rev, block))[0]
    _ingest(a, other, after, [ELSEWHERE | {"object": "noted", "quote": None,
                                           "hypothesis": True}])
    assert _texts(r, "select s.object_lit ->> 'v' from donto.x_claim x join "
                  "donto.statement_current s using (statement_id) where x.block_id = %s",
                  (other,)) == ["noted"]


def _waiting(conn, pid: int, commit: bool = True) -> bool:
    for _ in range(100):
        row = conn.execute("select wait_event_type from pg_stat_activity where pid = %s",
                           (pid,)).fetchone()
        if commit:
            conn.commit()
        else:  # the activity snapshot is the transaction's: read it afresh
            conn.execute("select pg_stat_clear_snapshot()")
        if row and row[0] == "Lock":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("filing_first", [True, False], ids=["filing-first", "forgetting-first"])
def test_a_claim_filed_while_the_chunk_is_forgotten_does_not_survive(db, logins, filing_first):
    """Two real sessions of the document's login, READ COMMITTED: the filing in progress
    when the forgetting starts (the forgetting waits for it, then sees its claim), or the
    forgetting in progress when the filing starts (the filing waits for it, and its
    trigger then sees the retraction)."""
    _, as_alice, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget2/race", embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    run = _run(a, "race")
    filer, forgetter = as_alice(), as_alice()
    failed: list[BaseException] = []

    def go(conn, sql, args):
        try:
            conn.execute(sql, args)
            conn.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    if filing_first:
        # the filer holds the block's lease (its writer lock row too) and its claims,
        # uncommitted
        filer.execute("select donto.take_extraction_block(%s, %s)", (run, block))
        _ingest(filer, block, run, [QUOTING, HYPOTHESIS], commit=False)
        t = threading.Thread(target=go, args=(forgetter, "select donto.retract(%s, "
                                              "'forget my PIN')", (chunk,)))
        t.start()
        waited = _waiting(db, forgetter.info.backend_pid)
        filer.commit()
    else:
        forgetter.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
        t = threading.Thread(target=go, args=(
            filer, "select donto.ingest_extraction(%s, %s, %s, '{}')",
            (block, run, json.dumps([QUOTING]))))
        t.start()
        waited = _waiting(db, filer.info.backend_pid)
        forgetter.commit()
    t.join(30)
    assert not t.is_alive() and not failed, failed
    assert _current_pin_claims(r) == 0
    assert waited, "the second session did not wait for the first"
    # (a row lock fires no I3 trigger: the retraction above went through, no DI003)


def test_giving_the_document_away_keeps_what_its_writer_forgot(db, logins):
    _, _, a, r = _alice_and_reader(logins)
    bob, as_bob = logins()
    iri = "chat:forget2/given"
    chat = _long_turn_chat()
    rev = api.add_conversation(a, chat, iri, embed=False)
    embed_pending(db, progress=False)
    db.commit()
    chunk = _pin_chunk(a, rev)
    a.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    a.commit()
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    db.commit()
    q = "Can you list in order what I mentioned about my bank?"
    recall = "select chunk_text from donto.recall(%s, k => 6, context => %s, arms => 'lexical')"
    payload = "select donto.recall_payload(%s, 2000, k => 6, context => %s)"

    def leaks() -> bool:
        rows = _texts(r, recall, (q, ctx)) + [str(x) for x in _texts(r, payload, (q, ctx))]
        return any(SECRET in t for t in rows)

    assert not leaks()
    db.execute("select donto.give_document(%s, %s)", (iri, bob))
    db.commit()
    assert not leaks()  # the revision that existed when alice asked stays forgotten
    # bob's later texts: the grown one and a changed one keep the words forgotten
    b = as_bob()
    grown = loader.append_turns(b, iri, [{"role": "user", "content": "Also, I like tea."},
                                         {"role": "assistant", "content": "Tea it is."}])
    b.commit()
    changed = api.add_conversation(b, chat[:-1] + [{"role": "assistant", "content": "Good."}],
                                   iri, embed=False)
    b.commit()
    assert changed not in (rev, grown)
    for v in (grown, changed):
        assert _texts(db, "select donto._forgotten_text(%s, null)::text", (v,)) != ["{}"]
        assert _texts(db, "select count(*) from donto.revision_chunks(%s) c join "
                      "donto.statement_current using (statement_id) where c.chunk_text "
                      "like %s", (v, f"%{SECRET}%")) == [0]
    assert not leaks()


def test_the_summary_prompt_never_holds_forgotten_words(db, logins):
    _, _, a, _ = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget2/summary", embed=False)
    a.execute("select donto.retract(%s, 'forget my PIN')", (_pin_chunk(a, rev),))
    a.commit()
    with FakeLLM('{"summary": "The user talks about the bank."}') as fake:
        pool = ProviderPool([Provider(name="fake0", base_url=fake.base_url, model="fake-model",
                                      timeout=20)], max_retries=0)
        rep = summaries.summarize_sessions(a, revision_ids=[rev], providers=pool, embed=False)
        prompts = [req.prompt for req in fake.requests]
    assert prompts and rep["made"]
    assert not any(SECRET in p for p in prompts)
    assert any("mortgage rates" in p for p in prompts)


def test_migration_035_carries_the_forgettings_made_before_it(db, logins):
    """The backfill of migration 035, run on a forgetting made before it: a chunk retracted
    by hand the way 034 did it (its claims' block not retracted), then the document given
    away; the migration's statement takes the claims of the block extracted before."""
    import re

    from donto_pg import resources

    _, _, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget2/migrated", embed=False)
    block = _pin_block(a, rev)
    _ingest(a, block, _run(a, "migrated"), [HYPOTHESIS, ELSEWHERE])
    chunk = _pin_chunk(a, rev)
    # as 034's retract left it: the chunk retracted by hand, in alice's name, nothing else
    db.execute("insert into donto.retraction (statement_id, reason, by_hand, login_role) "
               "values (%s, 'forget my PIN', true, %s)",
               (chunk, a.info.user))
    db.commit()
    bob, _ = logins()
    db.execute("select donto.give_document('chat:forget2/migrated', %s)", (bob,))
    db.commit()
    assert _current_pin_claims(r) == 2
    text = (resources.data_dir("migrations") / "035-forget-prompts.sql").read_text()
    body = re.search(r"execute \$q\$(.*?)\$q\$;", text, re.S).group(1)
    db.execute(body)
    db.commit()
    assert _current_pin_claims(r) == 0
    db.execute(body)  # idempotent
    db.commit()


@pytest.mark.parametrize("whole", [True, False], ids=["all-forgotten", "partly-forgotten"])
def test_a_block_forgotten_after_it_was_listed_is_skipped_not_an_interrupted_run(
        db, logins, whole):
    """A session lists its blocks once; the user forgets words of one before a worker takes
    it. The worker sends nothing (donto.take_extraction_block says 'forgotten'), counts it,
    and the run goes on: before, a block all forgotten ended the session as interrupted
    (the render's refusal, 55000), and one partly forgotten was sent clipped, its answer's
    claims then retracted as filed (an LLM call for nothing)."""
    from donto_pg import extract

    _, as_alice, a, _ = _alice_and_reader(logins)
    chat = [{"role": "user", "content": f"My bank PIN is {SECRET}.", "timestamp": "2024-05-01"},
            {"role": "assistant", "content": "Noted."}]
    rev = api.add_conversation(a, chat if whole else _long_turn_chat(),
                               f"chat:forget2/listed-{whole}", embed=False)
    block = _pin_block(a, rev)
    a.execute("select donto.retract(%s, 'forget my PIN')", (_pin_chunk(a, rev),))
    a.commit()
    listed: list[int] = []

    def pending(run: int, limit: int | None) -> list[int]:
        now = [b for (b,) in a.execute(
            "select block_id from donto.pending_extraction_blocks(%s, %s)", (run, [rev]))]
        if not listed:  # the session's list, made before the forgetting
            listed.extend([block, *now])
            return listed
        return now

    with FakeLLM(default="[]") as fake:
        pool = ProviderPool([Provider(name="fake", base_url=fake.base_url, model="fake-model",
                                      timeout=20)], backoff_base=0.01, backoff_max=0.05)
        report = extract.extract_blocks(a, as_alice, pool, revisions=[rev], pending=pending,
                                        run_name="listed", alarm_after=0)
        others = len(listed) - 1  # the blocks that hold nothing forgotten are extracted
        assert len(fake.requests) == others and (others == 0) == whole
        assert not [r for r in fake.requests if SECRET in json.dumps(r.body)]
    assert report.stopped is None and report.ok, report.reason
    assert (report.progress.forgotten, report.progress.done,
            report.pending_after) == (1, others, 0)
    assert "forgotten before it was sent 1" in extract.format_report(report)


# -- found by a hostile review of the timestamp rule (forget-3) ---------------------------


def test_a_prompt_rendered_while_the_forgetting_waited_loses_its_claims(db, logins):
    """The forgetting waits on its lock (a filing in progress); meanwhile a worker takes
    the lease and renders the unclipped prompt, after the forgetting's transaction began.
    Its answer, ingested after the forgetting, goes whole: no clock decides."""
    _, as_alice, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/race", embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    run, other = _run(a, "race"), _run(a, "race-other")
    filer, forgetter, worker = as_alice(), as_alice(), as_alice()
    blocks = _texts(a, "select block_id from donto.extraction_block where revision_id = %s "
                    "and block_id <> %s order by seq", (rev, block))
    # a filing in progress: another run's claim for another block of the document (its
    # FOR SHARE on the document's row, donto._forget_new_statements)
    turn = _texts(a, "select (turns -> 0 ->> 'turn_id')::integer from donto.extraction_block "
                  "where block_id = %s", (blocks[0],))[0]
    _ingest(filer, blocks[0], other, [{"subject": "user", "predicate": "likes",
                                       "object": "tea", "quote": None, "turn": turn,
                                       "hypothesis": True}], commit=False)
    assert filer.execute("select count(*) from donto.x_claim where run_id = %s",
                         (other,)).fetchone()[0] == 1
    failed: list[BaseException] = []

    def go():
        try:
            forgetter.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
            forgetter.commit()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failed.append(exc)

    t = threading.Thread(target=go)
    t.start()
    assert _waiting(db, forgetter.info.backend_pid), failed
    time.sleep(0.1)
    assert _texts(worker, "select donto.take_extraction_block(%s, %s)", (run, block)) == [
        "taken"]
    prompt = worker.execute("select donto.render_for_extraction(%s, %s)",
                            (block, run)).fetchone()[0]
    worker.commit()
    assert SECRET in prompt
    filer.commit()
    t.join(30)
    assert not t.is_alive() and not failed, failed
    _ingest(worker, block, run, [HYPOTHESIS])
    assert _current_pin_claims(r) == 0


def test_the_pin_count_reads_a_claims_words_not_its_bookkeeping(db, logins, monkeypatch):
    """_current_pin_claims looks for the PIN in a claim's words only. It once searched
    claims_as_of's whole row text and, 1 run in a few thousand, found 4417 in the filing
    login's random name (or its pid, or its time's microseconds): the "tea" claim above,
    current and rightly so (its block holds nothing forgotten), counted as a PIN claim
    (assert 0 == 1). A PIN in a claim's quote and evidence, not its object, counts."""
    real = uuid.uuid4
    monkeypatch.setattr(uuid, "uuid4", lambda: uuid.UUID(hex="4417" + real().hex[4:]))
    alice, _, a, r = _alice_and_reader(logins)  # login_4417...: on every claim filed
    monkeypatch.undo()
    assert SECRET in alice
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/words", embed=False)
    block = _pin_block(a, rev)
    other = _texts(a, "select block_id from donto.extraction_block where revision_id = %s "
                   "and block_id <> %s order by seq limit 1", (rev, block))[0]
    turn = _texts(a, "select (turns -> 0 ->> 'turn_id')::integer from donto.extraction_block "
                  "where block_id = %s", (other,))[0]
    _ingest(a, other, _run(a, "tea"), [{"subject": "user", "predicate": "likes",
                                        "object": "tea", "quote": None, "turn": turn,
                                        "hypothesis": True}])
    assert _current_pin_claims(r) == 0
    quoted = {"subject": "user", "predicate": "keeps", "object": "a bank PIN",
              "quote": PIN_QUOTE, "turn": 2, "hypothesis": False}
    _ingest(a, block, _run(a, "quoted"), [quoted])
    assert _current_pin_claims(r) == 1
    a.execute("select donto.retract(%s, 'forget my PIN')", (_pin_chunk(a, rev),))
    a.commit()
    assert _current_pin_claims(r) == 0
    assert _texts(r, "select object from donto.claims_as_of(now())", ()) == ["tea"]


def test_a_prompt_rendered_after_the_forgetting_began_loses_its_claims(db, logins):
    """The forgetting's transaction began (its now() fixed) before the lease was taken."""
    _, as_alice, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/began", embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    run = _run(a, "began")
    forgetter, worker = as_alice(), as_alice()
    forgetter.execute("select 1")  # its transaction open: now() fixed
    time.sleep(0.2)
    assert _texts(worker, "select donto.take_extraction_block(%s, %s)", (run, block)) == [
        "taken"]
    prompt = worker.execute("select donto.render_for_extraction(%s, %s)",
                            (block, run)).fetchone()[0]
    worker.commit()
    assert SECRET in prompt
    forgetter.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    forgetter.commit()
    _ingest(worker, block, run, [HYPOTHESIS])
    assert _current_pin_claims(r) == 0


def test_an_answer_without_a_lease_rendered_before_and_ingested_after_goes(db, logins):
    _, _, a, r = _alice_and_reader(logins)
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/nolease", embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    run = _run(a, "nolease")
    assert SECRET in _texts(a, "select donto.render_for_extraction(%s, %s)", (block, run))[0]
    a.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    a.commit()
    _ingest(a, block, run, [HYPOTHESIS])
    assert _current_pin_claims(r) == 0


def test_another_writers_open_measurement_does_not_hold_up_a_forgetting(db, logins):
    """Bob projects an A/B arm over alice's revision (measure statements: the foreign key's
    FOR KEY SHARE on her document's row) and leaves his transaction open; alice's
    retraction of a recall chunk does not wait for him."""
    _, _, a, _ = _alice_and_reader(logins)
    _, as_bob = logins()
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/measure", embed=False)
    chunk = _pin_chunk(a, rev)
    b = as_bob()
    b.execute("select donto.ab_register_arm('tiny', 'fixed', '{\"window\": 600}')")
    b.commit()
    b.execute("select donto.ab_project_arm('tiny', %s)", (rev,))  # left open
    try:
        a.execute("set lock_timeout = '3s'")
        a.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
        a.commit()
    finally:
        b.rollback()
    assert _texts(a, "select donto._forgotten_text(%s, null)::text", (rev,)) != ["{}"]


def test_a_members_forgetting_survives_the_membership(db, logins):
    """A login that is a member of the document's login (GRANT alice TO app) forgets; the
    membership is revoked later: the words stay forgotten (recorded as it retracted)."""
    alice, _, a, r = _alice_and_reader(logins)
    app, as_app = logins()
    db.execute(f"grant {alice} to {app}")
    db.commit()
    rev = api.add_conversation(a, _long_turn_chat(), "chat:forget3/member", embed=False)
    chunk = _pin_chunk(a, rev)
    p = as_app()
    p.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    p.commit()
    before = _texts(db, "select donto._forgotten_text(%s, null)::text", (rev,))
    assert before != ["{}"]
    db.execute(f"revoke {alice} from {app}")
    db.commit()
    assert _texts(db, "select donto._forgotten_text(%s, null)::text", (rev,)) == before
    assert _texts(db, "select writer_then from donto.retraction where statement_id = %s",
                  (chunk,)) == [True]


def test_a_forgetting_checks_its_writer_once_it_holds_the_lock(db, logins):
    """The forgetting waits on its lock (a filing in progress) while the owner gives the
    document to another login (its transaction began first): once it holds the lock it
    checks the writer again and is refused, not a success that hides nothing."""
    _, as_alice, a, r = _alice_and_reader(logins)
    bob, _ = logins()
    iri = "chat:forget3/given"
    rev = api.add_conversation(a, _long_turn_chat(), iri, embed=False)
    block = _pin_block(a, rev)
    chunk = _pin_chunk(a, rev)
    run = _run(a, "given")
    filer, forgetter = as_alice(), as_alice()
    turn = _texts(a, "select (turns -> 0 ->> 'turn_id')::integer from donto.extraction_block "
                  "where block_id = %s", (block,))[0]
    db.execute("select 1")  # the owner's transaction begins first
    time.sleep(0.1)
    _ingest(filer, block, run, [{"subject": "user", "predicate": "likes", "object": "tea",
                                 "quote": None, "turn": turn, "hypothesis": True}],
            commit=False)
    failed: list[BaseException] = []

    def go():
        try:
            forgetter.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
            forgetter.commit()
        except BaseException as exc:  # noqa: BLE001 - checked below
            forgetter.rollback()
            failed.append(exc)

    t = threading.Thread(target=go)
    t.start()
    try:
        assert _waiting(db, forgetter.info.backend_pid, commit=False)
        db.execute("select donto.give_document(%s, %s)", (iri, bob))
        db.commit()
    finally:
        filer.commit()
        t.join(30)
    assert not t.is_alive()
    assert len(failed) == 1 and isinstance(failed[0], errors.InsufficientPrivilege), failed
    assert _texts(db, "select count(*) from donto.retraction where statement_id = %s",
                  (chunk,)) == [0]
