"""BEAM loading and projection A on a real server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from donto_pg import beam, loader
from donto_pg.core.windows import recall_windows
from tests.conftest import EXAMPLES, ROOT, run_cli, small_chat, write_chat

CONV13 = EXAMPLES / "chats" / "100K" / "13"


def counts(conn) -> dict[str, int]:
    tables = ["document", "revision", "turn", "statement", "x_memory_record",
              "x_memory_lexical", "projection", "probe_question", "context"]
    return {t: conn.execute(f"select count(*) from donto.{t}").fetchone()[0] for t in tables}


def test_load_conversation_and_projection_a(db):
    res = loader.load_beam(db, str(CONV13))
    assert [r.ok for r in res] == [True], res[0].error
    r = res[0]
    conv = next(beam.iter_beam(CONV13))
    body, spans = beam.format_chat(conv)
    assert (r.turns, r.questions, r.chars) == (len(conv.messages), 20, len(body))
    rev = r.revision_id
    # the chunks, in order, concatenate to the body exactly
    joined = db.execute(
        "select string_agg(s.object_lit ->> 'v', '' order by m.chunk_index) "
        "from donto.x_memory_record m join donto.statement s using (statement_id) "
        "where m.revision_id = %s", (rev,)).fetchone()[0]
    assert joined == body
    # the same spans as the Python reference, bit for bit
    got = db.execute("select char_start, char_end from donto.x_memory_record "
                     "where revision_id = %s order by chunk_index", (rev,)).fetchall()
    assert got == list(recall_windows(body, 1200))
    # every chunk's text is the exact bytes of its span, in the recall context
    bad = db.execute(
        "select count(*) from donto.statement s join donto.context c using (context_id) "
        "where s.predicate = 'mem:episodic/chunk' and (s.object_lit ->> 'v' <> "
        "donto.span_text(s.derived_from_revision, s.char_start, s.char_end) "
        "or c.iri <> 'ctx:memory/episodic/beam/100K/13')").fetchone()[0]
    assert bad == 0
    first = db.execute(
        "select s.object_lit ->> 'dt', lower(s.valid_time)::text from donto.x_memory_record m "
        "join donto.statement s using (statement_id) where m.revision_id = %s "
        "and m.chunk_index = 0", (rev,)).fetchone()
    assert first == (conv.messages[0].date.isoformat(), conv.messages[0].date.isoformat())
    # every message has its turn row and span
    texts = db.execute("select donto.span_text(revision_id, char_start, char_end) "
                       "from donto.turn where revision_id = %s order by seq", (rev,)).fetchall()
    assert [t[0] for t in texts] == [m.content for m in conv.messages]


def test_loading_twice_creates_nothing_new(db):
    first = loader.load_beam(db, str(CONV13))
    before = counts(db)
    again = loader.load_beam(db, str(CONV13))
    assert counts(db) == before
    assert again[0].revision_id == first[0].revision_id and not again[0].new_revision
    assert db.execute("select donto.project_recall(%s)", (first[0].revision_id,)).fetchone()[0] \
        == first[0].chunks
    assert counts(db) == before


def test_two_concurrent_loads_of_one_text_say_which_made_it(connect, tmp_path):
    """Two sessions load the same conversation at once: one revision, and only the
    session that registered it reports a new revision."""
    import threading

    conv = next(beam.iter_beam(write_chat(tmp_path, "7", small_chat())))
    a, b = connect(), connect()
    got = {}
    with a.transaction():
        got["a"] = loader.record_conversation(a, conv, "beam:t/race", {})
        # b waits for a's lock on the document, then finds a's revision
        t = threading.Thread(target=lambda: got.setdefault(
            "b", loader.record_conversation(b, conv, "beam:t/race", {})))
        t.start()
        time.sleep(1)
        assert t.is_alive()
    t.join(60)
    b.commit()
    assert got["a"].revision_id == got["b"].revision_id
    assert (got["a"].new_revision, got["b"].new_revision) == (True, False)


def test_deferred_full_text_vectors_equal_the_one_pass_ones(db):
    """lexical=False leaves the vectors to donto.index_lexical, which adds exactly them, once."""
    res = loader.load_beam(db, str(CONV13), lexical=False)
    rev, n = res[0].revision_id, res[0].chunks
    assert n > 0 and counts(db)["x_memory_lexical"] == 0
    assert db.execute("select donto.index_lexical(%s)", (rev,)).fetchone()[0] == n
    assert db.execute("select donto.index_lexical(%s)", (rev,)).fetchone()[0] == 0
    # the same windows in a second context, projected in one pass
    assert db.execute("select donto.project_recall(%s, 1200, 'ctx:test/one-pass')",
                      (rev,)).fetchone()[0] == n
    deferred, one_pass = (db.execute(
        "select array_agg(l.tsv::text order by m.chunk_index) from donto.x_memory_record m "
        "join donto.x_memory_lexical l using (statement_id) join donto.projection p "
        "on p.projection_id = m.projection_id join donto.context c on c.context_id = p.context_id "
        "where c.iri = %s", (ctx,)).fetchone()[0]
        for ctx in ("ctx:memory/episodic/beam/100K/13", "ctx:test/one-pass"))
    assert len(deferred) == n and deferred == one_pass


def test_gold_turns_resolve_to_spans(db):
    loader.load_beam(db, str(CONV13))
    n_gold, n_abst = db.execute(
        "select count(*) filter (where jsonb_array_length(gold) > 0), "
        "count(*) filter (where ability = 'abstention') from donto.probe_question").fetchone()
    assert n_gold >= 15 and n_abst == 2
    missing = db.execute(
        "select q.question_id from donto.probe_question q where jsonb_array_length(q.gold) > 0 "
        "and not exists (select 1 from donto.question_gold_span g "
        "where g.question_id = q.question_id)").fetchall()
    assert missing == []


def test_bad_conversations_fail_alone_and_leave_nothing(db, tmp_path):
    write_chat(tmp_path, "1", small_chat())
    write_chat(tmp_path, "2", '[{"batch_number": 1, "turns": [[{"role": "user"')  # malformed
    write_chat(tmp_path, "3", small_chat(text="bad \x00 byte"))
    write_chat(tmp_path, "4", small_chat(anchor="February-30-2024"))
    write_chat(tmp_path, "5", [])
    write_chat(tmp_path, "6", small_chat(text="I like tea.", ids=(7, 7)))  # duplicate ids: loads
    results = {r.conversation: r for r in loader.load_beam(db, str(tmp_path))}
    assert {c for c, r in results.items() if r.ok} == {"100K/1", "100K/6"}
    errors = {c: r.error for c, r in results.items() if not r.ok}
    assert "malformed JSON" in errors["100K/2"]
    assert "NUL" in errors["100K/3"]
    assert "February-30-2024" in errors["100K/4"]
    assert "no messages" in errors["100K/5"] or "empty" in errors["100K/5"]
    assert any("duplicate" in w for w in results["100K/6"].warnings)
    assert db.execute("select array_agg(iri order by iri) from donto.document").fetchone()[0] \
        == ["beam:100K/1", "beam:100K/6"]
    assert db.execute("select count(*) from donto.turn where turn_id = 7").fetchone()[0] == 2


def test_partial_10m_conversation_reports_skipped_questions(db):
    res = loader.load_beam(db, str(EXAMPLES / "chats" / "10M" / "5"))
    assert res[0].ok, res[0].error
    assert any("partial" in w for w in res[0].warnings)
    assert res[0].skipped and all("past the loaded" in s or ":" in s for s in res[0].skipped)
    ids = db.execute("select array_agg(turn_id order by seq) from donto.turn").fetchone()[0]
    assert len(ids) == len(set(ids))  # plan ids made global: no restart at 0


def test_hugging_face_rows_load(db):
    res = loader.load_beam(db, str(EXAMPLES / "hf-sample" / "beam-100K-sample.jsonl"),
                           scale="100K")
    assert [r.ok for r in res] == [True, True]
    # the same conversations as the GitHub layout: same canonical text, same revision
    gh = loader.load_beam(db, str(CONV13))[0]
    assert gh.revision_id in {r.revision_id for r in res} and not gh.new_revision


def test_cli_load_reports_failures_with_exit_code(db, tmp_path):
    write_chat(tmp_path, "1", small_chat())
    write_chat(tmp_path, "2", '{"not": "a list"')
    db.commit()
    r = run_cli(db, "load-beam", str(tmp_path), "--no-embed", "--json")
    assert r.returncode == 1
    summary = json.loads(r.stdout)
    assert (summary["loaded"], summary["failed"]) == (1, 1)


def test_deeply_nested_json_fails_its_conversation_alone(db, tmp_path):
    """100,000 nested '[' (a RecursionError in json) fail that conversation with its file
    named, through the CLI; the run goes on and the others load."""
    write_chat(tmp_path, "1", small_chat())
    deep = write_chat(tmp_path, "2", "[" * 100_000)
    deep_questions = write_chat(tmp_path, "3", small_chat(text="I like tea."))
    (deep_questions / "probing_questions" / "probing_questions.json").write_text('{"a":' * 100_000)
    write_chat(tmp_path, "4", small_chat(text="I play chess."))
    db.commit()
    r = run_cli(db, "load-beam", str(tmp_path), "--no-embed", "--json", "--jobs", "1")
    assert r.returncode == 1, r.stderr
    summary = json.loads(r.stdout)
    assert (summary["loaded"], summary["failed"]) == (2, 2)
    errors = {c["conversation"]: c["error"] for c in summary["conversations"] if not c["ok"]}
    assert errors.keys() == {"100K/2", "100K/3"}
    assert errors["100K/2"].startswith(f"{deep / 'chat.json'}: JSON nested too deeply")
    assert errors["100K/3"].startswith(
        f"{deep_questions / 'probing_questions' / 'probing_questions.json'}: JSON nested")
    assert db.execute("select array_agg(iri order by iri) from donto.document").fetchone()[0] \
        == ["beam:100K/1", "beam:100K/4"]


def test_deeply_nested_json_lines_row_fails_alone(db, tmp_path):
    rows = (EXAMPLES / "hf-sample" / "beam-100K-sample.jsonl").read_text().splitlines()
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join([rows[0], "[" * 100_000, *rows[1:]]) + "\n")
    results = loader.load_beam(db, str(path), scale="100K")
    assert [r.ok for r in results].count(True) == len(rows)
    bad = [r.error for r in results if not r.ok]
    assert len(bad) == 1 and bad[0].startswith(f"{path} (line 2): JSON nested too deeply")


def test_embed_resumes_after_kill(db, tmp_path):
    """Kill `donto-pg embed` mid-run; a second run finishes with no duplicate or gap."""
    chat = small_chat()
    long_turns = [[{"role": "user", "id": 2 * i, "content": f"Line {i}: " + ("word " * 300),
                    "question_type": "main_question"},
                   {"role": "assistant", "id": 2 * i + 1, "content": "ok " * 200}]
                  for i in range(1, 60)]
    chat[0]["turns"].extend(long_turns)
    write_chat(tmp_path, "1", chat)
    loader.load_beam(db, str(tmp_path))
    db.commit()
    total = db.execute("select count(*) from donto.x_memory_record").fetchone()[0]
    assert total > 40
    info = db.info
    dsn = f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"
    proc = subprocess.Popen([sys.executable, "-m", "donto_pg", "embed", "--batch", "4",
                             "--page", "8", "--dsn", dsn], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    n = 0
    while time.monotonic() < deadline:
        n = db.execute("select count(*) from donto.embedding").fetchone()[0]
        db.commit()
        if n >= 8 or proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = db.execute("select count(*) from donto.embedding").fetchone()[0]
    db.commit()
    assert 0 < partial < total, "the kill should land mid-run"
    r = run_cli(db, "embed", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["embedded"] == total - partial
    assert 0 < report["encoded"] <= report["embedded"]
    got = db.execute("select count(*), count(distinct statement_id) from donto.embedding"
                     ).fetchone()
    assert got == (total, total)
    assert db.execute("select count(*) from pg_indexes where indexname = 'embedding_hnsw_m1'"
                      ).fetchone()[0] == 1
    # the same chunks in another context: every vector from the cache, none encoded
    rev = db.execute("select max(revision_id) from donto.revision").fetchone()[0]
    db.execute("select donto.project_recall(%s, 1200, 'ctx:test/copy')", (rev,))
    db.commit()
    r = run_cli(db, "embed", "--json")
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["embedded"], json.loads(r.stdout)["encoded"]) == (total, 0)
    # --context counts that context's vectors; a context that does not exist is an error
    r = run_cli(db, "embed", "--context", "ctx:test/copy", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["already"] == total, r.stderr
    r = run_cli(db, "embed", "--context", "ctx:test/nope", "--json")
    assert r.returncode == 1 and "no context ctx:test/nope" in r.stderr
    assert json.loads(r.stdout)["error"] == "no context ctx:test/nope"


def test_psql_recall_as_reader(db, tmp_path):
    write_chat(tmp_path, "1", small_chat())
    loader.load_beam(db, str(tmp_path))
    db.commit()
    from donto_pg.embed import embed_pending
    embed_pending(db, progress=False)
    info = db.info
    sql = ("set role donto_reader; select char_start, vector_rank is not null "
           "from donto.recall('Where did I move?', k => 1);")
    r = subprocess.run(["psql", "-At", "-h", info.host, "-p", str(info.port), "-U", info.user,
                        "-d", info.dbname, "-v", "ON_ERROR_STOP=1", "-c", sql],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    start, has_vec = r.stdout.strip().splitlines()[-1].split("|")
    assert has_vec == "t" and int(start) == 0
    reader = psycopg.connect(host=info.host, port=info.port, user=info.user, dbname=info.dbname)
    reader.execute("set role donto_reader")
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        reader.execute("select donto.project_recall(1, 500)")
    reader.close()



def test_an_earlier_text_loaded_again_says_which_revision_answers(db, tmp_path):
    """Full, then a shorter text (it supersedes), then the full one again: that is the
    first revision again, which supersedes nothing; the load says so instead of
    reporting a plain "already loaded"."""
    full = [{"batch_number": 1, "turns": [[
        {"role": "user", "id": 0, "time_anchor": "March-15-2024", "content": "I moved to Berlin."},
        {"role": "assistant", "id": 1, "content": "Noted: Berlin."}],
        [{"role": "user", "id": 2, "content": "My dog is called Rex."},
         {"role": "assistant", "id": 3, "content": "Hello, Rex."}]]}]
    short = [{"batch_number": 1, "turns": full[0]["turns"][:1]}]
    roots = []
    for name, batches in (("full", full), ("short", short)):
        write_chat(tmp_path / name, "201", batches)
        roots.append(str(tmp_path / name / "chats" / "100K" / "201"))
    first, second, third = (loader.load_beam(db, root)[0] for root in (*roots, roots[0]))
    assert first.ok and second.ok and third.ok
    assert first.answering_revision == first.revision_id and not first.warnings
    assert second.answering_revision == second.revision_id != first.revision_id
    assert third.revision_id == first.revision_id and not third.new_revision
    assert third.answering_revision == second.revision_id
    assert [w for w in third.warnings if "a text loaded again does not supersede" in w] == [
        f"revision {first.revision_id}, this text, was loaded before revision "
        f"{second.revision_id}, a later text of the document, which recall answers from: a "
        "text loaded again does not supersede a later one (README, Conversations that grow)"]
    r = run_cli(db, "load-beam", roots[0], "--no-embed")
    assert r.returncode == 0 and "was loaded before revision" in r.stderr, r.stderr


def test_no_transaction_stays_open_while_the_model_encodes(db, connect, monkeypatch):
    """Encoding takes seconds a page (a 100K conversation: about 20 s); a transaction left
    open meanwhile holds the as_of horizon back, and a server's
    idle_in_transaction_session_timeout ends the load."""
    from donto_pg import api, embed
    from donto_pg.core import encoder

    api.add_conversation(db, [
        {"role": "user", "content": "Always answer me in French. I moved to Berlin."},
        {"role": "assistant", "content": "D'accord: Berlin."},
        {"role": "user", "content": "I prefer trains to planes."},
        {"role": "assistant", "content": "Noted."}], "chat:t/idle", embed=False)
    watcher, pid, states = connect(autocommit=True), db.info.backend_pid, []
    real = encoder.encode

    def observed(texts, *args, **kwargs):
        states.append(watcher.execute("select state from pg_stat_activity where pid = %s",
                                      (pid,)).fetchone()[0])
        return real(texts, *args, **kwargs)

    monkeypatch.setattr(encoder, "encode", observed)
    report = embed.embed_pending(db, context=db.execute(
        "select donto.recall_context_iri('chat:t/idle')").fetchone()[0], progress=False)
    assert report.embedded >= 1 and report.keys == 2 and report.standing >= 1
    assert len(states) >= 3 and set(states) == {"idle"}, states


def test_a_conversation_twice_in_a_rows_file_fails_its_second_row(db, tmp_path):
    """The second row would have superseded the first as a changed conversation."""
    rows = (EXAMPLES / "hf-sample" / "beam-100K-sample.jsonl").read_text().splitlines()
    changed = json.loads(rows[0])
    changed["chat"][0][0]["content"] = "I moved to Lima."
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join([rows[0], json.dumps(changed)]) + "\n")
    res = loader.load_beam(db, str(twice), scale="100K")
    (loaded,), (failed,) = [r for r in res if r.ok], [r for r in res if not r.ok]
    assert f"appears twice in the file (first at {twice} (line 1))" in failed.error
    assert db.execute("select count(*), min(strpos(body, 'Lima')) from donto.revision join "
                      "donto.document using (document_id) where iri = %s",
                      (f"beam:{loaded.conversation}",)).fetchone() == (1, 0)
