"""Extraction spends no LLM call it does not need: a block a later revision superseded is
not sent, and two sessions of one run divide the blocks between them.

The provider is a real local HTTP server (tests/fakellm.py); what it received is counted.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter

import psycopg
import pytest

from donto_pg import api, beam, extract, loader
from donto_pg.llm import Provider, ProviderPool
from tests.conftest import EXAMPLES
from tests.fakellm import FakeLLM, Reply

CONV13 = EXAMPLES / "chats" / "100K" / "13"
IRI = "beam:100K/13"
OLD, NEW = 64, 74  # the 10 appended messages cross from session 1 into session 2


def conversation(n: int) -> beam.Conversation:
    conv = next(beam.iter_beam(CONV13))
    return dataclasses.replace(conv, messages=conv.messages[:n], questions=[])


def messages(conv: beam.Conversation, start: int) -> list[dict[str, object]]:
    return [{"role": m.role, "content": m.content, "turn_id": m.turn_id, "session": m.session,
             "exchange": m.exchange, "date": m.date.isoformat() if m.date else None}
            for m in conv.messages[start:]]


def factory(db: psycopg.Connection):
    info = db.info

    def make() -> psycopg.Connection:
        return psycopg.connect(host=info.host, port=info.port, user=info.user,
                               dbname=info.dbname)

    return make


def pool_for(fake: FakeLLM) -> ProviderPool:
    return ProviderPool([Provider(name="fake", base_url=fake.base_url, model="fake-model",
                                  timeout=20)], backoff_base=0.01, backoff_max=0.05)


def spans(db: psycopg.Connection, rev: int) -> list[tuple]:
    return db.execute(
        "select b.kind, b.char_start, b.char_end, b.prefix_start, b.prefix_end "
        "from donto.extraction_block as b join donto.projection as p using (projection_id) "
        "where p.revision_id = %s and p.kind = 'extraction' order by b.seq", (rev,)).fetchall()


def source_of(prompt: str) -> str:
    """The SOURCE part of a rendered prompt (what identifies the block's text)."""
    return prompt[prompt.index("BEGIN SOURCE"):prompt.index("END SOURCE")]


def pending(db: psycopg.Connection, run: int, revs: list[int] | None) -> list[tuple]:
    rows = db.execute("select revision_id, block_id from donto.pending_extraction_blocks(%s, %s)",
                      (run, revs)).fetchall()
    db.commit()
    return rows


@pytest.fixture
def grown(db) -> tuple[int, int]:
    """CONV13 loaded short and projected (B), then grown by 10 messages (rev1, rev2)."""
    res = loader.load_conversation(db, conversation(OLD))
    assert res.ok, res.error
    rev1 = res.revision_id
    db.execute("select donto.project_extraction(%s)", (rev1,))
    db.commit()
    rev2 = loader.append_turns(db, IRI, messages(conversation(NEW), OLD))
    db.commit()
    return rev1, rev2


# --- superseded blocks ------------------------------------------------------------------


def test_a_grown_conversation_sends_no_superseded_block_to_the_provider(db, grown):
    """Found by review: with the conversation's revisions selected together (`extract -r`
    of both, or pending_extraction_blocks(run) over every revision), the blocks of the
    earlier revision went to the provider too: those the longer revision cut again (its
    last session, never extracted) and, under new ids, those it copied (the pending list
    is taken once, so the copy's twin was still on it)."""
    rev1, rev2 = grown
    old, new = spans(db, rev1), spans(db, rev2)
    recut = [s for s in old if s not in new]
    assert recut and len(new) > len(old) - len(recut)
    with FakeLLM(default="[]") as fake:
        report = extract.run_extraction(factory(db), revision_ids=[rev1, rev2],
                                        providers=pool_for(fake), alarm_after=0,
                                        concurrency=2)
        assert report.ok, report.reason
        assert len(fake.requests) == report.progress.done == len(new)
        sent = Counter(source_of(r.prompt) for r in fake.requests)
        assert max(sent.values()) == 1  # no block's text twice
    assert db.execute(
        "select count(*) from donto.extraction_response as x join donto.extraction_block "
        "as b using (block_id) where b.revision_id = %s", (rev1,)).fetchone() == (0,)
    db.commit()


def test_every_revision_pending_lists_the_latest_cut_only_unless_asked_alone(db, grown):
    """pending_extraction_blocks(run) with no revision (every revision) listed the earlier
    revision's blocks beside the longer one's; asked for alone, an earlier revision still
    lists all its blocks (extracting it on purpose stays possible)."""
    rev1, rev2 = grown
    run = db.execute("select run_id from donto.start_extraction_run(%s)", (json.dumps(
        [{"name": "fake", "model": "fake-model"}]),)).fetchone()[0]
    db.commit()
    every = pending(db, run, None)
    assert {r for r, _ in every} == {rev2} and len(every) == len(spans(db, rev2))
    assert pending(db, run, [rev1, rev2]) == every
    assert len(pending(db, run, [rev1])) == len(spans(db, rev1))  # asked for alone
    assert pending(db, run, [rev2]) == every


def test_a_changed_conversation_sends_no_block_of_the_old_text_that_is_gone(db):
    """A conversation that changed (an edit in its last message: a new revision outside the
    lineage). Before the new text is cut into blocks, every revision's pending list held the
    old text's block whose text the edit changed: superseded (its text is no longer in the
    latest revision), it is left out, and the old blocks whose text stands unchanged stay.
    Once the new text is cut, its blocks are listed and none of the old text's; asked for
    alone, the old text lists all its blocks."""
    iri = "chat:t/changed"

    def chat(last: str) -> list[dict]:
        out = []
        for i in range(6):
            out += [{"role": "user", "content": f"Day {i}: I planted {i + 2} tomato plants "
                     "and watered the basil. " * 12, "timestamp": f"2024-05-0{i + 1}"},
                    {"role": "assistant", "content": "Good to hear about the garden. " * 20}]
        out[-1]["content"] = last
        return out

    rev1 = api.add_conversation(db, chat("Okay."), iri, embed=False)
    rev2 = api.add_conversation(db, chat("Okay, noted!"), iri, embed=False, extraction=False)
    db.commit()
    assert rev2 != rev1
    run = db.execute("select run_id from donto.start_extraction_run(%s)", (json.dumps(
        [{"name": "fake", "model": "fake-model"}]),)).fetchone()[0]
    db.commit()
    old = spans(db, rev1)
    assert len(old) > 2
    left = pending(db, run, None)
    assert {r for r, _ in left} == {rev1} and len(left) == len(old) - 1, left
    db.execute("select donto.project_extraction(%s)", (rev2,))
    db.commit()
    every = pending(db, run, None)
    assert {r for r, _ in every} == {rev2} and len(every) == len(spans(db, rev2)), every
    with FakeLLM(default="[]") as fake:
        report = extract.run_extraction(factory(db), revision_ids=[rev1, rev2],
                                        providers=pool_for(fake), alarm_after=0,
                                        concurrency=1)
        assert report.ok
        assert len(fake.requests) == len(spans(db, rev2))
    assert len(pending(db, run, [rev1])) == len(old)  # asked for alone


# --- two sessions of one run ----------------------------------------------------------


def events(db: psycopg.Connection, run: int) -> list[tuple]:
    rows = db.execute("select event, detail from donto.extraction_run_event where run_id = %s "
                      "order by event_id", (run,)).fetchall()
    db.commit()
    return rows


def test_two_sessions_of_one_run_ask_the_provider_once_per_block(db):
    """Found by review: two `extract` sessions of one run each took the pending list and
    asked the provider for every block (the answers were stored once, the calls paid
    twice). Two real sessions (threads, each with its own connections) against a slow
    provider: every block is asked for once, the sessions divide them, both end ok."""
    res = loader.load_conversation(db, conversation(OLD))
    assert res.ok, res.error
    db.execute("select donto.project_extraction(%s)", (res.revision_id,))
    db.commit()
    n = len(spans(db, res.revision_id))
    assert n > 20
    reports: list[extract.ExtractionReport] = []
    errors: list[BaseException] = []
    with FakeLLM(lambda prompt: Reply(content="[]", delay_s=0.15)) as fake:
        def session() -> None:
            try:
                reports.append(extract.run_extraction(
                    factory(db), conversations=[IRI], providers=pool_for(fake),
                    alarm_after=0, concurrency=2))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=session) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not errors, errors
        sent = Counter(source_of(r.prompt) for r in fake.requests)
        assert len(fake.requests) == n and max(sent.values()) == 1, sent.most_common(2)
    assert len(reports) == 2 and {r.run_id for r in reports} == {reports[0].run_id}
    assert all(r.ok and r.stopped is None for r in reports), [r.reason for r in reports]
    assert sorted(r.progress.done for r in reports)[0] > 0  # they overlapped
    assert sum(r.progress.done for r in reports) == n
    assert sum(r.progress.taken_elsewhere for r in reports) > 0
    run = reports[0].run_id
    assert db.execute("select count(*) from donto.extraction_response where run_id = %s",
                      (run,)).fetchone() == (n,)
    assert events(db, run)[-1][0] == "finished"
    assert pending(db, run, None) == []


def test_a_block_held_by_a_live_session_is_skipped_and_one_left_by_a_dead_one_is_not(db,
                                                                                     connect):
    """A session that holds a block (another extractor, still asking its provider) has it
    skipped: the run is not incomplete, the session records handed_over naming the holder.
    A session that took a block and died (its connection gone) holds nothing: the next
    session extracts it."""
    res = loader.load_conversation(db, conversation(OLD))
    assert res.ok, res.error
    rev = res.revision_id
    db.execute("select donto.project_extraction(%s)", (rev,))
    db.commit()
    n = len(spans(db, rev))
    run = db.execute("select run_id from donto.start_extraction_run(%s)", (json.dumps(
        [{"name": "fake0", "model": "fake-model"}]),)).fetchone()[0]
    db.commit()
    first, second = (b for _, b in pending(db, run, [rev])[:2])
    other, dead = connect(), connect()
    for conn, block in ((other, first), (dead, second)):
        assert conn.execute("select donto.take_extraction_block(%s, %s)",
                            (run, block)).fetchone() == ("taken",)
        conn.commit()
    assert other.execute("select donto.take_extraction_block(%s, %s)",
                         (run, second)).fetchone() == ("elsewhere",)
    other.commit()
    holder = other.info.backend_pid
    dead.close()  # its backend exits: it holds nothing now
    with FakeLLM(default="[]") as fake:
        report = extract.run_extraction(factory(db), revision_ids=[rev],
                                        providers=pool_for(fake), alarm_after=0,
                                        concurrency=2)
        assert len(fake.requests) == n - 1  # not the held block; the dead one's, yes
    assert report.ok and report.stopped is None, report.reason
    assert (report.pending_after, report.handed_over, report.held_by) == (1, 1, [holder])
    assert report.progress.taken_elsewhere == 1
    assert "being extracted by another session" in extract.format_report(report)
    event, detail = events(db, run)[-1]
    assert event == "handed_over" and detail["held_by"] == [holder]
    assert report.as_dict()["progress"]["taken_elsewhere"] == 1
    # a backend of this session's own workers (a lease whose release failed) is not
    # another session's
    assert extract._holders(db, run, [first], set()) == {first: holder}
    assert extract._holders(db, run, [first], {holder}) == {}
    # the holder gives it back (its provider failed): another session takes it at once
    assert other.execute("select donto.release_extraction_block(%s, %s)",
                         (run, first)).fetchone() == (True,)
    other.commit()
    with FakeLLM(default="[]") as fake:
        again = extract.run_extraction(factory(db), revision_ids=[rev],
                                       providers=pool_for(fake), alarm_after=0)
        assert len(fake.requests) == 1
    assert again.ok and again.pending_after == 0 and events(db, run)[-1][0] == "finished"
    assert other.execute("select donto.take_extraction_block(%s, %s)",
                         (run, first)).fetchone() == ("done",)
    other.commit()


def test_only_a_session_of_the_run_s_login_takes_its_blocks(db, logins):
    """The lease is a row filed by a security definer for a session that may add to the
    run: another writer login, a reader, cannot take (or hold) a run's blocks, nor write a
    lease row directly; the run's own writer login can."""
    role, connect_writer = logins()
    writer = connect_writer()
    rev = api.add_conversation(writer, [
        {"role": "user", "content": "I live in Oslo. My dog is named Rex.",
         "timestamp": "2024-05-01"}, {"role": "assistant", "content": "Nice."}],
        "chat:t/lease", embed=False)
    run = writer.execute("select run_id from donto.start_extraction_run(%s)", (json.dumps(
        [{"name": "fake", "model": "fake-model"}]),)).fetchone()[0]
    writer.commit()
    block, = writer.execute("select block_id from donto.pending_extraction_blocks(%s, %s)",
                            (run, [rev])).fetchone()
    writer.commit()
    _, connect_other = logins()
    intruder = connect_other()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        intruder.execute("select donto.take_extraction_block(%s, %s)", (run, block))
    intruder.rollback()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        intruder.execute("insert into donto.extraction_lease (run_id, block_id, lease_key, "
                         "taken, backend_pid) values (%s, %s, donto._extraction_lease_key("
                         "%s, %s), true, pg_backend_pid())", (run, block, run, block))
    intruder.rollback()
    _, connect_reader = logins("donto_reader")
    reader = connect_reader()
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select donto.take_extraction_block(%s, %s)", (run, block))
    reader.rollback()
    assert writer.execute("select donto.take_extraction_block(%s, %s)",
                          (run, block)).fetchone() == ("taken",)
    writer.commit()
    assert writer.execute("select donto.extraction_block_holder(%s, %s)",
                          (run, block)).fetchone() == (writer.info.backend_pid,)
    writer.commit()
    assert db.execute("select login_role from donto.extraction_lease").fetchall() == [(role,)]
    db.commit()
