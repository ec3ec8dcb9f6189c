"""What the bookkeeping around extraction and forgetting costs on a BEAM-10M-sized document:
the pending list, a block's lease, the extract CLI's progress and report queries, retracting
recall chunks by hand (donto._forget_in over every revision), an append after a forgetting
(the statement trigger donto._forget_new_statements), and recall; each beside a twin
document that nothing was forgotten in (the ratio).

    nice -n 19 .venv/bin/python benchmarks/forget_scale.py [--copies 8] [--appends 3]
        [--forget 50] [--json] [--keep]

In one scratch database (no embedding): BEAM 10M/5 (plans 0-1 of the BEAM data beside the
checkout) and a synthesized conversation, COPIES 500K conversations (13, 14, ...) one after
another (ids, sessions and exchanges renumbered), its last two conversations' messages
appended in APPENDS steps (donto.append_turns: several revisions). Each is loaded under two
IRIs ("with", "plain") and cut into extraction blocks (projection B of its first revision,
copied and re-cut by every append). Under "with", one recall chunk is retracted by hand
(timed), then FORGET - 1 more spread over the text (timed each). Then, for each document and
twin, with one extraction run: donto.pending_extraction_blocks over every revision of the
document; donto.take_extraction_block (and release) per call; the report's queries
(extraction_run_stats, the pending list again, extraction_block_holder of every block left)
and `extract` itself on 20 blocks against a real local HTTP provider (tests/fakellm.py); an
append of 40 messages (the trigger's cost per inserted statement); lexical recall.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import SHARED_BEAM, machine, scratch_database  # noqa: E402

from donto_pg import beam, extract, loader  # noqa: E402
from donto_pg.llm import Provider, ProviderPool  # noqa: E402
from tests.fakellm import FakeLLM  # noqa: E402

QUERIES = ["what did I say about my budget", "which database did we choose",
           "when is the deadline for the project", "my sister's birthday plans",
           "how do I configure the server"]


def _concatenated(root: Path, copies: int) -> tuple[beam.Conversation, list[int]]:
    """500K conversations 13, 14, ... (COPIES of them) as one: turn ids, sessions and
    exchanges continue where the previous conversation's ended. Also each one's length."""
    messages: list[beam.Message] = []
    sizes = []
    for k in range(copies):
        conv = next(beam.iter_beam(root / "chats" / "500K" / str(13 + k)))
        seq0 = len(messages)
        tid0 = 1 + max((m.turn_id for m in messages), default=-1)
        ses0 = max((m.session for m in messages), default=0)
        exc0 = 1 + max((m.exchange for m in messages), default=-1)
        for m in conv.messages:
            messages.append(dataclasses.replace(
                m, seq=seq0 + m.seq, turn_id=tid0 + m.turn_id, session=ses0 + m.session,
                exchange=exc0 + m.exchange))
        sizes.append(len(conv.messages))
    return beam.Conversation(conversation_id=f"500K-x{copies}", scale="synth",
                             messages=messages, questions=[]), sizes


def _as_turns(messages: list[beam.Message], sessions: bool = True) -> list[dict[str, object]]:
    """Rows for donto.append_turns (SESSIONS false: in the conversation's last session)."""
    return [{"role": m.role, "content": m.content, "turn_id": m.turn_id,
             **({"session": m.session, "date": m.date.isoformat() if m.date else None}
                if sessions else {})}
            for m in messages]


def _ms(conn: psycopg.Connection, sql: str, args: tuple = (), repeat: int = 3) -> float:
    """Median milliseconds of SQL (its rows fetched), each in its own transaction."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        conn.execute(sql, args).fetchall()
        times.append((time.perf_counter() - t) * 1000)
        conn.commit()
    return round(statistics.median(times), 1)


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, round((time.perf_counter() - t) * 1000, 1)


def _revisions(conn: psycopg.Connection, iri: str) -> list[int]:
    return [r for (r,) in conn.execute(
        "select r.revision_id from donto.revision as r join donto.document as d "
        "using (document_id) where d.iri = %s order by r.revision_id", (iri,))]


def _build(conn: psycopg.Connection, name: str, conv: beam.Conversation, later: list,
           appends: int) -> dict[str, object]:
    """Load CONV under two IRIs, cut blocks, append LATER in APPENDS steps."""
    out: dict[str, object] = {}
    for twin in ("with", "plain"):
        iri = f"bench:scale/{name}/{twin}"
        (_, load_ms) = _timed(lambda iri=iri: loader.record_conversation(conn, conv, iri, {}))
        conn.commit()
        rev = _revisions(conn, iri)[0]
        conn.execute("select donto.project_extraction(%s)", (rev,))
        conn.commit()
        step = -(-len(later) // appends) if later else 0
        for i in range(appends if later else 0):
            part = later[i * step:(i + 1) * step]
            if part:
                loader.append_turns(conn, iri, _as_turns(part))
                conn.commit()
        out[f"load_ms_{twin}"] = load_ms
    iri = f"bench:scale/{name}/with"
    revs = _revisions(conn, iri)
    out["revisions"] = len(revs)
    out["chars"] = conn.execute("select length(body) from donto.revision where revision_id = %s",
                                (revs[-1],)).fetchone()[0]
    out["chunks"] = conn.execute("select count(*) from donto.revision_chunks(%s)",
                                 (revs[-1],)).fetchone()[0]
    out["blocks_latest"] = conn.execute(
        "select count(*) from donto.extraction_block as b join donto.projection as p "
        "using (projection_id) where p.revision_id = %s and p.kind = 'extraction'",
        (revs[-1],)).fetchone()[0]
    out["blocks_all"] = conn.execute(
        "select count(*) from donto.extraction_block as b where b.revision_id = any(%s)",
        (revs,)).fetchone()[0]
    conn.commit()
    return out


def _forget(conn: psycopg.Connection, iri: str, forget: int) -> dict[str, object]:
    """Retract FORGET chunks of the latest revision spread over its text, by hand."""
    latest = _revisions(conn, iri)[-1]
    chunks = [sid for (sid,) in conn.execute(
        "select c.statement_id from donto.revision_chunks(%s) as c order by c.char_start",
        (latest,))]
    conn.commit()
    step = max(1, len(chunks) // forget)
    picked = chunks[step // 2::step][:forget]
    times = []
    for sid in picked:
        t = time.perf_counter()
        conn.execute("select donto.retract(%s, 'forget this')", (sid,))
        conn.commit()
        times.append((time.perf_counter() - t) * 1000)
    carried = conn.execute(
        "select count(*) from donto.retraction where reason like 'carried over from%%'"
    ).fetchone()[0]
    conn.commit()
    return {"first_ms": round(times[0], 1),
            "median_ms": round(statistics.median(times), 1),
            "total_s": round(sum(times) / 1000, 2), "chunks": len(picked), "carried": carried}


def _factory(url: str) -> Callable[[], psycopg.Connection]:
    return lambda: psycopg.connect(url)


def _measure(conn: psycopg.Connection, url: str, name: str, twin: str, run_id: int,
             fake: FakeLLM, tail: list) -> dict[str, object]:
    iri = f"bench:scale/{name}/{twin}"
    revs = _revisions(conn, iri)
    conn.commit()
    row: dict[str, object] = {}
    row["pending_ms"] = _ms(conn, "select * from donto.pending_extraction_blocks(%s, %s, null)",
                            (run_id, revs))
    pending = [b for (b,) in conn.execute(
        "select block_id from donto.pending_extraction_blocks(%s, %s, null)", (run_id, revs))]
    conn.commit()
    row["pending"] = len(pending)
    sample = pending[:: max(1, len(pending) // 20)][:20]
    takes, releases = [], []
    for b in sample:
        (state,), ms = _timed(lambda b=b: conn.execute(
            "select donto.take_extraction_block(%s, %s)", (run_id, b)).fetchone())
        conn.commit()
        takes.append(ms)
        _, ms = _timed(lambda b=b: conn.execute(
            "select donto.release_extraction_block(%s, %s)", (run_id, b)).fetchone())
        conn.commit()
        releases.append(ms)
    row["take_ms"] = round(statistics.median(takes), 1)
    row["release_ms"] = round(statistics.median(releases), 1)
    row["stats_ms"] = _ms(conn, "select donto.extraction_run_stats(%s)", (run_id,))
    row["holders_ms"] = _ms(  # one call per block (the report's query before)
        conn, "select b.id, donto.extraction_block_holder(%s, b.id) "
        "from unnest(%s::bigint[]) as b (id)", (run_id, pending), repeat=1)
    if conn.execute("select to_regprocedure("
                    "'donto.extraction_block_holders(bigint, bigint[])')").fetchone()[0]:
        row["holders_set_ms"] = _ms(  # all at once (the report's query now)
            conn, "select * from donto.extraction_block_holders(%s, %s)", (run_id, pending))
    conn.commit()
    pool = ProviderPool([Provider(name="fake", base_url=fake.base_url, model="fake-model",
                                  timeout=20)], backoff_base=0.01, backoff_max=0.05)
    t = time.perf_counter()
    report = extract.run_extraction(_factory(url), revision_ids=revs, providers=pool,
                                    alarm_after=0, concurrency=2, limit=20)
    row["extract_20_s"] = round(time.perf_counter() - t, 2)
    row["extract_blocks_s"] = round(report.progress.elapsed_s, 2)
    row["extracted"] = report.progress.done
    # an append after the forgetting: the trigger's cost per statement it files
    before = conn.execute("select count(*) from donto.statement").fetchone()[0]
    conn.commit()
    t = time.perf_counter()
    loader.append_turns(conn, iri, _as_turns(tail, sessions=False))
    conn.commit()
    row["append_ms"] = round((time.perf_counter() - t) * 1000, 1)
    row["append_statements"] = conn.execute(
        "select count(*) from donto.statement").fetchone()[0] - before
    conn.commit()
    if twin == "with":  # three more chunks retracted by hand (the code of the phase)
        latest = _revisions(conn, iri)[-1]
        kept = [sid for (sid,) in conn.execute(
            "select c.statement_id from donto.revision_chunks(%s) as c where not exists ("
            "select 1 from donto.retraction as r where r.statement_id = c.statement_id) "
            "order by c.char_start", (latest,))]
        conn.commit()
        times = []
        for sid in kept[len(kept) // 4::len(kept) // 4][:3]:
            _, ms = _timed(lambda sid=sid: conn.execute(
                "select donto.retract(%s, 'forget this')", (sid,)).fetchone())
            conn.commit()
            times.append(ms)
        row["retract_ms"] = round(statistics.median(times), 1)
    ctx = loader.recall_context(conn, iri)
    conn.commit()
    times = []
    for q in QUERIES:
        times.append(_ms(conn, "select * from donto.recall(%s, 10, %s, arms => 'lexical')",
                         (q, ctx), repeat=3))
    row["recall_ms"] = round(statistics.median(times), 1)
    return row


def _holders_per_block(conn: psycopg.Connection, run_id: int, blocks: list[int],
                       mine: set[int]) -> dict[int, int]:
    """The report's query before (donto_pg.extract._holders): one call per block."""
    if not blocks:
        return {}
    rows = conn.execute(
        "select b.id, donto.extraction_block_holder(%s, b.id) from unnest(%s::bigint[]) as b (id)",
        (run_id, blocks)).fetchall()
    conn.commit()
    mine = mine | {conn.info.backend_pid}
    return {b: pid for b, pid in rows if pid is not None and pid not in mine}


def _migrate(url: str, checkout: Path) -> None:
    """Run sql/ of CHECKOUT again on the database (its functions, views and triggers)."""
    subprocess.run([sys.executable, "-m", "donto_pg", "migrate", "--dsn", url], cwd=checkout,
                   check=True, capture_output=True)


def main(copies: int = typer.Option(8, min=1, help="500K conversations in the synthesized one"),
         appends: int = typer.Option(3, min=1, help="Appends that grow it (revisions - 1)."),
         forget: int = typer.Option(50, min=1, help="Chunks retracted by hand."),
         only: str = typer.Option(None, help="Only this document (10m or synth)."),
         base: str = typer.Option(
             None, help="A checkout of the code before: measure with its sql/ first, then "
             "with this one's, on the same documents (one run)."),
         as_json: bool = typer.Option(False, "--json"),
         keep: bool = typer.Option(False, help="Keep the scratch database."),
         beam_root: str = typer.Option(str(SHARED_BEAM), "--beam", help="The BEAM data."),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    root = Path(beam_root)
    out: dict[str, Any] = {"copies": copies, "appends": appends, "forget": forget,
                           "machine": machine()}
    ten = next(beam.iter_beam(root / "chats" / "10M" / "5"))
    big, sizes = _concatenated(root, copies + 2)
    cut = len(big.messages) - sizes[-1] - sizes[-2]
    docs = {"10m": (ten, [], 1),
            "synth": (dataclasses.replace(big, messages=big.messages[:cut]),
                      big.messages[cut:], appends)}
    if only:
        docs = {only: docs[only]}
    tail_src = next(beam.iter_beam(root / "chats" / "500K" / "24")).messages[:40]
    here = Path(__file__).resolve().parents[1]
    phases = [("before", Path(base).resolve()), ("after", here)] if base else [("now", None)]
    with scratch_database(dsn, keep=keep) as url, psycopg.connect(url) as conn:
        out["database"] = psycopg.conninfo.conninfo_to_dict(url).get("dbname") if keep else None
        out["documents"] = {}
        if base:
            _migrate(url, Path(base).resolve())
        for name, (conv, later, steps) in docs.items():
            out["documents"][name] = _build(conn, name, conv, later, steps)
        for name in docs:
            out["documents"][name]["forget"] = _forget(
                conn, f"bench:scale/{name}/with", forget)
        with FakeLLM(default="[]") as fake:
            descr = json.dumps([{"name": "fake", "model": "fake-model"}])
            run_id = conn.execute("select run_id from donto.start_extraction_run(%s, '{}')",
                                  (descr,)).fetchone()[0]
            conn.commit()
            holders = extract._holders
            for p, (phase, checkout) in enumerate(phases):
                if checkout is not None:
                    _migrate(url, checkout)
                # the extract session's report as the code of the phase asks it
                extract._holders = _holders_per_block if phase == "before" else holders
                for name in docs:
                    rows = out["documents"][name].setdefault("measures", {})
                    for twin in ("with", "plain"):
                        tid = 10 ** 7 * (p + 1) + (1000 if twin == "plain" else 0)
                        tail = [dataclasses.replace(m, turn_id=tid + i)
                                for i, m in enumerate(tail_src)]
                        rows[f"{phase}/{twin}"] = _measure(conn, url, name, twin, run_id,
                                                           fake, tail)
    out["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"load average {out['machine']['loadavg']} -> {out['machine']['loadavg_after']}")
    keys = ["pending_ms", "take_ms", "release_ms", "stats_ms", "holders_ms", "holders_set_ms",
            "extract_20_s", "extract_blocks_s", "append_ms", "append_statements", "retract_ms",
            "recall_ms", "pending"]
    for name, d in out["documents"].items():
        f = d["forget"]
        print(f"\n{name}: {d['chars']:,} chars, {d['revisions']} revisions, {d['chunks']:,} "
              f"chunks, {d['blocks_latest']:,} blocks in the latest revision "
              f"({d['blocks_all']:,} in all); load {d['load_ms_with']} ms")
        print(f"retract by hand ({phases[0][0]}): first {f['first_ms']} ms, median "
              f"{f['median_ms']} ms, {f['chunks']} in {f['total_s']} s; {f['carried']} "
              "statements carried")
        m = d["measures"]
        cols = list(m)
        print("| measure | " + " | ".join(cols) + " |")
        print("|---|" + "---|" * len(cols))
        for k in keys:
            print(f"| {k} | " + " | ".join(str(m[c].get(k, "-")) for c in cols) + " |")


if __name__ == "__main__":
    typer.run(main)
