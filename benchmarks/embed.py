"""Embedding throughput: `donto-pg embed` against plain SentenceTransformer.encode.

    .venv/bin/python benchmarks/embed.py [PATH] [-c 13] [--batch 32] [--model M ...] [--json]

Loads the chosen conversations (default: 100K/13) into a scratch database
without vectors, then, in the same run and on the same chunks:
  1. plain `SentenceTransformer.encode(texts, batch_size)` (what a script would do),
  2. `donto.embed.embed_pending` (fetch, length-sorted batches, binary COPY,
     per-page commit, HNSW index) for each batch size given,
for each model given (default all-MiniLM-L6-v2), and prints chunks/s and the
ratio to the first model's plain encode.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psycopg
import typer

sys.path.insert(0, os.path.dirname(__file__))
from _common import default_beam, machine, scratch_database  # noqa: E402

from donto_pg import embed, loader  # noqa: E402
from donto_pg.core import encoder


def main(path: str = typer.Argument(None),
         conversation: list[str] = typer.Option(["13"], "-c", help="Conversation ids."),
         batch: list[int] = typer.Option([32], help="Batch sizes for donto-pg embed."),
         model: list[str] = typer.Option(
             [encoder.DEFAULT_MODEL],
             help="Embedding models, names or paths (repeatable); ratios are to the first "
                  "one's plain encode."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    import torch

    path = path or default_beam("100K")
    for m in model:
        encoder.load(m)  # load once, outside every timing
    rows = []
    base = None
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        res = loader.load_beam(conn, path, conversations=conversation)
        texts = [r[0] for r in conn.execute(
            "select s.object_lit ->> 'v' from donto.x_memory_record m "
            "join donto.statement s using (statement_id) order by m.statement_id")]
        conn.commit()
    for m in model:
        t = time.perf_counter()
        encoder.load(m).encode(texts, batch_size=32, show_progress_bar=False)
        plain = time.perf_counter() - t
        base = base or len(texts) / plain
        rows.append({"method": f"{m}: SentenceTransformer.encode (batch 32)",
                     "chunks": len(texts), "seconds": round(plain, 2),
                     "chunks_per_s": round(len(texts) / plain, 1),
                     "ratio": round(len(texts) / plain / base, 3)})
        for b in batch:
            with scratch_database(dsn) as url2, psycopg.connect(url2) as c2:
                loader.load_beam(c2, path, conversations=conversation)
                rep = embed.embed_pending(c2, m, batch=b, progress=False)
            rows.append({"method": f"{m}: donto-pg embed (batch {b})", "chunks": rep.embedded,
                         "seconds": round(rep.seconds, 2), "chunks_per_s": round(rep.rate, 1),
                         "ratio": round(rep.rate / base, 3)})
    report = {"path": path, "conversations": [r.conversation for r in res],
              "torch_threads": torch.get_num_threads(), "machine": machine(), "runs": rows}
    if as_json:
        print(json.dumps(report, indent=2))
        return
    print(f"embedding benchmark: {report['conversations']} ({len(texts)} chunks), "
          f"torch threads {report['torch_threads']}")
    for r in rows:
        print(f"  {r['method']:<58} {r['chunks']:>6} chunks {r['seconds']:>8.2f} s "
              f"{r['chunks_per_s']:>8.1f} chunks/s  x{r['ratio']:.2f}")


if __name__ == "__main__":
    typer.run(main)
