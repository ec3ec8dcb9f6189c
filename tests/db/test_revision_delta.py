"""A conversation that grows is stored as skip-deltas, not as its whole text at every append.

Every revision that donto.extend_revision registers on the latest revision of a chain of
appends is stored as the text after an earlier revision of the chain (migration 038,
donto._register_revision): donto.revision.body is null there, and donto.revision_body /
donto.span_text read it. These tests check what is stored, that every revision reads back
as the text registered (its SHA-256 too), that a fork and a new text are stored whole, that
I3 covers the new columns, that a reader login reads deltas, that pg_dump / pg_restore keeps
a chain, and that the whole pipeline (recall with turn blocks, anchoring, extraction,
standing, summaries, forgetting) gives on a delta chain what it gives on the same text
loaded whole.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import subprocess
import uuid
from pathlib import Path

import psycopg
import pytest

from donto_pg import api, beam, extract, loader, migrate, summaries
from donto_pg.db import register_vector_if_present
from donto_pg.embed import embed_pending
from donto_pg.llm import Provider, ProviderPool
from tests.fakellm import FakeLLM

PG_BIN = Path(os.environ.get("DONTO_PG_BIN", "/usr/lib/postgresql/15/bin"))
STORED = """
select count(*), sum(r.body_chars),
       sum(coalesce(char_length(r.body), 0) + coalesce(char_length(r.body_tail), 0)),
       count(*) filter (where r.body is null)
from donto.revision as r join donto.document as d using (document_id) where d.iri = %s
"""


def messages(n: int, start: int = 0) -> list[dict[str, object]]:
    """N small messages (an exchange per two), numbered from START."""
    return [{"role": "user" if i % 2 == 0 else "assistant",
             "content": f"Message {i}: " + ("a question about the garden, " if i % 2 == 0
                                            else "an answer about the garden, ") * 3}
            for i in range(start, start + n)]


def record(conn: psycopg.Connection, msgs: list[dict[str, object]], iri: str
           ) -> tuple[int, str]:
    """Load MSGS as the conversation IRI (an append when a shorter one is loaded):
    (revision id, the text registered)."""
    conv = api.conversation(msgs, iri)
    rec = loader.record_conversation(conn, conv, iri, {})
    conn.commit()
    return rec.revision_id, beam.format_chat(conv)[0]


def rendered(msgs: list[dict[str, object]], iri: str) -> tuple[str, list[dict[str, object]]]:
    """The canonical text of MSGS and its turn table (as donto.record_turns takes it)."""
    text, spans = beam.format_chat(api.conversation(msgs, iri))
    return text, loader.turn_rows(spans)


def stored(conn: psycopg.Connection, iri: str) -> tuple[int, int, int, int]:
    """(revisions, sum of their lengths, characters stored in body and body_tail, deltas)."""
    row = conn.execute(STORED, (iri,)).fetchone()
    conn.commit()
    return tuple(int(x or 0) for x in row)


def test_forty_appends_store_a_few_times_the_text_and_read_back_exactly(db):
    iri = "chat:t/delta-40"
    revs, texts = [], []
    for n in range(2, 84, 2):  # a load, then 40 appends of one exchange
        rev, text = record(db, messages(n), iri)
        revs.append(rev)
        texts.append(text)
    assert len(set(revs)) == 41
    n, total, kept, deltas = stored(db, iri)
    final = len(texts[-1])
    assert (n, total, deltas) == (41, sum(len(t) for t in texts), 40)
    # O(text x log n): within a few times the final text, far below every text whole
    assert kept <= 4 * final, (kept, final)
    assert kept * 5 < total, (kept, total)
    for i, (rev, text) in enumerate(zip(revs, texts, strict=True)):
        body, sha, root, index, base = db.execute(
            "select donto.revision_body(revision_id), sha256, body_chain_root, "
            "body_chain_index, body_base from donto.revision where revision_id = %s",
            (rev,)).fetchone()
        assert body == text, i
        assert bytes(sha) == hashlib.sha256(text.encode()).digest()
        pieces = db.execute("select count(*) from donto._revision_pieces(%s)",
                            (rev,)).fetchone()[0]
        if i == 0:
            assert (root, index, base) == (None, None, None)
        else:
            # skip-deltas: the i-th of the chain is stored after the (i & (i - 1))-th
            assert (root, index, base) == (revs[0], i, revs[i & (i - 1)])
            # the root and one tail per bit of i: at most log2(i) + 1 tails
            assert pieces == bin(i).count("1") + 1 <= math.log2(i) + 2
        # slices: across pieces, inside one, empty, past the end
        for a, b in ((0, len(text)), (5, len(text) - 5), (len(texts[0]) - 3, len(text)),
                     (len(text) - 1, len(text)), (7, 7), (len(text), len(text) + 9)):
            assert db.execute("select donto.span_text(%s, %s, %s)",
                              (rev, a, b)).fetchone()[0] == text[a:b], (i, a, b)
    with pytest.raises(psycopg.errors.SubstringError):  # as substring(): a negative length
        db.execute("select donto.span_text(%s, 9, 3)", (revs[-1],))
    db.rollback()
    # loading the whole text again, and appending it again, change nothing
    assert record(db, messages(82), iri)[0] == revs[-1]
    assert stored(db, iri)[0] == 41


def test_a_new_text_and_a_fork_are_stored_whole(db):
    iri = "chat:t/delta-fork"
    rev1, _ = record(db, messages(4), iri)
    rev2, _ = record(db, messages(6), iri)
    # a changed text (not an extension): stored whole, a chain of its own
    changed = [dict(m) for m in messages(8)]
    changed[1]["content"] = "A changed answer."
    rev3, text3 = record(db, changed, iri)
    rev4, text4 = record(db, changed + messages(2, 8), iri)
    rows = dict((r[0], r[1:]) for r in db.execute(
        "select revision_id, body is null, body_base, body_chain_root, body_chain_index "
        "from donto.revision where revision_id = any(%s)", ([rev1, rev2, rev3, rev4],)))
    assert rows[rev1] == (False, None, None, None)
    assert rows[rev2] == (True, rev1, rev1, 1)
    assert rows[rev3] == (False, None, None, None)
    assert rows[rev4] == (True, rev3, rev3, 1)

    # a fork: an extension of a revision that is not its chain's latest (REV1 answers
    # recall again once REV2..REV4 are no longer projected: a new document made so)
    iri = "chat:t/delta-fork-2"
    texts = [rendered(m, iri) for m in (messages(2), messages(4),
                                         messages(2) + [{"role": "user", "content": "Else."}])]
    a = db.execute("select donto.register_revision(%s, %s)", (iri, texts[0][0])).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s)", (a, json.dumps(texts[0][1])))
    b = loader.extend_revision(db, iri, *texts[1])
    db.execute("select donto.project_recall(%s)", (a,))
    db.commit()
    c = loader.extend_revision(db, iri, *texts[2])
    db.commit()
    got = db.execute(
        "select revision_id, body is null, body_base, donto.revision_body(revision_id) "
        "from donto.revision where revision_id in (%s, %s) order by 1", (b, c)).fetchall()
    assert got == [(b, True, a, texts[1][0]), (c, False, None, texts[2][0])]
    assert db.execute("select extends_revision_id from donto.revision_extension "
                      "where revision_id = %s", (c,)).fetchone() == (a,)


def test_i3_refuses_to_change_a_delta(db):
    iri = "chat:t/delta-i3"
    rev1, _ = record(db, messages(2), iri)
    rev2, _ = record(db, messages(4), iri)
    for sql in ("update donto.revision set body_tail = 'rewritten' where revision_id = %s",
                "update donto.revision set body_base = null where revision_id = %s",
                "update donto.revision set body_chain_index = 9 where revision_id = %s",
                "delete from donto.revision where revision_id = %s"):
        with pytest.raises(psycopg.Error) as err:
            db.execute(sql, (rev2,))
        assert err.value.sqlstate == "DI003", sql
        db.rollback()
    # the check constraint: exactly one of body and (base, tail)
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute("insert into donto.revision (document_id, sha256, body, body_chars, "
                   "body_base, body_tail, body_chain_root, body_chain_index) "
                   "select document_id, sha256('x'::bytea), 'x', 1, %s, 'x', %s, 5 "
                   "from donto.revision where revision_id = %s", (rev1, rev1, rev1))
    db.rollback()


def test_a_reader_reads_deltas_and_a_writer_cannot_store_one_of_its_own(db, logins):
    iri = "chat:t/delta-roles"
    record(db, messages(2), iri)
    rev, text = record(db, messages(6), iri)
    _, reader = logins("donto_reader")
    with reader() as r:
        assert r.execute("select donto.revision_body(%s)", (rev,)).fetchone()[0] == text
        assert r.execute("select donto.span_text(%s, 3, %s)",
                         (rev, len(text) - 2)).fetchone()[0] == text[3:-2]
    # the internal registration stores a tail on any base it is given: a writer calling
    # it directly would make a revision read as a text its SHA-256 is not of
    _, writer = logins()
    with writer() as w:
        w.execute("select donto.register_revision('chat:t/delta-mine', 'my words')")
        w.commit()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            w.execute("select donto._register_revision('chat:t/delta-mine', "
                      "'my words and a lie', '{}', %s)", (rev,))


# --- pg_dump / pg_restore ---------------------------------------------------------------


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


REVISIONS = ("select revision_id, document_id, sha256, body, body_chars, body_base, body_tail, "
             "body_chain_root, body_chain_index, donto.revision_body(revision_id) "
             "from donto.revision order by 1")


def test_dump_and_restore_keep_a_chain(request, tmp_path):
    proc = request.getfixturevalue("donto_proc")
    info = {"host": proc.host, "port": proc.port, "user": proc.user}
    admin = psycopg.connect(**info, dbname="postgres", autocommit=True)
    names = [f"donto_delta_{uuid.uuid4().hex[:6]}_{s}" for s in ("src", "dst")]
    env = {**os.environ, "PGHOST": proc.host, "PGPORT": str(proc.port), "PGUSER": proc.user}
    try:
        for name in names:
            admin.execute(f'create database "{name}" template template0')
        with psycopg.connect(**info, dbname=names[0]) as src:
            migrate.migrate(src)
            register_vector_if_present(src)
            iri = "chat:t/delta-dump"
            texts = [record(src, messages(n), iri)[1] for n in range(2, 16, 2)]
            before = src.execute(REVISIONS).fetchall()
            assert sum(r[3] is None for r in before) == 6
            assert [r[9] for r in before] == texts
        archive = tmp_path / "db.dump"
        r = _run([str(PG_BIN / "pg_dump"), "-Fc", "-f", str(archive), "-d", names[0]], env=env)
        assert r.returncode == 0, r.stderr
        r = _run([str(PG_BIN / "pg_restore"), "--exit-on-error", "-d", names[1], str(archive)],
                 env=env)
        assert r.returncode == 0, r.stderr
        with psycopg.connect(**info, dbname=names[1]) as dst:
            register_vector_if_present(dst)
            assert dst.execute(REVISIONS).fetchall() == before
            # the chain goes on after the restore
            rev, text = record(dst, messages(16), iri)
            assert dst.execute("select body is null, body_chain_index, "
                               "donto.revision_body(revision_id) from donto.revision "
                               "where revision_id = %s", (rev,)).fetchone() == (True, 7, text)
    finally:
        for name in names:
            admin.execute(f'drop database if exists "{name}" with (force)')
        admin.close()


def test_rows_stored_before_038_are_kept_whole_and_root_a_chain(empty_db):
    conn = empty_db
    migrate.migrate(conn, upto="035")
    iri = "chat:t/delta-upgrade"
    text, spans = beam.format_chat(api.conversation(messages(4), iri))
    old = conn.execute(
        "with d as (insert into donto.document (iri) values (%s) returning document_id) "
        "insert into donto.revision (document_id, sha256, body, body_chars) "
        "select document_id, sha256(convert_to(%s, 'UTF8')), %s, %s from d "
        "returning revision_id", (iri, text, text, len(text))).fetchone()[0]
    for t in loader.turn_rows(spans):
        conn.execute("insert into donto.turn (revision_id, seq, turn_id, role, session, "
                     "exchange, time_anchor, header_start, char_start, char_end) values "
                     "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                     (old, t["seq"], t["turn_id"], t["role"], t["session"], t["exchange"],
                      t["date"], t["header_start"], t["char_start"], t["char_end"]))
    conn.commit()
    migrate.migrate(conn)
    register_vector_if_present(conn)
    assert conn.execute("select body, body_base, body_tail, body_chain_root, "
                        "body_chain_index from donto.revision where revision_id = %s",
                        (old,)).fetchone() == (text, None, None, None, None)
    rev, longer = record(conn, messages(6), iri)
    assert conn.execute("select body, body_base, body_chain_root, body_chain_index, "
                        "donto.revision_body(revision_id) from donto.revision "
                        "where revision_id = %s", (rev,)).fetchone() == (
        None, old, old, 1, longer)


@pytest.fixture
def empty_db(db):
    """An empty database on the test server (dropped afterwards)."""
    info = db.info
    name = f"donto_delta_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname="postgres",
                            autocommit=True)
    admin.execute(f'create database "{name}"')
    conn = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=name)
    yield conn
    conn.close()
    admin.execute(f'drop database if exists "{name}" with (force)')
    admin.close()


# --- the whole pipeline on a delta chain against the same text loaded whole --------------

FILLER = ("The Danube cycle path runs along the river on quiet roads and gravel tracks, "
          "with ferries at a few crossings and campsites every forty kilometres or so. ")
SECRET = "My password hint is blue-falcon."
RULE = "Never suggest hostels, I want campsites."
CONVERSATION = [
    ("user", 1, "2024-03-02", "Always give me distances in kilometres. I am planning a "
                              "cycling trip along the Danube."),
    ("assistant", 1, None, FILLER * 6),
    ("user", 1, None, "I live in Oslo. My dog is named Rex."),
    ("assistant", 1, None, "Noted. " + FILLER * 4),
    ("user", 2, "2024-04-10", SECRET + " Keep it for me."),
    ("assistant", 2, None, "Kept. " + FILLER * 5),
    ("user", 2, None, "I prefer short answers without emoji. Which bike should I buy for "
                      "gravel roads?"),
    ("assistant", 2, None, "A gravel bike with wide tyres. " + FILLER * 3),
    ("user", 3, "2024-05-01", "About my dog: can he come along in a trailer?"),
    ("assistant", 3, None, "Yes, in a dog trailer. " + FILLER * 4),
    ("user", 3, None, RULE),
    ("assistant", 3, None, "Campsites it is. " + FILLER * 2),
]
CLAIMS = {
    "I live in Oslo": [{"kind": "fact", "subject": "user", "predicate": "lives in",
                        "object": "Oslo", "quote": "I live in Oslo.", "turn": 2,
                        "hypothesis": False}],
    RULE: [{"kind": "standing", "subject": "accommodation", "predicate": "instruction",
            "object": "campsites, never hostels", "quote": RULE, "turn": 10,
            "hypothesis": False}],
}
QUERIES = ["In order, what are the things I mentioned about my dog and the trip?",
           "password hint", "which bike for gravel", "distances in kilometres"]


def _answers(prompt: str) -> str:
    claims = [c for key, cs in CLAIMS.items() if key in prompt for c in cs]
    return json.dumps(claims)


def _msg(i: int) -> dict[str, object]:
    role, session, date, content = CONVERSATION[i]
    m: dict[str, object] = {"role": role, "content": content, "session": session}
    if date:
        m["date"] = date
    return m


def _pipeline(db: psycopg.Connection, iri: str, rev: int, fake: FakeLLM) -> dict[str, object]:
    """Every result the pipeline gives for revision REV of document IRI."""
    info = db.info
    ctx = db.execute("select donto.recall_context_iri(%s)", (iri,)).fetchone()[0]
    out: dict[str, object] = {}
    q = db.execute
    out["text"] = q("select donto.revision_body(%s)", (rev,)).fetchone()[0]
    out["chunks"] = q("select chunk_position, char_start, char_end, chunk_text "
                      "from donto.revision_chunks(%s) order by 1", (rev,)).fetchall()
    out["keys"] = q("select * from donto._turn_key_texts(%s) order by 1", (rev,)).fetchall()
    blocks = q("select b.block_id, b.seq, b.kind, b.char_start, b.char_end, b.turns "
               "from donto.extraction_block as b join donto.projection as p "
               "using (projection_id) where p.revision_id = %s order by b.seq",
               (rev,)).fetchall()
    out["blocks"] = [b[1:] for b in blocks]
    out["render"] = [q("select donto.render_for_extraction(%s)", (b[0],)).fetchone()[0]
                     for b in blocks]
    text = out["text"]
    out["anchor"] = [q("select char_start, char_end, method, round(score::numeric, 6) "
                       "from donto.anchor(%s, %s, %s)", (rev, quote, near)).fetchall()
                     for quote, near in ((SECRET, None), ("i LIVE in   oslo.", 10),
                                         ("Campsites it iz.", len(text) - 50),
                                         (text[-700:-400], 0))]
    db.commit()
    report = extract.run_extraction(
        lambda: psycopg.connect(host=info.host, port=info.port, user=info.user,
                                dbname=info.dbname),
        conversations=[iri], alarm_after=0, concurrency=1,
        providers=ProviderPool([Provider(name="fake", base_url=fake.base_url,
                                         model="fake-model", timeout=20)],
                               backoff_base=0.01, backoff_max=0.05))
    assert report.ok
    out["claims"] = q("select s.object_lit ->> 'v', s.char_start, s.char_end from "
                      "donto.x_claim join donto.statement_current as s using (statement_id) "
                      "join donto.document as d on d.document_id = (select document_id from "
                      "donto.revision where revision_id = s.derived_from_revision) "
                      "where d.iri = %s order by 2, 1", (iri,)).fetchall()
    out["standing"] = q("select kind, subject_key, statement_text, char_start, char_end "
                        "from donto.standing(%s) order by 4, 1, 3", (ctx,)).fetchall()
    embed_pending(db, progress=False)

    def recall() -> list[list[tuple]]:
        got = [q("select char_start, char_end, chunk_text, place from "
                 "donto.recall(%s, k => 6, context => %s)", (query, ctx)).fetchall()
               for query in QUERIES]
        db.commit()
        return got

    out["recall"] = recall()
    assert any(len(set(p for *_, p in hits)) < len(hits) for hits in out["recall"]), \
        "a block of user turns (rows sharing a place)"
    # forget the chunk that holds the secret
    chunk, = q("select statement_id from donto.revision_chunks(%s) where chunk_text like %s "
               "order by chunk_position limit 1", (rev, f"%{SECRET}%")).fetchone()
    q("select donto.retract(%s, 'forget my password hint')", (chunk,))
    db.commit()
    out["recall_forgotten"] = recall()
    assert not any(SECRET in h[2] for hits in out["recall_forgotten"] for h in hits)
    out["render_forgotten"] = [q("select donto.render_for_extraction(%s)",
                                 (b[0],)).fetchone()[0] for b in blocks]
    summaries.summarize_sessions(db, revision_ids=[rev], embed=False)
    out["summaries"] = q("select x.session, x.char_start, x.char_end, s.object_lit ->> 'v' "
                         "from donto.x_session_summary as x join donto.statement as s "
                         "using (statement_id) where x.revision_id = %s order by 1",
                         (rev,)).fetchall()
    db.commit()
    return out


def test_the_pipeline_on_a_delta_chain_gives_what_the_text_loaded_whole_gives(db):
    chain = "chat:t/delta-chain"
    rev = api.add_conversation(db, [_msg(0), _msg(1)], chain, embed=False)
    for i in range(2, len(CONVERSATION), 2):  # five appends of an exchange
        rev = loader.append_turns(db, chain, [_msg(i), _msg(i + 1)])
        db.commit()
    assert db.execute("select body is null, body_chain_index from donto.revision "
                      "where revision_id = %s", (rev,)).fetchone() == (True, 5)
    # the same text and turn table loaded whole, projected as a load projects it
    whole = "chat:t/delta-whole"
    text = db.execute("select donto.revision_body(%s)", (rev,)).fetchone()[0]
    turns = db.execute(
        "select jsonb_agg(jsonb_build_object('seq', seq, 'turn_id', turn_id, 'role', role, "
        "'session', session, 'exchange', exchange, 'date', time_anchor, 'header_start', "
        "header_start, 'char_start', char_start, 'char_end', char_end) order by seq) "
        "from donto.turn where revision_id = %s", (rev,)).fetchone()[0]
    rev_whole = db.execute("select donto.register_revision(%s, %s)", (whole, text)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s)", (rev_whole, json.dumps(turns)))
    db.execute("select donto.project_recall(%s, 1200)", (rev_whole,))
    db.execute("select donto.project_standing(%s)", (rev_whole,))
    db.execute("select donto.project_extraction(%s)", (rev_whole,))
    db.commit()
    assert db.execute("select body = %s from donto.revision where revision_id = %s",
                      (text, rev_whole)).fetchone() == (True,)
    with FakeLLM(_answers) as fake:
        got = _pipeline(db, chain, rev, fake)
        want = _pipeline(db, whole, rev_whole, fake)
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], key
    # what the pipeline found is there
    assert [text[a:b] for o, a, b in got["claims"] if o == "Oslo"] == ["I live in Oslo."]
    assert any(RULE == s[2] for s in got["standing"])
    assert any(a for a in got["anchor"]) and all(got["render"]) and got["summaries"]
    assert got["render"] != got["render_forgotten"]


def test_blocks_a_later_appended_text_no_longer_holds_are_not_pending(db):
    """donto.pending_extraction_blocks reads the document's latest text, a delta here: a
    block of an earlier revision that the latest (a changed text, then appended to) no
    longer holds is superseded; one it still holds is pending."""
    iri = "chat:t/delta-pending"
    head = [{"role": "user", "content": "I live in Oslo and ride a gravel bike."},
            {"role": "assistant", "content": "Nice, Oslo has good gravel roads."}]

    def second(pet: str) -> list[dict[str, object]]:
        return [{"role": "user", "content": f"My {pet} comes along on every ride.",
                 "session": 2},
                {"role": "assistant", "content": f"A {pet} trailer helps.", "session": 2}]

    z = api.add_conversation(db, head, iri, embed=False)
    a = api.add_conversation(db, head + second("dog"), iri, embed=False)  # appended to z
    api.add_conversation(db, head + second("cat"), iri, embed=False)  # a changed text
    d = loader.append_turns(db, iri, [{"role": "user", "content": "Thanks."},
                                      {"role": "assistant", "content": "Sure."}])
    db.commit()
    assert db.execute("select body is null from donto.revision where revision_id = %s",
                      (d,)).fetchone() == (True,)
    run = db.execute("select run_id from donto.start_extraction_run(%s)",
                     (json.dumps([{"name": "baseline", "model": "m"}]),)).fetchone()[0]
    latest = db.execute("select donto.revision_body(%s)", (d,)).fetchone()[0]
    blocks = db.execute(
        "select b.block_id, donto.span_text(b.revision_id, b.char_start, b.char_end) "
        "from donto.extraction_block as b where b.revision_id = %s", (a,)).fetchall()
    held = {b for b, text in blocks if text in latest}
    assert held and len(held) < len(blocks)
    pending = {r[0] for r in db.execute(
        "select block_id from donto.pending_extraction_blocks(%s, %s) where revision_id = %s",
        (run, [z, a], a))}
    assert pending == held
