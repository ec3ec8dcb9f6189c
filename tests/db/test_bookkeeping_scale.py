"""The bookkeeping around extraction and forgetting does work in proportion to what it is
asked about, not to the size of the document or of the database (benchmarks/forget_scale.py
measured each on a BEAM-10M-sized conversation; BENCHMARKS.md "Forgetting and extraction
bookkeeping at BEAM-10M size").

Work is counted by the server's own statistics (pg_stat_xact_*: function calls, rows read
from a table in this transaction), not by timing, so the tests do not depend on the load of
the machine.
"""

from __future__ import annotations

import json
import time

import psycopg
import pytest

from donto_pg import api


def _chat(n: int, tag: str = "") -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"{tag}Message {i} about the garden, the lake and the old mill. " * 3,
             "timestamp": "2024-03-02"} for i in range(n)]


def _chunks(db: psycopg.Connection, rev: int) -> list[int]:
    rows = [r[0] for r in db.execute(
        "select statement_id from donto.revision_chunks(%s) order by char_start", (rev,))]
    db.commit()
    return rows


def _calls(db: psycopg.Connection, name: str) -> int:
    return db.execute(
        "select coalesce(sum(calls), 0) from pg_stat_xact_user_functions "
        "where schemaname = 'donto' and funcname = %s", (name,)).fetchone()[0]


def _rows_read(db: psycopg.Connection, table: str) -> int:
    return db.execute(
        "select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
        "from pg_stat_xact_user_tables where schemaname = 'donto' and relname = %s",
        (table,)).fetchone()[0]


def test_forgotten_words_check_the_login_once_not_per_retraction_of_every_document(db):
    """Found measuring (BEAM-10M size): donto._forgotten_spans asked
    donto._login_writes_document for every retraction by hand of the database, every
    document's, before it kept those of its document: 0.3 ms each, at every block taken
    for extraction, every prompt rendered, every filing of statements. It asks it once per
    login of the document's retractions now (same answers)."""
    revs = {}
    for name in ("a", "b"):
        revs[name] = api.add_conversation(db, _chat(100, name), f"chat:scale/{name}",
                                          embed=False)
        db.commit()
        chunks = _chunks(db, revs[name])
        assert len(chunks) >= 12
        for sid in chunks[::2][:6]:
            db.execute("select donto.retract(%s, 'forget this')", (sid,))
        db.commit()
    db.execute("set track_functions = 'all'")
    got = db.execute("select donto._forgotten_text(%s, null)", (revs["a"],)).fetchone()[0]
    calls = _calls(db, "_login_writes_document")
    db.commit()
    assert len(got) >= 1  # six forgotten chunks of document a (merged where adjacent)
    assert calls == 1, calls  # before: once per retraction (6 here)
    spans = db.execute("select count(*) from donto._forgotten_spans(null, %s)",
                       (revs["a"],)).fetchone()[0]
    db.commit()
    assert spans == 6


def test_the_trigger_reads_the_statements_it_filed_not_the_whole_revision(db):
    """Found measuring: donto._forget_in with the ids of the statements just filed (the
    trigger donto._forget_new_statements, donto.ingest_extraction) read every statement
    of the revision to keep those ids (18,000 rows, 40 ms, at each filing on a
    BEAM-10M-sized conversation). It reads them by id now; what it retracts is the same."""
    rev = api.add_conversation(db, _chat(6000), "chat:scale/big", embed=False)
    db.commit()
    chunks = _chunks(db, rev)
    db.execute("select donto.retract(%s, 'forget this')", (chunks[3],))
    db.commit()
    total = db.execute("select count(*) from donto.statement where derived_from_revision = %s",
                       (rev,)).fetchone()[0]
    over = db.execute(
        "select s.statement_id from donto.statement as s join donto.statement as f "
        "on f.statement_id = %s where s.derived_from_revision = %s "
        "and s.char_start < f.char_end and f.char_start < s.char_end "
        "and s.statement_id <> f.statement_id", (chunks[3], rev)).fetchall()
    far = chunks[-2]
    db.commit()
    assert total > 900
    # statistics, as autovacuum has them by then (a fresh clone has none: the planner then
    # takes every table for a handful of rows, or a default size for an empty one)
    db.execute("analyze donto.statement, donto.retraction, donto.retraction_request")
    db.commit()
    db.execute("set track_functions = 'all'")  # a fresh transaction's counts
    before = _rows_read(db, "statement")
    n = db.execute("select donto._forget_in(%s, %s)", (rev, [far])).fetchone()[0]
    read = _rows_read(db, "statement") - before
    db.rollback()
    assert n == 0  # nothing of the far chunk is forgotten
    assert read < 50, (read, total)  # before: every statement of the revision
    # the same answer as before for statements over the words (carried already: none left)
    assert db.execute("select donto._forget_in(%s, %s)",
                      (rev, [s for (s,) in over])).fetchone()[0] == 0
    db.rollback()
    assert all(db.execute("select exists (select 1 from donto.retraction "
                          "where statement_id = %s)", (s,)).fetchone()[0] for (s,) in over)
    db.commit()


def test_an_append_checks_the_old_turns_in_one_pass(db):
    """Found measuring: the one test of an append (donto._extension_fault) compared the
    old turns with the new table in a nested loop (order by seq limit 1): quadratic, 21 s
    for the 11,746 turns of a BEAM-10M-sized conversation, at every append and every load
    of a longer version. 20,000 short turns now take well under the 5 s allowed (before:
    400 million comparisons)."""
    n = 20_000
    lines, turns, at = [], [], 0
    for i in range(n):
        head = f"[{i}] user: "
        text = f"m{i}"
        turns.append({"seq": i, "turn_id": i, "role": "user", "session": 1,
                      "exchange": i, "header_start": at, "char_start": at + len(head),
                      "char_end": at + len(head) + len(text)})
        lines.append(head + text)
        at += len(head) + len(text) + 1
    body = "\n".join(lines) + "\n"
    rev = db.execute("select donto.register_revision('chat:scale/turns', %s)",
                     (body,)).fetchone()[0]
    db.execute("select donto.record_turns(%s::bigint, %s::jsonb)", (rev, json.dumps(turns)))
    db.commit()
    tail = "[20000] user: one more\n"
    more = turns + [{"seq": n, "turn_id": n, "role": "user", "session": 1, "exchange": n,
                     "header_start": len(body), "char_start": len(body) + 15,
                     "char_end": len(body) + 23}]
    db.execute("set statement_timeout = '5s'")
    try:
        fault = db.execute("select donto._extension_fault(%s, %s, %s::jsonb)",
                           (rev, body + tail, json.dumps(more))).fetchone()[0]
    except psycopg.errors.QueryCanceled:
        pytest.fail("donto._extension_fault did not end within 5 s on 20,000 turns")
    finally:
        db.rollback()
    assert fault is None
    # a changed old turn is still found, the first one
    bad = [dict(t) for t in more]
    bad[7000]["role"] = "assistant"
    bad[9000]["role"] = "assistant"
    fault = db.execute("select donto._extension_fault(%s, %s, %s::jsonb)",
                       (rev, body + tail, json.dumps(bad))).fetchone()[0]
    db.rollback()
    assert fault.startswith("turn seq 7000 of revision"), fault


def test_pending_blocks_are_listed_without_jit(db):
    """Found measuring: the pending list's plan passed jit_above_cost (a body search per
    block, only ever run for a changed text) and JIT compilation took 1.5 s of a 1.8 s
    call on a BEAM-10M-sized conversation (`donto-pg extract` lists them two or three
    times a session). The function runs without JIT."""
    config = db.execute(
        "select proconfig from pg_proc where oid = "
        "'donto.pending_extraction_blocks(bigint, bigint[], integer)'::regprocedure"
    ).fetchone()[0]
    db.commit()
    assert "jit=off" in config


def test_the_report_asks_who_holds_every_block_left_at_once(db, connect):
    """Found measuring: the end of `donto-pg extract` asked donto.extraction_block_holder
    of every block left, one call each (its lineage followed back and its leases read per
    block): 1.7-3 s for the 8,500 blocks of a BEAM-10M-sized conversation. One call now,
    donto.extraction_block_holders, with the same answers: another live session's block,
    not one it gave back, nothing of a session that ended."""
    rev = api.add_conversation(db, _chat(300), "chat:scale/held", embed=False)
    db.execute("select donto.project_extraction(%s)", (rev,))
    run = db.execute("select run_id from donto.start_extraction_run(%s::jsonb)",
                     ('[{"name": "fake", "model": "fake-model"}]',)).fetchone()[0]
    blocks = [b for (b,) in db.execute(
        "select block_id from donto.pending_extraction_blocks(%s)", (run,))]
    db.commit()
    assert len(blocks) >= 4
    other = connect()
    for b in blocks[:3]:
        assert other.execute("select donto.take_extraction_block(%s, %s)",
                             (run, b)).fetchone()[0] == "taken"
        other.commit()
    assert other.execute("select donto.release_extraction_block(%s, %s)",
                         (run, blocks[1])).fetchone()[0] is True
    other.commit()

    def both() -> tuple[dict[int, int | None], dict[int, int | None]]:
        one = {b: db.execute("select donto.extraction_block_holder(%s, %s)",
                             (run, b)).fetchone()[0] for b in blocks}
        many = dict(db.execute(
            "select block_id, backend_pid from donto.extraction_block_holders(%s, %s)",
            (run, blocks + [blocks[0]])).fetchall())
        db.commit()
        return one, many

    one, many = both()
    assert many == one
    assert {b for b, p in many.items() if p} == {blocks[0], blocks[2]}
    assert many[blocks[0]] == other.info.backend_pid
    other.close()
    for _ in range(100):  # the backend exits a moment after the connection closes
        one, many = both()
        if not any(one.values()):
            break
        time.sleep(0.05)
    assert many == one and not any(many.values())


def test_standing_superseding_reads_each_statement_s_words_once_not_per_pair(db):
    """Found by a newcomer's walk: one user turn repeating "I love cooking seafood" a
    hundred times made a thousand standing statements of one subject, and superseding
    compared every pair with donto._standing_supersedes, which turned both texts into
    directive words each time (to_tsvector twice a pair): `add` took 53 s and
    donto.standing of that context 30 s, on every recall with standing slots. Each
    statement's words are computed once now and the pairs compare arrays
    (donto._standing_takes_over); the answers are the same."""
    line = "I live in Lisbon and I love cooking seafood on weekends. " * 3
    n = 60
    chat = [{"role": "user", "content": "\n".join([line.strip()] * n)},
            {"role": "assistant", "content": "Noted."}]
    rev = api.add_conversation(db, chat, "chat:scale/standing", embed=False)
    stated = db.execute("select count(*) from donto.x_standing where revision_id = %s",
                        (rev,)).fetchone()[0]
    assert stated >= n  # a group of at least N statements of one subject
    db.commit()
    db.execute("set track_functions = 'all'")
    rows = db.execute("select statement_id, superseded_by from donto.standing("
                      "'ctx:memory/episodic/chat/scale/standing')").fetchall()
    assert _calls(db, "_standing_supersedes") == 0  # no per-pair text work
    # a few reads of each statement's words, not one per pair (stated * (stated - 1) / 2)
    assert _calls(db, "_standing_words") <= 4 * stated
    db.commit()
    # the same answers as the pairwise rule: every statement but the last is taken over
    # by the next one (the same words)
    assert len(rows) == stated
    assert sum(1 for _, by in rows if by is None) == 1
    # projecting (here into another context) does no per-pair text work either
    db.execute("set track_functions = 'all'")
    assert db.execute("select donto.project_standing(%s, 'ctx:scale/standing-again')",
                      (rev,)).fetchone()[0] == stated
    assert _calls(db, "_standing_supersedes") == 0
    assert _calls(db, "_standing_words") <= 4 * stated
    db.commit()
