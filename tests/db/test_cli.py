"""CLI commands end to end (the parts that need no embedding model)."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLES, run_cli, small_chat, write_chat


def test_eval_recall_lexical_json_and_plot(db, tmp_path):
    db.commit()
    png = tmp_path / "hit.png"
    r = run_cli(db, "eval", "recall", str(EXAMPLES / "chats" / "100K" / "13"), "--arms",
                "lexical", "--k", "1", "--k", "10", "--json", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["ks"] == [1, 10]
    assert "abstention" not in report["by_ability"]
    overall = report["overall"]["lexical"]
    assert 0 <= overall["hit@1"] <= overall["hit@10"] <= 1
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_eval_recall_names_a_missing_path(db):
    r = run_cli(db, "eval", "recall", "/nonexistent/beam", "--arms", "lexical")
    assert r.returncode == 1
    assert "no such file or directory" in r.stderr


def test_project_extraction_and_extract_json(db, tmp_path):
    write_chat(tmp_path, "1", small_chat())
    db.commit()
    assert run_cli(db, "load-beam", str(tmp_path), "--no-embed").returncode == 0
    r = run_cli(db, "project-extraction", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["blocks"] >= 1
    r = run_cli(db, "extract", "--provider", "baseline", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["is_baseline"] is True and rep["ok"] is True and rep["pending_after"] == 0
    r = run_cli(db, "extract", "--params", "not json")
    assert r.returncode == 1 and "--params is not valid JSON" in r.stderr


def test_load_beam_embeds_the_conversations_it_loads_only(db, tmp_path):
    """Other work left unembedded in the database stays unembedded (and uncounted): the
    user asked to load conversation 1, not to embed everything pending."""
    note = tmp_path / "pending.txt"
    note.write_text("The office moved to Lisbon in 2023.\n", encoding="utf-8")
    db.commit()
    r = run_cli(db, "add", str(note), "--text", "-d", "doc:pending", "--no-embed")
    assert r.returncode == 0, r.stderr
    write_chat(tmp_path, "1", small_chat())
    r = run_cli(db, "load-beam", str(tmp_path / "chats"), "-c", "1", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    vectors = dict(db.execute(
        "select d.iri, count(e.statement_id) from donto.document d "
        "join donto.statement s on s.document_id = d.document_id "
        "and s.predicate = 'mem:episodic/chunk' "
        "left join donto.embedding e on e.statement_id = s.statement_id group by 1").fetchall())
    db.commit()
    assert vectors == {"doc:pending": 0, "beam:100K/1": 1}
    assert summary["embedded"] == 1
    # recall names the blind spot of the vector arm, and an unknown conversation
    r = run_cli(db, "recall", "Lisbon office", "-c", "doc:pending", "-k", "1")
    assert r.returncode == 0, r.stderr
    assert "1 of 1 chunks of ctx:memory/episodic/doc/pending have no vector" in r.stderr
    assert "lex 1" in r.stdout and "vec -" in r.stdout
    r = run_cli(db, "recall", "Berlin", "-c", "1")
    assert r.returncode == 1 and "no context ctx:memory/episodic/beam/1" in r.stderr
    assert "fix: name a loaded conversation: -c 100K/13" in r.stderr
    # and the standing block's: an instruction added without vectors
    chat = tmp_path / "bob.json"
    chat.write_text(json.dumps([{"role": "user", "content": "Always answer me in French."},
                                {"role": "assistant", "content": "D'accord."}]))
    assert run_cli(db, "add", str(chat), "-d", "chat:bob/1", "--no-embed").returncode == 0
    r = run_cli(db, "recall", "French", "-c", "chat:bob/1")
    assert r.returncode == 0, r.stderr
    assert "1 standing statement in force has no vector yet" in r.stderr


def test_load_beam_on_a_chat_log_points_at_add(db, tmp_path):
    """Once, before anything is loaded (a 500-message log printed 1,001 lines)."""
    logs = {"list.json": [{"role": "user", "content": f"hi {i}"} for i in range(500)],
            "object.json": {"messages": [{"role": "user", "content": "hi"}]}}
    db.commit()
    for name, data in logs.items():
        (tmp_path / name).write_text(json.dumps(data, indent=2))
        r = run_cli(db, "load-beam", str(tmp_path / name), "--no-embed")
        assert r.returncode == 1, r.stderr
        assert "a chat log of {role, content} messages, not BEAM data" in r.stderr
        assert "`donto-pg add FILE`" in r.stderr and len(r.stderr.splitlines()) == 2


def test_a_projection_error_in_the_servers_python_is_a_clean_22023(db, tmp_path):
    note = tmp_path / "plain.txt"
    note.write_text("Just notes.\n", encoding="utf-8")
    db.commit()
    assert run_cli(db, "add", str(note), "--text", "-d", "doc:plain", "--no-embed"
                   ).returncode == 0
    rev = db.execute("select max(revision_id) from donto.revision").fetchone()[0]
    db.commit()
    r = run_cli(db, "project-extraction", "-r", str(rev))
    assert r.returncode == 1
    assert f"(22023): donto.project_extraction: revision {rev} has no turn table" in r.stderr
    assert "plpy" not in r.stderr and "XX000" not in r.stderr
