"""What forgetting costs and hides when a conversation changes: a load of an edited text
with retractions by hand in the old one, against the same load without them.

    nice -n 19 .venv/bin/python benchmarks/forget.py [PATH] [--forget 20] [--edits 3] [--json]

PATH is one BEAM conversation (default: 500K/13 of the BEAM data beside the checkout). In
one scratch database and one run, under two IRIs, the conversation is loaded (no
embedding, no extraction); under the first, FORGET chunks spread over the text are
retracted by hand. Then EDITS changed texts are loaded one after the other under both
(edit k changes one character in the middle of message k x n / (EDITS + 1), a word that
sits in a forgotten chunk for the first edit), each a changed conversation that
supersedes the one before. Prints, per load: the seconds it took with retractions and
without (the carried retractions are the difference), and how many of its chunks are
retracted by hand (carried). The figure to watch: the chunks hidden stay about FORGET
(a forgotten window maps to the one or two windows over its text now), whatever the
number of edits.
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


def _edited(conv: beam.Conversation, k: int, edits: int) -> beam.Conversation:
    """CONV with one character changed in message k x n / (edits + 1) (and in every
    message edited before it: the edits add up, as a user's do)."""
    messages = list(conv.messages)
    n = len(messages)
    for j in range(1, k + 1):
        i = j * n // (edits + 1)
        m = messages[i]
        at = len(m.content) // 2
        messages[i] = dataclasses.replace(m, content=m.content[:at] + "~" + m.content[at:])
    return dataclasses.replace(conv, messages=messages)


def main(path: str = typer.Argument(str(SHARED_BEAM / "chats" / "500K" / "13")),
         forget: int = typer.Option(20, min=1, help="Chunks retracted by hand."),
         edits: int = typer.Option(3, min=1, help="Edited texts loaded one after another."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    conv = next(beam.iter_beam(path))
    out: dict[str, object] = {"conversation": conv.conversation_id, "forget": forget,
                              "edits": edits, "machine": machine()}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        iris = {"with": "bench:forget/with", "without": "bench:forget/without"}
        for iri in iris.values():
            loader.record_conversation(conn, conv, iri, {})
            conn.commit()
        chunks = [sid for (sid,) in conn.execute(
            "select c.statement_id from donto.revision_chunks(donto._latest_revision("
            "(select document_id from donto.document where iri = %s))) as c "
            "order by c.char_start", (iris["with"],))]
        step = max(1, len(chunks) // forget)
        for sid in chunks[step // 2::step][:forget]:
            conn.execute("select donto.retract(%s, 'forget this')", (sid,))
        conn.commit()
        rows = []
        for k in range(1, edits + 1):
            text = _edited(conv, k, edits)
            row: dict[str, object] = {"edit": k}
            for name, iri in iris.items():
                started = time.perf_counter()
                rev = loader.record_conversation(conn, text, iri, {}).revision_id
                conn.commit()
                row[f"load_s_{name}"] = round(time.perf_counter() - started, 2)
                row["hidden" if name == "with" else "hidden_without"] = conn.execute(
                    "select count(*) from donto.revision_chunks(%s) as c join "
                    "donto.retraction as r using (statement_id) where r.by_hand",
                    (rev,)).fetchone()[0]
                conn.commit()
            row["chunks"] = len(chunks)
            rows.append(row)
    out["loads"] = rows
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"conversation {out['conversation']}: {len(chunks)} chunks, {forget} retracted by "
          f"hand, then {edits} edited texts loaded")
    print("| edit | load (s), with retractions | without | chunks hidden (carried) |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['edit']} | {r['load_s_with']} | {r['load_s_without']} | {r['hidden']} |")


if __name__ == "__main__":
    typer.run(main)
