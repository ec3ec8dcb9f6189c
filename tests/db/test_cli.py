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
