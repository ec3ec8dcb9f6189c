"""`donto-pg demo` end to end on a small conversation (the real model, few chunks)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT, small_chat, write_chat


def test_demo_runs_every_step(db, tmp_path):
    chat = small_chat()
    chat[0]["turns"].append([
        {"role": "user", "id": 2, "content": "My sister Ana lives in Porto.",
         "question_type": "main_question"},
        {"role": "assistant", "id": 3, "content": "Porto is lovely."}])
    questions = {"information_extraction": [
        {"question": "Where did I move?", "answer": "Berlin", "source_chat_ids": [0]}]}
    conv = write_chat(tmp_path, "1", chat, questions)
    db.commit()
    info = db.info
    # (the test cluster lets this role in by peer: the password is only there to be hidden)
    dsn = (f"host={info.host} port={info.port} user={info.user} dbname={info.dbname} "
           "password=sekret-demo-1")
    r = subprocess.run([sys.executable, "-m", "donto_pg", "demo", str(conv), "--dsn", dsn],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "sekret-demo-1" not in out + r.stderr  # the DSN it prints has no password
    assert f"dbname={info.dbname}" in out
    assert "(the same: idempotent)" in out
    assert "refused: donto invariant I3" in out
    assert "[information_extraction] Where did I move?" in out
    assert " HIT " in out.split("[information_extraction]")[1]
    assert "from donto.recall('Where did I move?'" in out
    assert "the only path to a prompt" in out
    assert "offline rule-based baseline extractor" in out
    assert "returns the same text: yes" in out
    sha = db.execute("select encode(sha256, 'hex') from donto.revision").fetchone()[0]
    assert sha in out
    chunks, vectors = db.execute("select (select count(*) from donto.x_memory_record), "
                                 "(select count(*) from donto.embedding)").fetchone()
    assert vectors == chunks >= 1
