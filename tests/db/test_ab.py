"""The A/B gate (donto_pg.ab) and the session-summary arm (donto_pg.summaries) on a real server.

Fixtures are two conversations of the bundled BEAM 100K set cut down to a few turns of
two sessions (so the real embedding model embeds a few dozen texts): 100K/1 stays
code-heavy, 100K/13 dialogue-heavy; their probing questions keep the gold turns that
survive the cut.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import threading
import time

import psycopg
import pytest
from psycopg import errors

from donto_pg import ab, beam, extract, loader, summaries
from donto_pg.core.windows import recall_windows
from donto_pg.db import register_vector_if_present
from donto_pg.embed import embed_pending
from donto_pg.llm import Provider, ProviderPool
from donto_pg.server.ab import fixed_block_rows
from tests.conftest import EXAMPLES
from tests.fakellm import HIJACKED_TUTORIAL, FakeLLM, Reply

KEEP = {
    "1": set(range(0, 6)) | set(range(60, 64)),  # code-heavy: sessions 1 and 2
    "13": set(range(16, 28)) | set(range(70, 76)),  # dialogue-heavy: sessions 1 and 2
}
TWO_ARMS = ["fixed1200=fixed:window=1200", "semantic=semantic:"]


def truncated(cid: str) -> beam.Conversation:
    """Conversation 100K/CID with only the turns of KEEP[CID] and the gold that survives."""
    conv = next(beam.iter_beam(EXAMPLES / "chats" / "100K" / cid))
    msgs = [dataclasses.replace(m, seq=i)
            for i, m in enumerate(m for m in conv.messages if m.turn_id in KEEP[cid])]
    ids = {m.turn_id for m in msgs}
    questions = []
    for q in conv.questions:
        gold = [g for g in ([t for t in grp if t in ids] for grp in q.gold) if g]
        if gold or q.ability == "abstention":
            questions.append(dataclasses.replace(q, gold=gold))
    return dataclasses.replace(conv, messages=msgs, questions=questions)


def factory(db):
    info = db.info

    def make() -> psycopg.Connection:
        conn = psycopg.connect(host=info.host, port=info.port, user=info.user,
                               dbname=info.dbname)
        register_vector_if_present(conn)
        return conn

    return make


@pytest.fixture
def loaded(db) -> dict[str, int]:
    """Both cut conversations loaded (projection A cut, not embedded): {cid: revision}."""
    out = {}
    for cid in KEEP:
        res = loader.load_conversation(db, truncated(cid))
        assert res.ok, res.error
        out[cid] = res.revision_id
    return out


@pytest.fixture
def embedded(db, loaded) -> dict[str, int]:
    """As ``loaded``, with projection A embedded (the live recall baseline)."""
    embed_pending(db, None, progress=False)
    return loaded


def live_snapshot(db) -> dict[str, object]:
    """Everything live: projection A, the claims contexts, live projection B and runs."""
    q = {
        "live_statements": "select count(*), md5(coalesce(string_agg(s::text, '|' order by "
                           "s.statement_id), '')) from donto.statement as s join donto.context "
                           "as c using (context_id) where c.iri like 'ctx:memory/episodic/%' "
                           "or c.iri like 'ctx:claims/%'",
        "memory_records": "select count(*), md5(coalesce(string_agg(m::text, '|' order by "
                          "m.statement_id), '')) from donto.x_memory_record as m",
        "live_vectors": "select count(*), md5(coalesce(string_agg(e.statement_id || ':' || "
                        "e.embedding::text, '|' order by e.statement_id), '')) from "
                        "donto.embedding as e join donto.x_memory_record using (statement_id)",
        "live_projections": "select count(*), md5(coalesce(string_agg(p::text, '|' order by "
                            "p.projection_id), '')) from donto.projection as p "
                            "where p.strategy not like 'ab/%'",
        "live_blocks": "select count(*) from donto.extraction_block as b join donto.projection "
                       "as p using (projection_id) where p.strategy not like 'ab/%'",
        "live_claims": "select count(*), md5(coalesce(string_agg(x::text, '|' order by "
                       "x.statement_id), '')) from donto.x_claim as x join donto.extraction_run "
                       "as r using (run_id) where r.label not like 'ab/%'",
    }
    out = {k: db.execute(v).fetchone() for k, v in q.items()}
    db.commit()
    return out


def counts(db) -> dict[str, int]:
    tables = ["statement", "extraction_block", "extraction_response", "x_claim", "embedding",
              "ab_arm", "ab_unit", "ab_gate", "ab_baseline", "ab_result", "projection",
              "extraction_run"]
    out = {t: db.execute(f"select count(*) from donto.{t}").fetchone()[0] for t in tables}
    db.commit()
    return out


# --- pure Python ---------------------------------------------------------------------------

def test_parse_arm():
    a = ab.parse_arm("semantic3k=semantic:cap=3000,keep_exchange=false")
    assert (a.name, a.strategy, a.params) == ("semantic3k", "semantic",
                                              {"cap": 3000, "keep_exchange": False})
    assert ab.parse_arm("semantic=semantic:").params == {}
    assert ab.parse_arm("fixed1200=fixed:window=1200").params == {"window": 1200}
    for bad in ("semantic", "Big=semantic:", "x=chunky:", "x=fixed:window", "x=fixed:window=a"):
        with pytest.raises(ValueError):
            ab.parse_arm(bad)


def test_fixed_blocks_are_the_windows_with_content_parts_and_kinds():
    conv = truncated("1")
    body, spans = beam.format_chat(conv)
    turns = [dataclasses.asdict(s) | {"date": s.date.isoformat() if s.date else None}
             for s in spans]
    rows = fixed_block_rows(body, turns, 1200)
    windows = list(recall_windows(body, 1200))
    assert [(r[2], r[3]) for r in rows] == windows  # no header-only window here
    kinds = {r[1] for r in rows}
    assert {"dialogue", "code"} <= kinds
    for _seq, kind, start, end, parts_json, *_rest in rows:
        parts = json.loads(parts_json)
        assert parts and all(start <= p["char_start"] < p["char_end"] <= end for p in parts)
        text = "".join(body[p["char_start"]:p["char_end"]] for p in parts)
        assert "[user #" not in text and "=== session" not in text  # headers are metadata
        if kind == "dialogue":
            assert "```" not in text
    # a window holding only a session header is no unit
    head = "=== session 1 | 2024-01-01 ===\n\n"
    body = head + "[user #0] " + "x" * 30 + "\n"
    start = len(head) + len("[user #0] ")
    t = [{"seq": 0, "turn_id": 0, "role": "user", "session": 1, "date": None,
          "header_start": len(head), "char_start": start, "char_end": start + 30}]
    windows = list(recall_windows(body, 33))
    assert body[slice(*windows[0])] == head
    assert [r[2:4] for r in fixed_block_rows(body, t, 33)] == windows[1:]


def test_extractive_summary_is_deterministic_and_verbatim():
    conv = truncated("13")
    body, spans = beam.format_chat(conv)
    turns = [dataclasses.asdict(s) for s in spans if s.session == spans[0].session]
    a, meta = summaries.extractive_summary(body, turns, 600, "Session 1: ")
    b, _ = summaries.extractive_summary(body, turns, 600, "Session 1: ")
    assert a == b and a.startswith("Session 1: ") and len(a) <= 600
    for s, e in meta["sentences"]:
        assert body[s:e].strip() in a


# --- the holdout ---------------------------------------------------------------------------

def test_holdout_spans_the_bimodality_and_says_why(db, loaded):
    chosen, warnings = ab.pick_holdout(db)
    assert [c["conversation"] for c in chosen] == ["100K/1", "100K/13"] and not warnings
    code, dialogue = chosen
    assert code["stratum"] == "code-heavy" and code["code_share"] >= ab.CODE_HEAVY
    assert dialogue["stratum"] == "dialogue-heavy" and dialogue["code_share"] <= 0.05
    assert "highest of 2" in code["reason"] and "lowest of 2" in dialogue["reason"]
    assert code["gold_questions"] == 4 and "gold turns" in code["gold"]
    given, warnings = ab.pick_holdout(db, ["100K/13"])
    assert given[0]["reason"].startswith("given; dialogue-heavy")
    assert any("no code-heavy" in w for w in warnings)
    with pytest.raises(ValueError, match="not loaded"):
        ab.pick_holdout(db, ["100K/99"])


# --- verdict logic in SQL ------------------------------------------------------------------

@pytest.mark.parametrize("recall, base, inj, anchor, hyp, zero, verdict", [
    (0.80, 0.75, 0.00, 0.70, 0.10, 0.10, "commit"),
    (0.75, 0.75, 0.02, 0.55, 0.90, 0.50, "commit"),          # every bound inclusive
    (0.80, 0.75, 0.05, 0.70, 0.10, 0.10, "re-chunk"),        # injection: the boundary
    (0.80, 0.75, 0.00, 0.45, 0.10, 0.60, "re-chunk"),        # zero-fact rate
    (0.80, 0.75, 0.00, 0.70, 0.10, 0.60, "commit"),          # ...which alone blocks nothing
    (None, 0.75, 0.50, 0.10, 0.90, 0.10, "re-chunk"),        # rejected early for injection
    (0.80, 0.75, 0.00, 0.45, 0.70, 0.10, "re-prompt"),       # anchors low, hypotheses high
    (0.70, 0.75, 0.00, 0.45, 0.70, 0.10, "reject"),          # ...but recall below baseline
    (0.80, 0.75, 0.00, 0.45, 0.20, 0.10, "reject"),          # anchors low, hypotheses low
    (0.70, 0.75, 0.00, 0.70, 0.10, 0.10, "reject"),          # recall below baseline
    (None, 0.75, 0.00, 0.30, 0.90, 0.10, "reject"),          # rejected early for anchors
    (0.80, 0.75, 0.00, None, 0.90, 0.10, "reject"),          # no dialogue with facts
])
def test_ab_decide(db, recall, base, inj, anchor, hyp, zero, verdict):
    got, reasons = db.execute("select verdict, reasons from donto.ab_decide(%s, %s, %s, %s, "
                              "%s, %s)", (recall, base, inj, anchor, hyp, zero)).fetchone()
    assert got == verdict, reasons
    assert len(reasons) == 5 and any("injection rate" in r for r in reasons)
    if recall is None:
        assert reasons[0] == "no recall pass (rejected before it)"


def test_ab_decide_thresholds_are_parameters(db):
    args = (0.8, 0.75, 0.03, 0.5, 0.1, 0.1)
    assert db.execute("select verdict from donto.ab_decide(%s, %s, %s, %s, %s, %s)",
                      args).fetchone()[0] == "re-chunk"
    assert db.execute("select verdict from donto.ab_decide(%s, %s, %s, %s, %s, %s, "
                      "max_injection => 0.05, min_anchor => 0.45)", args).fetchone()[0] == \
        "commit"


def test_a_gate_without_gold_questions_commits_nothing(db, loaded):
    """Found by review: a holdout of conversations without probing questions measured
    recall 0.0 >= baseline 0.0 and the arm committed."""
    from donto_pg import api

    for n in (1, 2):
        api.add_conversation(db, [{"role": "user", "content": f"Chat {n}: I like tea."},
                                  {"role": "assistant", "content": "Noted."}],
                             f"chat:ab/{n}", embed=False)
    db.commit()
    with pytest.raises(ValueError, match="no probing question with gold turns"):
        ab.pick_holdout(db, ["chat:ab/1", "chat:ab/2"])
    assert ab.pick_holdout(db, ["chat:ab/1", "100K/13"])[0]  # one with questions is enough
    # a gate recorded anyway (by an earlier version, or by hand): no evidence, no commit
    db.execute("select donto.ab_register_arm('tiny', 'fixed', '{\"window\": 600}')")
    model = db.execute("select donto.ensure_embedding_model('m', 'm', 3)").fetchone()[0]
    gate = db.execute("select donto.ab_record_gate('g0', array[%s, %s]::bigint[], '[]', 10, "
                      "%s, 'hybrid', 0)", (*sorted(loaded.values())[:2], model)
                      ).fetchone()[0]
    db.execute("select donto.ab_record_baseline(%s, '{\"hit\": 0, \"n\": 0}')", (gate,))
    good = {"injection_rate": 0, "median_anchor_rate": 0.9, "hypothesis_rate": 0,
            "zero_fact_rate": 0}
    run = db.execute("select run_id from donto.start_extraction_run(%s, '{}', null, 'tiny')",
                     (json.dumps([{"name": "baseline", "model": "m"}]),)).fetchone()[0]
    db.execute("select donto.ab_record_result('r0', %s, 'tiny', %s, 'measured', 4, %s, null, "
               "'{\"hit\": 0, \"n\": 0}')", (gate, run, json.dumps(good)))
    verdict, reasons = db.execute("select verdict, reasons from donto.ab_verdict('tiny', %s)",
                                  (gate,)).fetchone()
    assert verdict == "reject" and reasons[0].startswith("no gold question in the holdout")
    db.rollback()


def test_arm_names_are_bound_to_their_parameters(db):
    a = db.execute("select donto.ab_register_arm('s3', 'semantic', '{\"cap\": 3000}')").fetchone()
    assert db.execute("select donto.ab_register_arm('s3', 'semantic', "
                      "'{\"cap\": 3000, \"target\": 2000}')").fetchone() == a  # defaults filled
    with pytest.raises(errors.UniqueViolation, match="already means"):
        db.execute("select donto.ab_register_arm('s3', 'semantic', '{\"cap\": 2500}')")
    db.rollback()
    for sql in ("select donto.ab_register_arm('f', 'fixed', '{\"size\": 5}')",
                "select donto.ab_register_arm('f', 'fixed', '{\"window\": 0}')",
                "select donto.ab_register_arm('chunkqual', 'fixed', '{}')",
                "select donto.ab_register_arm('f', 'sliding', '{}')"):
        with pytest.raises(errors.InvalidParameterValue):
            db.execute(sql)
        db.rollback()


# --- a whole run -----------------------------------------------------------------------------

@pytest.mark.slow
def test_ab_run_isolated_measured_judged_and_idempotent(db, embedded):
    # a live extraction exists before the A/B run (its claims must stay as they are)
    live = extract.run_extraction(factory(db), conversations=["100K/1"], alarm_after=0,
                                  limit=5)
    assert live.progress.done == 5
    pending_live = db.execute("select count(*) from donto.pending_extraction_blocks(%s)",
                              (live.run_id,)).fetchone()[0]
    db.commit()
    before = live_snapshot(db)
    events = []
    report = ab.run_ab(factory(db), arms=TWO_ARMS, alarm_after=10, on_event=events.append)

    # holdout: picked automatically, both strata, reasons
    assert [c["conversation"] for c in report["holdout"]] == ["100K/1", "100K/13"]
    assert report["baseline_extractor"] and report["questions"] == 8
    # live memory untouched; the live run sees none of the arms' blocks
    assert live_snapshot(db) == before
    assert db.execute("select count(*) from donto.pending_extraction_blocks(%s)",
                      (live.run_id,)).fetchone()[0] == pending_live
    hits = db.execute("select distinct s.predicate from donto.recall('code', k => 50) as r "
                      "join donto.statement as s using (statement_id)").fetchall()
    assert hits == [("mem:episodic/chunk",)]
    ctxs = {r[0] for r in db.execute(
        "select distinct c.iri from donto.statement as s join donto.context as c "
        "using (context_id) where s.predicate = 'mem:measure/unit'")}
    assert ctxs == {f"ctx:measure/{a}/beam/100K/{c}" for a in ("fixed1200", "semantic",
                                                                 "projection-a")
                    for c in ("1", "13")}
    db.commit()

    by = {a["arm"]: a for a in report["arms"]}
    fixed, sem = by["fixed1200"], by["semantic"]
    for a in (fixed, sem):
        assert a["stage"] == "measured" and a["recall"]["n"] == 8
        assert a["verdict"] in ("commit", "re-prompt", "re-chunk", "reject")
        q = a["quality"]
        assert q["blocks"] == q["units"] == a["units"] > 0
        assert set(q["by_revision"]) == {str(r) for r in report["revisions"]}
        for m in ("facts_per_chunk", "median_anchor_rate", "hypothesis_rate", "injection_rate"):
            assert m in q
        # the verdict shown is the one SQL computes
        v = db.execute("select verdict, recall_hit, baseline_hit from donto.ab_verdict(%s)",
                       (a["arm"],)).fetchone()
        assert v == (a["verdict"], a["recall_hit"], report["baseline"]["hit"])
    # fixed windows are projection A's spans: same vectors (reused, none embedded), and
    # ranked as the baseline, question by question
    assert fixed["recall"]["embedded"] == 0 and fixed["recall"]["reused_vectors"] == \
        fixed["units"]
    assert fixed["recall_hit"] == report["baseline"]["hit"]
    stored = db.execute("select r.recall -> 'first_hit', b.measure -> 'first_hit' "
                        "from donto.ab_result r join donto.ab_arm a using (arm_id) "
                        "join donto.ab_baseline b using (gate_id) where a.name = 'fixed1200'"
                        ).fetchone()
    assert stored[0] == stored[1]
    prod = report["baseline"]["production"]  # donto.recall as deployed, for reference
    if importlib.util.find_spec("donto_pg.evaluate") is not None:
        assert prod["n"] == 8 and 0 <= prod["hit"] <= 1
    assert sem["recall"]["embedded"] > 0
    rows = db.execute("select arm, verdict, stage from donto.ab_report order by arm").fetchall()
    assert rows == [("fixed1200", fixed["verdict"], "measured"),
                    ("semantic", sem["verdict"], "measured")]
    db.commit()
    assert {e["event"] for e in events} >= {"holdout", "arm", "extract", "progress",
                                             "baseline-hit", "recall", "embedded", "verdict"}

    # the same run again reuses everything: no block, claim, vector or result is added
    n = counts(db)
    again = ab.run_ab(factory(db), arms=TWO_ARMS, alarm_after=10)
    assert counts(db) == n | {"extraction_run": n["extraction_run"]}
    assert all(a["reused"] and a["extracted_now"] == 0 for a in again["arms"])
    assert [(a["arm"], a["verdict"], a["recall_hit"]) for a in again["arms"]] == \
        [(a["arm"], a["verdict"], a["recall_hit"]) for a in report["arms"]]
    assert again["baseline_reused"] and again["gate_id"] == report["gate_id"]
    assert live_snapshot(db) == before
    # I3 holds for the new tables too
    for table in ("ab_result", "ab_unit", "ab_baseline"):
        with pytest.raises(psycopg.Error, match="invariant I3") as exc:
            db.execute(f"delete from donto.{table}")
        assert exc.value.sqlstate == "DI003"
        db.rollback()


def test_a_doomed_arm_stops_early_without_a_recall_pass(db, loaded, connect):
    with FakeLLM(HIJACKED_TUTORIAL) as fake:
        pool = ProviderPool([Provider(name="fake0", base_url=fake.base_url, model="fake-model",
                                      timeout=20)], backoff_base=0.01, backoff_max=0.05)
        report = ab.run_ab(factory(db), arms=["doomed=semantic:cap=1500"], providers=pool,
                           concurrency=1, alarm_after=3)
        calls = len(fake.requests)
        (arm,) = report["arms"]
        assert arm["stage"] == "rejected" and arm["stopped"] == "alarm"
        assert "injection rate" in arm["stop_reason"] and "above 0.02" in arm["stop_reason"]
        assert 3 <= arm["quality"]["blocks"] < arm["units"]
        assert arm["recall"] is None and arm["verdict"] == "re-chunk"
        assert report["baseline"] is None  # no recall pass spent, not even the baseline
        assert db.execute("select count(*) from donto.embedding").fetchone()[0] == 0
        assert db.execute("select count(*) from donto.ab_baseline").fetchone()[0] == 0
        # re-running the doomed arm stops at once, calls nobody and adds no result
        n = counts(db)
        again = ab.run_ab(factory(db), arms=["doomed=semantic:cap=1500"], providers=pool,
                          alarm_after=3)
        assert len(fake.requests) == calls and again["arms"][0]["reused"]
        assert counts(db)["ab_result"] == n["ab_result"]
    assert "not measured" in ab.format_ab(report)
    assert "re-chunk" in ab.format_ab(report)
    db.commit()
    # the reader (the dashboard) sees the verdict; writing is for the writer
    reader = connect("donto_reader")
    assert reader.execute("select arm, verdict, stage from donto.ab_report").fetchall() == \
        [("doomed", "re-chunk", "rejected")]
    reader.rollback()
    with pytest.raises(errors.InsufficientPrivilege):
        reader.execute("select donto.ab_project_arm('doomed', %s)", (loaded["1"],))
    reader.rollback()


MADE_UP = json.dumps([{"subject": "user", "predicate": "owns", "object": "a yacht",
                       "quote": "I own a yacht called Seahorse", "turn": None,
                       "hypothesis": False}])


def test_an_arm_rejected_for_anchors_after_extraction(db, loaded):
    made_up = MADE_UP
    with FakeLLM(made_up) as fake:
        pool = ProviderPool([Provider(name="fake0", base_url=fake.base_url, model="fake-model",
                                      timeout=20)])
        report = ab.run_ab(factory(db), arms=["unanchored=semantic:"], providers=pool,
                           alarm_after=0)
    (arm,) = report["arms"]
    assert arm["stage"] == "rejected" and arm["stopped"] is None
    # invented quotes: unanchored, and (most quotes not anchoring) injection as well
    assert arm["stop_reason"].startswith("rejected before the recall pass: ")
    assert "median anchor rate 0.0000 < 0.4" in arm["stop_reason"]
    assert arm["quality"]["blocks"] == arm["units"] and arm["recall"] is None
    # most quotes not anchoring is injection now (issue 10): the gate's rule says re-chunk
    assert arm["verdict"] == "re-chunk"


# --- the session-summary arm -----------------------------------------------------------------

@pytest.mark.slow
def test_summary_arm_extractive_labelled_and_hits_counted_by_session(db, loaded):
    rep = summaries.summarize_sessions(db)
    assert rep["summarizer"] == "extractive-v1" and rep["made"] == {"extractive": 4}
    assert rep["embedded"] == 4
    rows = db.execute(
        "select x.revision_id, x.session, x.method, x.char_start, x.char_end, c.iri, "
        "s.object_lit ->> 'method', s.object_lit ->> 'v', sp.char_start, sp.char_end "
        "from donto.x_session_summary as x join donto.statement as s using (statement_id) "
        "join donto.context as c using (context_id) join donto.session_span as sp "
        "on sp.revision_id = x.revision_id and sp.session = x.session order by 1, 2").fetchall()
    assert len(rows) == 4
    for _rev, session, method, s, e, iri, label, text, ss, se in rows:
        assert method == label == "extractive" and iri.startswith("ctx:memory/summary/beam/")
        assert (s, e) == (ss, se) and text.startswith(f"Session {session}")
    # idempotent, and never part of donto.recall
    assert summaries.summarize_sessions(db)["already"] == 4
    assert db.execute("select count(*) from donto.x_session_summary").fetchone()[0] == 4
    # every question has gold in one of 2 sessions: hit@2 is certain, hit@1 is what the
    # summary ranked first, counted against the sessions of the gold turns
    report = summaries.eval_summaries(db, ks=(1, 2))
    assert report["evaluated"] == 8 and report["overall"]["summary_hit@2"] == 1.0
    for q in report["questions"]:
        assert q["methods"] == ["extractive"] and q["sessions"] == 2
        top = db.execute(
            "select session from donto.recall_summaries(%s, k => 1, context => %s)",
            (db.execute("select question from donto.probe_question where question_id = %s",
                        (q["question_id"],)).fetchone()[0],
             f"ctx:memory/episodic/beam/{q['conversation']}")).fetchone()[0]
        gold = {r[0] for r in db.execute(
            "select t.session from donto.question_gold_span g join donto.turn t "
            "on t.revision_id = g.revision_id and t.seq = g.seq where g.question_id = %s",
            (q["question_id"],))}
        assert q["summary_hit@1"] == (1.0 if top in gold else 0.0)
    db.rollback()
    # next to chunk hits, never merged: rescued = chunk missed and summary hit
    fake_chunks = {"questions": [{"question_id": q["question_id"],
                                  "arms": {"hybrid": {"hit@10": 0.0}}}
                                 for q in report["questions"]]}
    both = summaries.eval_summaries(db, ks=(1,), chunk_report=fake_chunks)
    assert both["overall"]["chunk_hit@10"] == 0.0
    assert both["overall"]["rescued@1"] == sum(q["summary_hit@1"] for q in both["questions"])
    assert "summary hits" in summaries.format_summary_eval(both)


def test_a_second_gate_on_an_arm_waits_for_the_blocks_another_session_holds(db, loaded):
    """Left by the last stop: a second `donto-pg ab` on an arm whose blocks another session
    was extracting recorded the arm 'incomplete' (it skipped the held blocks, rightly, and
    then judged the arm on fewer blocks than it has). Now it waits for that session to answer
    them, then judges the whole arm: two real gates, the first holding one block (its
    provider call held open) while the second does every other block."""
    release, first_call = threading.Event(), threading.Event()
    lock = threading.Lock()
    prompts: list[str] = []

    def answer(prompt: str) -> Reply:
        with lock:
            prompts.append(prompt)
            first = len(prompts) == 1
        if first:  # the first gate's first block: held until the second gate waits
            first_call.set()
            release.wait(60)
        return Reply(content=MADE_UP)

    reports: dict[str, dict] = {}
    seen: dict[str, list] = {"a": [], "b": []}
    failures: list[BaseException] = []
    with FakeLLM(answer) as fake:
        pool = ProviderPool([Provider(name="fake0", base_url=fake.base_url, model="fake-model",
                                      timeout=90)], backoff_base=0.01, backoff_max=0.05)

        def gate(name: str) -> None:
            try:
                reports[name] = ab.run_ab(factory(db), arms=["unanchored=semantic:"],
                                          providers=pool, concurrency=1, alarm_after=0,
                                          on_event=seen[name].append)
            except BaseException as exc:  # noqa: BLE001 - reported below
                failures.append(exc)

        first = threading.Thread(target=gate, args=("a",))
        first.start()
        assert first_call.wait(60)
        second = threading.Thread(target=gate, args=("b",))
        second.start()
        deadline = time.monotonic() + 90
        while not any(e["event"] == "waiting" for e in seen["b"]):
            assert second.is_alive(), reports.get("b", failures)  # it must not end yet
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(2 * ab.WAIT_POLL_S)
        assert second.is_alive() and "b" not in reports  # still waiting for the held block
        release.set()
        first.join(120)
        second.join(120)
    assert not failures, failures
    waiting = next(e for e in seen["b"] if e["event"] == "waiting")
    assert waiting["blocks"] == 1 and len(waiting["held_by"]) == 1
    for name in ("a", "b"):
        (arm,) = reports[name]["arms"]
        assert arm["stage"] == "rejected", (name, arm["stop_reason"])
        assert arm["quality"]["blocks"] == arm["units"]
    assert len(prompts) == reports["a"]["arms"][0]["units"]  # every block asked for once


def test_abstractive_summaries_and_their_labelled_fallback(db, loaded):
    def answer(prompt: str) -> str:
        if '"turn": 0,' in prompt:
            return HIJACKED_TUTORIAL
        return '```json\n{"summary": "The user talks about the project."}\n```'

    with FakeLLM(answer) as fake:
        pool = ProviderPool([Provider(name="fake0", base_url=fake.base_url, model="fake-model",
                                      timeout=20)], max_retries=0)
        rep = summaries.summarize_sessions(db, providers=pool, embed=False)
        prompts = [r.prompt for r in fake.requests]
    assert rep["summarizer"] == "llm:fake-model" and rep["made"] == {"abstractive": 3,
                                                                     "extractive": 1}
    assert len(rep["fallbacks"]) == 1 and "unusable" in rep["fallbacks"][0]
    assert all(p.rstrip().endswith("Now output the JSON object.") for p in prompts)
    rows = dict(db.execute("select x.method, s.object_lit from donto.x_session_summary x "
                           "join donto.statement s using (statement_id) "
                           "where x.session = 1 and x.revision_id = %s", (loaded["1"],)))
    assert rows["extractive"]["meta"]["fallback"].startswith("abstractive summary unusable")
    text = db.execute("select s.object_lit ->> 'v' from donto.x_session_summary x join "
                      "donto.statement s using (statement_id) where x.method = 'abstractive' "
                      "limit 1").fetchone()[0]
    assert text.endswith("The user talks about the project.")
