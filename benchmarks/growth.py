"""What a conversation that grows turn by turn stores, against appending in batches.

    nice -n 19 .venv/bin/python benchmarks/growth.py [PATH] [--batches 150] [--batch 2] [--json]

PATH is one BEAM conversation (default: 100K/1 of the full BEAM sample beside the
checkout). In one scratch database and one run, under three IRIs:
  1. turn by turn: the conversation without its last BATCHES x BATCH messages is loaded,
     then they are appended BATCH at a time (``donto.append_turns``, committed each time,
     as a chat that saves after every exchange does);
  2. one batch: the same base, then the same messages appended in one call;
  3. one load: the whole conversation loaded at once.
No embedding (it is keyed by content: each way embeds the same texts) and no extraction.
Prints, per way: revisions, the characters of their texts (body_chars), the characters
stored for them (stored_chars: a whole body, or the tail of a revision stored as a
skip-delta on an earlier one, migration 038), turn rows, recall chunks (stored, and
current: not retracted), standing statements (stored, and those ``donto.standing``
reads: the longest revision's), the mean time of one append, and the mean time to read
the latest revision's text and its last 1,200 characters.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import SHARED_BEAM, machine, scratch_database  # noqa: E402

from donto_pg import beam, loader  # noqa: E402

# What one document stores: its revisions' bodies and turn rows, and the statements
# derived from them in its recall (episodic) and standing contexts.
STORED = """
with rev as (select r.revision_id, r.body_chars,
                    coalesce(char_length(r.body), 0)
                    + coalesce(char_length(r.body_tail), 0) as stored_chars
             from donto.revision as r
             join donto.document as d using (document_id) where d.iri = %(iri)s),
     st as (select s.statement_id, c.iri as ctx,
                   exists (select 1 from donto.retraction as x
                           where x.statement_id = s.statement_id) as retracted
            from donto.statement as s join donto.context as c using (context_id)
            where s.derived_from_revision in (select revision_id from rev))
select (select count(*) from rev),
       (select sum(body_chars) from rev),
       (select sum(stored_chars) from rev),
       (select count(*) from donto.turn where revision_id in (select revision_id from rev)),
       (select count(*) from st where ctx like 'ctx:memory/episodic/%%'),
       (select count(*) from st where ctx like 'ctx:memory/episodic/%%' and not retracted),
       (select count(*) from st where ctx like 'ctx:memory/standing/%%'),
       (select count(*) from donto.standing(donto.standing_context_iri(%(iri)s)))
"""
FIELDS = ["revisions", "body_chars", "stored_chars", "turn_rows", "chunks", "chunks_current",
          "standing", "standing_read"]


def _messages(conv: beam.Conversation, start: int, end: int) -> list[dict[str, object]]:
    return [{"role": m.role, "content": m.content, "turn_id": m.turn_id,
             "session": m.session, "exchange": m.exchange,
             "date": m.date.isoformat() if m.date else None}
            for m in conv.messages[start:end]]


def main(path: str = typer.Argument(str(SHARED_BEAM / "chats" / "100K" / "1")),
         batches: int = typer.Option(150, min=1, help="Appends in the turn-by-turn way."),
         batch: int = typer.Option(2, min=1, help="Messages per append (2: one exchange)."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    conv = next(beam.iter_beam(path))
    n = len(conv.messages)
    grown = batches * batch
    if grown >= n:
        raise typer.BadParameter(f"{batches} x {batch} messages: the conversation has {n}")
    base = dataclasses.replace(conv, messages=conv.messages[:n - grown])
    out: dict[str, object] = {"conversation": conv.conversation_id, "messages": n,
                              "appended": grown, "batch": batch, "machine": machine()}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        def stored(iri: str) -> dict[str, int]:
            row = conn.execute(STORED, {"iri": iri}).fetchone()
            conn.commit()
            return dict(zip(FIELDS, (int(x or 0) for x in row), strict=True))

        def read(iri: str) -> dict[str, float]:
            """Mean seconds (of 5) to read the latest revision's whole text
            (donto.revision_body) and its last 1,200 characters (donto.span_text)."""
            rev, chars = conn.execute(
                "select r.revision_id, r.body_chars from donto.revision as r join "
                "donto.document as d using (document_id) where d.iri = %s "
                "order by r.revision_id desc limit 1", (iri,)).fetchone()
            got = {}
            for key, sql, args in (
                    ("read_text_s", "select length(donto.revision_body(%s))", (rev,)),
                    ("read_slice_s", "select length(donto.span_text(%s, %s, %s))",
                     (rev, max(0, chars - 1200), chars))):
                t = time.perf_counter()
                for _ in range(5):
                    conn.execute(sql, args).fetchone()
                got[key] = round((time.perf_counter() - t) / 5, 4)
            conn.commit()
            return got

        def grow(iri: str, size: int) -> float:
            loader.record_conversation(conn, base, iri, {})
            conn.commit()
            t, calls = time.perf_counter(), 0
            for start in range(n - grown, n, size):
                loader.append_turns(conn, iri, _messages(conv, start, min(n, start + size)))
                conn.commit()
                calls += 1
            return (time.perf_counter() - t) / calls

        ways = {}
        for name, size in (("turn by turn", batch), ("one batch", grown)):
            iri = f"bench:growth/{name.replace(' ', '-')}"
            mean = grow(iri, size)
            ways[name] = stored(iri) | {"append_mean_s": round(mean, 3)} | read(iri)
        loader.record_conversation(conn, conv, "bench:growth/one-load", {})
        conn.commit()
        ways["one load"] = (stored("bench:growth/one-load") | {"append_mean_s": None}
                            | read("bench:growth/one-load"))
    out["ways"] = ways
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"conversation {out['conversation']}: {n} messages, the last {grown} appended "
          f"{batch} at a time / at once / loaded whole")
    print("| way | " + " | ".join(FIELDS) + " | append mean (s) | read text / slice (s) |")
    print("|---|" + "---|" * (len(FIELDS) + 2))
    for name, w in ways.items():
        mean = "" if w["append_mean_s"] is None else f"{w['append_mean_s']:.3f}"
        print(f"| {name} | " + " | ".join(f"{w[f]:,}" for f in FIELDS) + f" | {mean} | "
              f"{w['read_text_s']:.4f} / {w['read_slice_s']:.4f} |")


if __name__ == "__main__":
    typer.run(main)
