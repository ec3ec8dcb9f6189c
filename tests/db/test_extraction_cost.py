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
