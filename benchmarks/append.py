"""Appending turns to a long conversation: incremental work against a full re-projection.

    nice -n 19 .venv/bin/python benchmarks/append.py [PATH] [--turns 10] [--json]

PATH is one BEAM conversation (default: 500K/13 of the full BEAM sample beside the
checkout). In one scratch database and one run:
  1. the conversation without its last TURNS messages is loaded (revision, turns,
     projection A, projection B) and embedded (every chunk: the baseline);
  2. the last TURNS messages are appended (``donto.append_turns``: the new revision,
     its link, turns, projection A grown, projection B re-segmented from the last
     session) and the new chunks embedded (``donto-pg embed``, content-keyed cache);
  3. beside it, the full re-projection of the same longer revision, as it was done
     before appends existed: projection A cut from scratch into a context of its own,
     projection B segmented whole, and every chunk embedded. The conversation is
     embedded once (step 1): that embedding time, scaled to the longer revision's chunk
     count, stands for the re-projection's embedding; --full-embed embeds its chunks
     again with the cache bypassed and reports the measured time instead. Without it
     the re-projection's chunks are embedded through the cache (none encoded: the
     same texts in another context).
Prints chunk and block counts, chunks embedded and encoded, and wall times.
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

from donto_pg import beam, embed, loader  # noqa: E402
from donto_pg.db import register_vector_if_present  # noqa: E402


def _timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(path: str = typer.Argument(str(SHARED_BEAM / "chats" / "500K" / "13")),
         turns: int = typer.Option(10, help="Messages appended (the conversation's last ones)."),
         full_embed: bool = typer.Option(
             False, help="Embed the full re-projection again (cache bypassed) and time it."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    conv = next(beam.iter_beam(path))
    old = dataclasses.replace(conv, messages=conv.messages[:-turns])
    new_msgs = [{"role": m.role, "content": m.content, "turn_id": m.turn_id,
                 "session": m.session, "exchange": m.exchange,
                 "date": m.date.isoformat() if m.date else None}
                for m in conv.messages[-turns:]]
    iri = loader.document_iri(conv)
    out: dict[str, object] = {"conversation": conv.conversation_id, "appended_turns": turns,
                              "machine": machine()}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        register_vector_if_present(conn)
        res, t_load = _timed(lambda: loader.load_conversation(conn, old))
        if not res.ok:
            raise SystemExit(res.error)
        rev1 = res.revision_id
        blocks1 = conn.execute("select donto.project_extraction(%s)", (rev1,)).fetchone()[0]
        conn.commit()
        rep1, t_embed1 = _timed(lambda: embed.embed_pending(conn, progress=False))
        out["base"] = {"chars": res.chars, "chunks": res.chunks, "blocks": blocks1,
                       "load_s": round(t_load, 2), "embed_s": round(t_embed1, 1),
                       "embedded": rep1.embedded, "encoded": rep1.encoded}

        rev2, t_append = _timed(lambda: loader.append_turns(conn, iri, new_msgs))
        conn.commit()
        rep2, t_embed2 = _timed(lambda: embed.embed_pending(conn, progress=False))
        ext = conn.execute(
            "select reused_chunks, new_chunks, superseded_statement_id is not null "
            "from donto.projection_extension where revision_id = %s", (rev2,)).fetchone()
        chars2, blocks2 = conn.execute(
            "select r.body_chars, (select count(*) from donto.extraction_block as b "
            "join donto.projection as p using (projection_id) where p.revision_id = %s) "
            "from donto.revision as r where r.revision_id = %s", (rev2, rev2)).fetchone()
        conn.commit()
        out["append"] = {"new_chars": chars2 - res.chars, "chunks": ext[0] + ext[1],
                         "reused_chunks": ext[0], "new_chunks": ext[1],
                         "superseded": ext[2], "blocks": blocks2,
                         "append_s": round(t_append, 3), "embed_s": round(t_embed2, 2),
                         "embedded": rep2.embedded, "encoded": rep2.encoded,
                         "total_s": round(t_append + t_embed2, 2)}

        def full_projection():
            n = conn.execute("select donto.project_recall(%s, 1200, 'ctx:bench/full')",
                             (rev2,)).fetchone()[0]
            b = conn.execute("select count(*) from donto._extraction_blocks(%s, "
                             "donto._extraction_params('{}'))", (rev2,)).fetchone()[0]
            conn.commit()
            return n, b

        (n_full, b_full), t_project = _timed(full_projection)
        rep3, t_embed3 = _timed(lambda: embed.embed_pending(
            conn, progress=False, context="ctx:bench/full", cache=not full_embed))
        if full_embed:
            embed_s, how = t_embed3, "measured (cache bypassed)"
        else:
            embed_s = t_embed1 * n_full / max(1, rep1.encoded)
            how = (f"the base's embedding time scaled to {n_full} chunks; through the cache "
                   f"it took {t_embed3:.2f} s, {rep3.encoded} encoded")
        out["full"] = {"chunks": n_full, "blocks": b_full, "project_s": round(t_project, 2),
                       "embed_s": round(embed_s, 1), "embed_how": how,
                       "embedded": rep3.embedded, "encoded": rep3.encoded,
                       "total_s": round(t_project + embed_s, 1)}
    a, f = out["append"], out["full"]
    out["speedup"] = round(f["total_s"] / a["total_s"], 1) if a["total_s"] else None
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"conversation {out['conversation']}: {out['base']['chars']:,} chars, "
          f"{out['base']['chunks']:,} chunks, {out['base']['blocks']:,} blocks; "
          f"+{turns} turns = {a['new_chars']:,} chars")
    print(f"append: {a['append_s']:.3f} s register+project, embed {a['embedded']} chunks "
          f"({a['encoded']} encoded) in {a['embed_s']:.2f} s; reused {a['reused_chunks']:,} "
          f"chunks, new {a['new_chunks']}; total {a['total_s']:.2f} s")
    print(f"full re-projection: {f['project_s']:.2f} s project, embed {f['chunks']:,} chunks "
          f"in {f['embed_s']:.1f} s ({f['embed_how']}); total {f['total_s']:.1f} s; "
          f"speedup {out['speedup']}x")


if __name__ == "__main__":
    typer.run(main)
