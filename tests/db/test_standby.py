"""Recall on a streaming replica: a hot standby answers exactly as the primary.

Two local clusters of their own (donto_pg.cluster.Cluster, as the server's OS
user): a primary (wal_level = replica, a replication role allowed by one extra
pg_hba line) and a hot standby made from it with ``pg_basebackup -R`` that
streams its WAL. A small BEAM conversation (examples/beam 100K/13, first batch)
is loaded, embedded and given one extraction run on the primary; after the
standby has replayed it, a login role in donto_reader gets the same answers from
both: donto.recall (the query is embedded inside the standby's own backend),
donto.recall_by_vector, donto.recall_payload and every view of schema donto.
Nothing on that read path writes: a standby refuses every write (the test shows
it does), and the same calls succeed in a read-only transaction on the primary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import psycopg
import pytest
from psycopg import errors

from donto_pg import loader, migrate
from donto_pg.cluster import PG_BIN, PORT, Cluster
from donto_pg.db import register_vector_if_present
from donto_pg.embed import embed_pending
from tests.conftest import EXAMPLES, TEST_HOME, write_chat

READER, READER_PW = "standby_reader", "reader-pw-4f1c"
REPLICATOR, REPLICATOR_PW = "donto_replicator", "repl-pw-9a2e"
SETTINGS = {"fsync": "off", "wal_level": "replica", "max_wal_senders": "4",
            "hot_standby": "on", "shared_buffers": "128MB"}
QUERIES = ["What did I ask about my project deadline?", "Which tools did we talk about?",
           "When is the meeting?"]


def _as_server_user(args: list[str]) -> subprocess.CompletedProcess[str]:
    """Run a PostgreSQL tool as the server's OS user (postgres when we are root)."""
    cmd = ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def _chat() -> list[dict]:
    batches = json.loads((EXAMPLES / "chats" / "100K" / "13" / "chat.json").read_text())
    batch = batches[0]
    return [{"batch_number": 1, "time_anchor": batch.get("time_anchor"),
             "turns": batch["turns"][:10]}]


def _extract_once(conn: psycopg.Connection, rev: int) -> None:
    """Projection B and one ingested extraction answer quoting the first user turn."""
    conn.execute("select donto.project_extraction(%s)", (rev,))
    run = conn.execute(
        "select run_id from donto.start_extraction_run(%s, '{}', null, null)",
        (json.dumps([{"name": "fake", "model": "fake-model", "base_url": "http://x"}]),)
    ).fetchone()[0]
    block, turns = conn.execute(
        "select block_id, turns from donto.extraction_block where revision_id = %s "
        "order by projection_id, seq limit 1", (rev,)).fetchone()
    body = conn.execute("select body from donto.revision where revision_id = %s",
                        (rev,)).fetchone()[0]
    first = turns[0]
    quote = body[first["char_start"]:first["char_end"]].split("\n")[0][:80].strip()
    answer = json.dumps([{"subject": "user", "predicate": "said", "object": "something",
                          "quote": quote, "turn": first.get("turn_id", 0),
                          "hypothesis": False}])
    conn.execute("select donto.ingest_extraction(%s, %s, %s, %s)",
                 (block, run, answer, json.dumps({"model": "m"})))
    conn.commit()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(primary, standby) clusters, the primary loaded; both stopped and removed afterwards."""
    base = TEST_HOME / f"standby-{os.getpid()}"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True, mode=0o755)
    base.chmod(0o755)
    primary = Cluster(base / "primary", settings=SETTINGS)
    standby = Cluster(base / "standby", settings=SETTINGS)
    try:
        primary.start()
        with psycopg.connect(**primary.conninfo()) as conn:
            register_vector_if_present(conn)
            migrate.migrate(conn)
            register_vector_if_present(conn)
            conn.execute(f"create role {REPLICATOR} login replication password '{REPLICATOR_PW}'")
            conn.execute(f"create role {READER} login password '{READER_PW}' in role donto_reader")
            conn.commit()
            hba = primary.datadir / "pg_hba.conf"
            with hba.open("a") as fh:
                fh.write(f"local   replication  {REPLICATOR}  scram-sha-256\n")
            conn.execute("select pg_reload_conf()")
            chat = write_chat(tmp_path_factory.mktemp("standby"), "13", _chat())
            root = chat.parent.parent.parent
            res = loader.load_beam(conn, str(root))
            assert [r.ok for r in res] == [True], res[0].error
            conn.commit()
            embed_pending(conn, progress=False)
            conn.commit()
            _extract_once(conn, res[0].revision_id)

        # The standby: a base backup of the running primary, -R writes standby.signal and
        # primary_conninfo, -X stream copies the WAL written meanwhile.
        standby.home.mkdir(mode=0o755)
        standby.datadir.mkdir(mode=0o700)
        if os.geteuid() == 0:
            shutil.chown(standby.datadir, "postgres", "postgres")
        proc = _as_server_user([
            str(PG_BIN / "pg_basebackup"), "-D", str(standby.datadir), "-R", "-X", "stream",
            "-c", "fast", "-d",
            f"host={primary.sockdir} port={PORT} user={REPLICATOR} password={REPLICATOR_PW}"])
        assert proc.returncode == 0, proc.stderr
        assert (standby.datadir / "standby.signal").exists()
        standby.start()
        yield primary, standby
    finally:
        for c in (standby, primary):
            if c.is_initialized():
                c.stop()
        shutil.rmtree(base, ignore_errors=True)


def _reader(cluster: Cluster) -> psycopg.Connection:
    conn = psycopg.connect(host=str(cluster.sockdir), port=PORT, user=READER,
                           password=READER_PW, dbname="donto")
    register_vector_if_present(conn)
    return conn


def _wait_for_replay(primary: Cluster, standby: Cluster, timeout: float = 120) -> None:
    with psycopg.connect(**primary.conninfo(), autocommit=True) as p, \
         psycopg.connect(**standby.conninfo(), autocommit=True) as s:
        lsn = p.execute("select pg_current_wal_lsn()").fetchone()[0]
        deadline = time.monotonic() + timeout
        while not s.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn",
                            (lsn,)).fetchone()[0]:
            assert time.monotonic() < deadline, "the standby did not replay the primary's WAL"
            time.sleep(0.2)


def _answers(conn: psycopg.Connection, ctx: str) -> dict[str, object]:
    """Everything the read path returns, from one connection."""
    out: dict[str, object] = {}
    for q in QUERIES:
        for arms in ("vector", "lexical", "hybrid"):
            out[f"recall {arms} {q}"] = conn.execute(
                "select * from donto.recall(%s, k => 5, context => %s, arms => %s)",
                (q, ctx, arms)).fetchall()
        out[f"recall every context {q}"] = conn.execute(
            "select * from donto.recall(%s, k => 5)", (q,)).fetchall()
        vec = conn.execute("select donto.embed_query(%s)", (q,)).fetchone()[0]
        out[f"embed_query {q}"] = vec.tolist() if hasattr(vec, "tolist") else vec
        out[f"recall_by_vector {q}"] = conn.execute(
            "select * from donto.recall_by_vector(%s, %s, k => 5, context => %s)",
            (vec, q, ctx)).fetchall()
        out[f"recall_payload {q}"] = conn.execute(
            "select donto.recall_payload(%s, 400, k => 5, context => %s)", (q, ctx)).fetchone()[0]
    views = [r[0] for r in conn.execute(
        "select viewname from pg_views where schemaname = 'donto' order by 1").fetchall()]
    assert "claim_provenance" in views
    for v in views:
        rows = conn.execute(f"select * from donto.{v}").fetchall()
        out[f"view {v}"] = sorted(rows, key=repr)
    conn.commit()
    return out


def test_standby_streams_and_answers_recall_as_the_primary(pair):
    primary, standby = pair
    _wait_for_replay(primary, standby)
    with psycopg.connect(**primary.conninfo(), autocommit=True) as p:
        assert p.execute("select state from pg_stat_replication "
                         "where usename = %s", (REPLICATOR,)).fetchone() == ("streaming",)
        ctx = p.execute("select iri from donto.context where kind = 'recall'").fetchone()[0]
    with _reader(standby) as s, _reader(primary) as p:
        assert s.execute("select pg_is_in_recovery()").fetchone()[0] is True
        assert p.execute("select pg_is_in_recovery()").fetchone()[0] is False
        s.commit()
        p.commit()
        on_standby = _answers(s, ctx)
        # The primary in a read-only transaction: a write anywhere on the path would fail.
        p.execute("set default_transaction_read_only = on")
        p.commit()
        on_primary = _answers(p, ctx)
    assert on_standby.keys() == on_primary.keys()
    for key in on_primary:
        assert on_standby[key] == on_primary[key], key
    assert len(on_primary[f"recall hybrid {QUERIES[0]}"]) == 5
    assert on_primary["view claim_provenance"], "the extraction run left no claim"
    assert on_primary[f"recall_payload {QUERIES[0]}"]["memories"] or \
        on_primary[f"recall_payload {QUERIES[0]}"]["chunks"]


def test_the_standby_refuses_writes(pair):
    """What makes the test above a proof: any write on the standby is an error."""
    primary, standby = pair
    with _reader(standby) as s:
        with pytest.raises(errors.ReadOnlySqlTransaction):
            s.execute("create temp table t (x int)")
    with psycopg.connect(**standby.conninfo()) as s:
        with pytest.raises(errors.ReadOnlySqlTransaction):
            s.execute("select donto.ensure_context('ctx:test/standby', 'recall')")


def test_writes_on_the_primary_reach_the_standby(pair):
    """Streaming, not a one-off copy: a revision registered later is read on the standby."""
    primary, standby = pair
    with psycopg.connect(**primary.conninfo()) as p:
        rev = p.execute("select donto.register_revision('test:standby/late', %s)",
                        ("[user] a late turn",)).fetchone()[0]
        p.commit()
    _wait_for_replay(primary, standby)
    with _reader(standby) as s:
        assert s.execute("select body from donto.revision where revision_id = %s",
                         (rev,)).fetchone() == ("[user] a late turn",)


def test_read_path_is_the_reader_api(pair):
    """The calls above are the reader's own: donto_reader may execute them, nothing more."""
    _, standby = pair
    with _reader(standby) as s:
        with pytest.raises(errors.InsufficientPrivilege):
            s.execute("select donto.ensure_context('ctx:test/x', 'recall')")


def test_forgotten_words_stay_forgotten_on_the_standby_and_a_lease_is_refused(pair):
    """Forgetting (migrations 034-035) on a standby: a writer login retracts the recall
    chunk holding a PIN on the primary; the standby's recall and payload never show it,
    and answer as the primary does. Taking an extraction block's lease (a row,
    donto.take_extraction_block) on the standby is refused as a write (25006), leaving
    nothing behind; listing the pending blocks and asking who holds one read only."""
    from donto_pg import api
    from tests.db.test_forget_everywhere import SECRET, _long_turn_chat

    primary, standby = pair
    writer, writer_pw = "standby_writer", "writer-pw-51b0"
    with psycopg.connect(**primary.conninfo()) as p:
        p.execute(f"create role {writer} login password '{writer_pw}' in role donto_writer")
        p.commit()
    w = psycopg.connect(host=str(primary.sockdir), port=PORT, user=writer, password=writer_pw,
                        dbname="donto")
    rev = api.add_conversation(w, _long_turn_chat(), "chat:standby/pin", embed=False)
    run = w.execute("select run_id from donto.start_extraction_run(%s, '{}', null, 'sb')",
                    (json.dumps([{"name": "fake", "model": "fake-model",
                                  "base_url": "http://x"}]),)).fetchone()[0]
    w.commit()
    with psycopg.connect(**primary.conninfo()) as p:
        register_vector_if_present(p)
        embed_pending(p, progress=False)
        p.commit()
    (chunk,) = w.execute("select statement_id from donto.revision_chunks(%s) "
                         "where chunk_text like %s", (rev, f"%{SECRET}%")).fetchone()
    w.execute("select donto.retract(%s, 'forget my PIN')", (chunk,))
    w.commit()
    w.close()
    _wait_for_replay(primary, standby)
    ctx = "ctx:recall/chat:standby/pin"
    asks = [("select chunk_text from donto.recall(%s, k => 6, context => "
             "donto.recall_context_iri('chat:standby/pin'))", "what is my bank PIN?"),
            ("select donto.recall_payload(%s, 2000, k => 6, context => "
             "donto.recall_context_iri('chat:standby/pin'))::text",
             "Can you list in order what I mentioned about my bank?")]
    with _reader(standby) as s, _reader(primary) as p:
        p.execute("set default_transaction_read_only = on")
        p.commit()
        for sql, q in asks:
            on_standby = [r[0] for r in s.execute(sql, (q,)).fetchall()]
            on_primary = [r[0] for r in p.execute(sql, (q,)).fetchall()]
            assert on_standby == on_primary and on_standby, (ctx, sql)
            assert not any(SECRET in t for t in on_standby), on_standby
        s.commit()
    sw = psycopg.connect(host=str(standby.sockdir), port=PORT, user=writer, password=writer_pw,
                         dbname="donto")
    try:
        blocks = [b for (b,) in sw.execute(
            "select block_id from donto.pending_extraction_blocks(%s)", (run,))]
        assert blocks
        assert sw.execute("select donto.extraction_block_holder(%s, %s)",
                          (run, blocks[0])).fetchone() == (None,)
        sw.commit()
        with pytest.raises(errors.ReadOnlySqlTransaction):
            sw.execute("select donto.take_extraction_block(%s, %s)", (run, blocks[0]))
        sw.rollback()
    finally:
        sw.close()
    with psycopg.connect(**primary.conninfo()) as p:
        assert p.execute("select count(*) from donto.extraction_lease where run_id = %s",
                         (run,)).fetchone() == (0,)
