"""Projection B segmenter figures on a BEAM scale, through Python and once through SQL.

    .venv/bin/python benchmarks/segment.py [PATH] [--json] [--synthetic-chars N]
        [--no-sql] [--synthetic-sql] [--dsn DSN]

PATH defaults to the full 100K sample beside the checkout (../shared/data/beam),
else the bundled examples. Every conversation is read with donto_pg.beam, given
its canonical text (format_chat) and cut by donto_pg.core.segmenter.segment, with the
default parameters (cap 4,000 chars). Reported:

* blocks per 10,000 chars of message content, next to the recall windows (1,200
  chars, projection A) per 10,000 chars of body - the seed's "~3 blocks replacing
  ~8 fragments";
* the share of turns split (only turns above the cap should be), the share of
  ``mixed`` blocks, blocks by kind, mean and largest block span;
* seconds per million body chars of segment() alone;
* once through SQL, on the largest conversation, in a scratch database
  (embedded cluster, or --dsn / DONTO_DSN): donto.project_extraction cold (a new
  backend: PL/Python boot and imports) and warm, against segment() in Python on
  the same body;
* one synthetic body of ~50 million chars (a BEAM-10M-sized conversation made by
  repeating the real conversations, renumbered, sessions kept): the wall time
  of segment() and the peak of its Python allocations (tracemalloc, a second
  run) and the process's peak RSS. With --synthetic-sql it also goes through
  register_revision, record_turns and project_extraction, and the backend's peak
  RSS (VmHWM) is read from /proc when the server is local.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import default_beam, machine, scratch_database  # noqa: E402

from donto_pg import beam, loader  # noqa: E402
from donto_pg.core.segmenter import segment, summarize  # noqa: E402
from donto_pg.core.windows import recall_windows  # noqa: E402

CAP = 4000  # the default cap of donto_pg.core.segmenter


def turn_dicts(spans: list[beam.TurnSpan]) -> list[dict]:
    return [{"seq": s.seq, "turn_id": s.turn_id, "role": s.role, "session": s.session,
             "exchange": s.exchange, "date": s.date.isoformat() if s.date else None,
             "header_start": s.header_start, "char_start": s.char_start,
             "char_end": s.char_end} for s in spans]


def conversations(path: str) -> list[beam.Conversation]:
    out = []
    for item in beam.iter_beam(path):
        if isinstance(item, beam.BeamFormatError):
            print(f"skipped: {item}", file=sys.stderr)
        else:
            out.append(item)
    return out


def python_figures(convs: list[beam.Conversation]) -> dict[str, object]:
    """segment() over every conversation: aggregate and per-conversation figures."""
    totals = {"blocks": 0, "turns": 0, "split_turns": 0, "over_cap": 0, "mixed": 0, "content": 0,
              "body": 0, "windows": 0, "span": 0, "max_span": 0, "seconds": 0.0}
    by_kind: dict[str, int] = {}
    per_conv = []
    for conv in convs:
        body, spans = beam.format_chat(conv)
        turns = turn_dicts(spans)
        t = time.perf_counter()
        blocks = segment(body, turns)
        dt = time.perf_counter() - t
        s = summarize(blocks, turns)
        totals["blocks"] += s["n_blocks"]
        totals["turns"] += s["n_turns"]
        totals["split_turns"] += round(s["split_turn_share"] * s["n_turns"])
        totals["over_cap"] += sum(1 for t in turns if t["char_end"] - t["char_start"] > CAP)
        totals["mixed"] += s["by_kind"].get("mixed", 0)
        totals["content"] += s["content_chars"]
        totals["body"] += len(body)
        totals["windows"] += sum(1 for _ in recall_windows(body, 1200))
        totals["span"] += s["mean_block_chars"] * s["n_blocks"]
        totals["max_span"] = max(totals["max_span"], s["max_block_chars"])
        totals["seconds"] += dt
        for k, n in s["by_kind"].items():
            by_kind[k] = by_kind.get(k, 0) + n
        per_conv.append({"conversation": conv.conversation_id, "chars": len(body),
                         "blocks_per_10k": round(s["blocks_per_10k_chars"], 3),
                         "mixed_share": round(s["mixed_share"], 4),
                         "split_turn_share": round(s["split_turn_share"], 4)})
    per10k = [c["blocks_per_10k"] for c in per_conv]
    return {
        "conversations": len(convs),
        "body_chars": totals["body"],
        "content_chars": totals["content"],
        "turns": totals["turns"],
        "blocks": totals["blocks"],
        "blocks_by_kind": by_kind,
        "blocks_per_10k_content_chars": round(totals["blocks"] * 1e4 / totals["content"], 3),
        "blocks_per_10k_min_median_max": [min(per10k), statistics.median(per10k),
                                          max(per10k)],
        "recall_windows_per_10k_body_chars": round(totals["windows"] * 1e4 / totals["body"], 3),
        "blocks_per_10k_body_chars": round(totals["blocks"] * 1e4 / totals["body"], 3),
        "split_turn_share": round(totals["split_turns"] / totals["turns"], 5),
        "turns_over_cap_share": round(totals["over_cap"] / totals["turns"], 5),
        "mixed_share": round(totals["mixed"] / totals["blocks"], 5),
        "mean_block_chars": round(totals["span"] / totals["blocks"], 1),
        "max_block_chars": totals["max_span"],
        "seconds": round(totals["seconds"], 3),
        "seconds_per_million_chars": round(totals["seconds"] * 1e6 / totals["body"], 4),
        "per_conversation": per_conv,
    }


def sql_overhead(dsn: str | None, conv: beam.Conversation) -> dict[str, object]:
    """project_extraction through SQL (cold and warm) vs segment() in Python, same body."""
    body, spans = beam.format_chat(conv)
    turns = turn_dicts(spans)
    t = time.perf_counter()
    n_py = len(segment(body, turns))
    py_s = time.perf_counter() - t
    with scratch_database(dsn) as url:
        with psycopg.connect(url) as conn:
            res = loader.load_conversation(conn, conv)
            if not res.ok:
                raise RuntimeError(res.error)
        runs = {}
        with psycopg.connect(url) as conn:  # a fresh backend: PL/Python boots here
            for label, params in (("cold", {}), ("warm", {"target": 1999})):
                t = time.perf_counter()
                n = conn.execute("select donto.project_extraction(%s, %s)",
                                 (res.revision_id, json.dumps(params))).fetchone()[0]
                conn.commit()
                runs[label] = (time.perf_counter() - t, n)
    return {
        "conversation": conv.conversation_id, "body_chars": len(body), "blocks": n_py,
        "python_segment_s": round(py_s, 4),
        "sql_cold_s": round(runs["cold"][0], 4), "sql_warm_s": round(runs["warm"][0], 4),
        "sql_blocks": runs["cold"][1],
        "sql_warm_overhead_s": round(runs["warm"][0] - py_s, 4),
    }


def synthetic(convs: list[beam.Conversation], chars: int) -> tuple[str, list[dict]]:
    """~CHARS chars of canonical text: the conversations repeated, renumbered."""
    messages: list[beam.Message] = []
    total = seq = session = exchange_base = 0
    while total < chars:
        for conv in convs:
            prev = None
            top = 0
            for m in conv.messages:
                if m.session != prev:
                    session += 1
                    prev = m.session
                messages.append(beam.Message(
                    seq=seq, turn_id=seq, role=m.role, session=session, date=m.date,
                    content=m.content, question_type=None, exchange=exchange_base + m.exchange))
                top = max(top, m.exchange)
                seq += 1
                total += len(m.content) + 24
            exchange_base += top + 1
            if total >= chars:
                break
    body, spans = beam.format_chat(messages)
    return body, turn_dicts(spans)


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic_figures(convs: list[beam.Conversation], chars: int) -> dict[str, object]:
    t = time.perf_counter()
    body, turns = synthetic(convs, chars)
    build_s = time.perf_counter() - t
    rss_before = _maxrss_mib()
    t = time.perf_counter()
    blocks = segment(body, turns)
    seg_s = time.perf_counter() - t
    rss_after = _maxrss_mib()
    s = summarize(blocks, turns)
    del blocks
    tracemalloc.start()
    segment(body, turns)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "body_chars": len(body), "turns": len(turns), "build_s": round(build_s, 2),
        "blocks": s["n_blocks"], "blocks_per_10k_content_chars":
        round(s["blocks_per_10k_chars"], 3), "split_turn_share": round(s["split_turn_share"], 5),
        "mixed_share": round(s["mixed_share"], 5), "segment_s": round(seg_s, 2),
        "seconds_per_million_chars": round(seg_s * 1e6 / len(body), 4),
        "segment_peak_alloc_mib": round(peak / 2**20, 1),
        "process_peak_rss_mib_before_segment": round(rss_before, 1),
        "process_peak_rss_mib_after_segment": round(rss_after, 1),
    }, body, turns


def _backend_hwm_mib(conn: psycopg.Connection) -> float | None:
    pid = conn.info.backend_pid
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return None


def synthetic_sql(dsn: str | None, body: str, turns: list[dict]) -> dict[str, object]:
    """The synthetic body through register_revision, record_turns and project_extraction."""
    rows = [{k: t[k] for k in ("seq", "turn_id", "role", "session", "exchange", "date",
                               "header_start", "char_start", "char_end")} for t in turns]
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        t = time.perf_counter()
        rev = conn.execute("select donto.register_revision('bench:synthetic', %s)",
                           (body,)).fetchone()[0]
        conn.execute("select donto.record_turns(%s, %s)", (rev, json.dumps(rows)))
        conn.commit()
        load_s = time.perf_counter() - t
        t = time.perf_counter()
        n = conn.execute("select donto.project_extraction(%s)", (rev,)).fetchone()[0]
        conn.commit()
        proj_s = time.perf_counter() - t
        hwm = _backend_hwm_mib(conn)
    return {"register_and_turns_s": round(load_s, 2), "project_extraction_s": round(proj_s, 2),
            "blocks": n, "backend_peak_rss_mib": hwm}


def main(path: str = typer.Argument(None), as_json: bool = typer.Option(False, "--json"),
         synthetic_chars: int = typer.Option(50_000_000, help="0 skips the synthetic body."),
         no_sql: bool = typer.Option(False, "--no-sql", help="Skip the SQL overhead run."),
         with_synthetic_sql: bool = typer.Option(
             False, "--synthetic-sql", help="Also run the synthetic body through SQL."),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    path = path or default_beam("100K")
    convs = conversations(path)
    if not convs:
        raise typer.Exit(f"no conversations at {path}")
    report: dict[str, object] = {"path": path, "machine": machine(),
                                 "params": "defaults (cap 4000, target 2000, min_prose 40)"}
    report["python"] = python_figures(convs)
    if not no_sql:
        largest = max(convs, key=lambda c: sum(len(m.content) for m in c.messages))
        report["sql"] = sql_overhead(dsn, largest)
    if synthetic_chars > 0:
        figures, body, turns = synthetic_figures(convs, synthetic_chars)
        report["synthetic"] = figures
        if with_synthetic_sql:
            figures["sql"] = synthetic_sql(dsn, body, turns)
        del body, turns
    if as_json:
        print(json.dumps(report, indent=2))
        return
    py = report["python"]
    print(f"{py['conversations']} conversations, {py['body_chars']:,} body chars, "
          f"{py['turns']:,} turns -> {py['blocks']:,} blocks {py['blocks_by_kind']}")
    print(f"blocks per 10k content chars: {py['blocks_per_10k_content_chars']} "
          f"(per conversation min/median/max {py['blocks_per_10k_min_median_max']}); "
          f"recall windows per 10k body chars: {py['recall_windows_per_10k_body_chars']}")
    print(f"split turns: {py['split_turn_share']:.3%} (turns above the cap: "
          f"{py['turns_over_cap_share']:.3%})  mixed blocks: {py['mixed_share']:.3%}  "
          f"mean block {py['mean_block_chars']} chars, max {py['max_block_chars']}")
    print(f"segment(): {py['seconds_per_million_chars']} s per million chars")
    if "sql" in report:
        print(f"SQL: {report['sql']}")
    if "synthetic" in report:
        print(f"synthetic: {report['synthetic']}")


if __name__ == "__main__":
    typer.run(main)
