"""A turn dated before a turn before it in its session: kept, with one NOTICE per load
(donto.record_turns), whether the conversation is loaded whole (`add`, a BEAM load, a grown
text) or appended to; surfaced by the CLI as a warning and in --json."""

from __future__ import annotations

import json

import pytest

from donto_pg import api, loader
from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def chat(dates: list[str | None]) -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}",
             **({"timestamp": d} if d else {})} for i, d in enumerate(dates)]


# turns 2 to 9 go back in session 1 (before 2024-05-03, dated by turn 1; turn 3, undated,
# takes the date of the turn before it, 2024-05-02, as a load dates it)
BACK = chat(["2024-05-01", "2024-05-03", "2024-05-02", None, "2024-04-01", "2024-04-02",
             "2024-04-03", "2024-04-04", "2024-04-05", "2024-04-06"])


def heard(db) -> list[str]:
    notices: list[str] = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    return notices


def test_a_whole_conversation_with_turns_dated_back_is_noticed_once(db):
    notices = heard(db)
    rev = api.add_conversation(db, BACK, "chat:t/back", embed=False)
    assert notices == [
        f"donto.record_turns: revision {rev}: 8 turns dated before a turn before them in their "
        "session: turn ids 2, 3, 4, 5, 6 and 3 more (kept; what they say supersedes by the "
        "order of the conversation, not by date; dates are compared by day)"]
    # kept as given (turn 3, undated, takes the latest date before it: 2024-05-02)
    assert [str(d) for (d,) in db.execute(
        "select time_anchor from donto.turn where revision_id = %s order by seq", (rev,))][:5] \
        == ["2024-05-01", "2024-05-03", "2024-05-02", "2024-05-02", "2024-04-01"]
    db.commit()
    notices.clear()
    # in order, or in order within each session: nothing to say
    api.add_conversation(db, chat(["2024-05-01", "2024-05-01T09:00:00Z", "2024-05-02"]),
                         "chat:t/fine", embed=False)
    api.add_conversation(db, [{"role": "user", "content": "a", "timestamp": "2024-05-03"},
                              {"role": "user", "content": "b", "session": 2,
                               "timestamp": "2024-05-01"}], "chat:t/sessions", embed=False)
    assert notices == []


def test_a_grown_text_names_only_its_new_turns_and_append_is_noticed_the_same_way(db):
    notices = heard(db)
    first = chat(["2024-05-03", None, "2024-05-01"])
    res = loader.load_conversation(db, api.conversation(first, "t/grow"))  # beam:t/grow
    assert res.ok and len(notices) == 1 and "turn id 2 " in notices[0]
    assert res.warnings == notices  # the loader passes it on (load-beam prints its warnings)
    notices.clear()
    grown = first + [{"role": "assistant", "content": "fine"},
                     {"role": "user", "content": "late", "timestamp": "2024-05-02"}]
    res = loader.load_conversation(db, api.conversation(grown, "t/grow"))
    assert res.ok and res.appended
    # (turn 3, undated, takes 2024-05-01 from turn 2; turn 2 itself is not named again)
    assert notices == [f"donto.record_turns: revision {res.revision_id}: 2 turns dated before "
                       "a turn before them in their session: turn ids 3, 4 (kept; what they say "
                       "supersedes by the order of the conversation, not by date; dates are "
                       "compared by day)"]
    assert res.warnings == notices
    notices.clear()
    # an append: one notice, of the appended turns only
    rev = loader.append_turns(db, "beam:t/grow", [
        {"role": "user", "content": "x", "date": "2024-05-04"},
        {"role": "user", "content": "y", "date": "2024-04-30"},
        {"role": "user", "content": "z", "date": "2024-04-29"}])
    db.commit()
    assert notices == [f"donto.record_turns: revision {rev}: 2 turns dated before a turn before "
                       "them in their session: turn ids 6, 7 (kept; what they say supersedes by "
                       "the order of the conversation, not by date; dates are compared by day)"]
    notices.clear()
    # loading or appending the same again stores nothing, and says nothing
    again = loader.load_conversation(db, api.conversation(grown, "t/grow"))
    assert again.ok and not any("dated before" in w for w in again.warnings)
    assert loader.append_turns(db, "beam:t/grow", [
        {"role": "user", "content": "x", "date": "2024-05-04"},
        {"role": "user", "content": "y", "date": "2024-04-30"},
        {"role": "user", "content": "z", "date": "2024-04-29"}]) == rev
    db.commit()
    assert notices == []


def test_the_cli_add_warns_on_stderr_and_in_json(db, tmp_path):
    f = tmp_path / "back.json"
    f.write_text(json.dumps(BACK), encoding="utf-8")
    r = run_cli(db, "add", str(f), "-d", "chat:t/cli", "--no-embed")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("warning: donto.record_turns: revision ")
    assert "8 turns dated before a turn before them in their session: turn ids 2, 3, 4, 5, 6 " \
           "and 3 more" in lines[0]
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps(chat(["2024-05-01", "2024-05-02"])), encoding="utf-8")
    r = run_cli(db, "add", str(ok), "-d", "chat:t/cli-ok", "--no-embed", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == [] and "warning" not in r.stderr
    f2 = tmp_path / "back2.json"
    f2.write_text(json.dumps(BACK[:3]), encoding="utf-8")
    r = run_cli(db, "add", str(f2), "-d", "chat:t/cli-json", "--no-embed", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["warnings"] == [
        f"donto.record_turns: revision {data['revision_id']}: 1 turn dated before a turn before "
        "it in its session: turn id 2 (kept; what they say supersedes by the order of the "
        "conversation, not by date; dates are compared by day)"]


def test_an_empty_turn_table_is_recorded_without_a_notice(db):
    """A text registered without turns (a plain document) has an empty turn table, and so
    has a longer text of it: recording one failed in the dated-back check (a Python
    TypeError on a null table) instead of recording nothing."""
    notices = heard(db)
    rev = db.execute("select donto.register_revision('doc:t/plain', 'one line\n')").fetchone()[0]
    assert db.execute("select donto.record_turns(%s, '[]')", (rev,)).fetchone() == (0,)
    longer = db.execute("select donto.extend_revision('doc:t/plain', 'one line\ntwo lines\n', "
                        "'[]')").fetchone()[0]
    db.commit()
    assert longer != rev
    assert db.execute("select count(*) from donto.turn where revision_id in (%s, %s)",
                      (rev, longer)).fetchone() == (0,)
    assert not [n for n in notices if "dated before" in n]
