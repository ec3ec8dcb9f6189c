"""Provider calls of extracting a grown conversation with both its revisions selected.

    nice -n 19 .venv/bin/python benchmarks/extract_cost.py [PATH] [--turns 10] [--json]

PATH is one BEAM conversation (default: 500K/13 of the full BEAM sample beside the
checkout). In a scratch database: the conversation without its last TURNS messages is
loaded and cut into extraction blocks (revision 1), the last TURNS messages are appended
(revision 2: blocks before the last session copied, the last session cut again). Then
``extract -r 1 -r 2`` runs against a local OpenAI-compatible server (tests/fakellm.py,
answering ``[]``) and the HTTP requests it receives are counted, beside what the pending
list held before superseded blocks were left out (its earlier rule, run as a query here):
each listed block was one request, since the list is taken once per session.
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
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _common import SHARED_BEAM, machine, scratch_database  # noqa: E402

from donto_pg import beam, extract, loader  # noqa: E402
from donto_pg.llm import Provider, ProviderPool  # noqa: E402
from tests.fakellm import FakeLLM  # noqa: E402

# donto.pending_extraction_blocks before superseded blocks were left out (the lineage rule
# only): every block of every selected revision without a response for its span.
OLD_PENDING = """
with proj as materialized (
    select p.projection_id, array(select donto.revision_lineage(p.revision_id)) as lineage
    from donto.extraction_run as r
    join donto.projection as p
        on p.kind = 'extraction' and p.strategy = 'turn-coherent-v1' and r.params = p.params
    where r.run_id = %(run)s and p.revision_id = any(%(revs)s)
),
done as materialized (
    select o.revision_id, o.kind, o.char_start, o.char_end, o.prefix_start, o.prefix_end
    from donto.extraction_response as x join donto.extraction_block as o using (block_id)
    where x.run_id = %(run)s
)
select count(*) from proj join donto.extraction_block as b using (projection_id)
where not exists (
    select 1 from done as d
    where d.revision_id = any(proj.lineage)
          and (d.kind, d.char_start, d.char_end) = (b.kind, b.char_start, b.char_end)
          and d.prefix_start is not distinct from b.prefix_start
          and d.prefix_end is not distinct from b.prefix_end)
"""


def main(path: str = typer.Argument(str(SHARED_BEAM / "chats" / "500K" / "13")),
         turns: int = typer.Option(10, help="Messages appended (the conversation's last ones)."),
         as_json: bool = typer.Option(False, "--json"),
         dsn: str = typer.Option(None, envvar="DONTO_DSN")) -> None:
    conv = next(beam.iter_beam(path))
    old = dataclasses.replace(conv, messages=conv.messages[:-turns], questions=[])
    new_msgs = [{"role": m.role, "content": m.content, "turn_id": m.turn_id,
                 "session": m.session, "exchange": m.exchange,
                 "date": m.date.isoformat() if m.date else None}
                for m in conv.messages[-turns:]]
    iri = loader.document_iri(conv)
    out: dict[str, object] = {"conversation": conv.conversation_id, "appended_turns": turns,
                              "machine": machine()}
    with scratch_database(dsn) as url, psycopg.connect(url) as conn:
        res = loader.load_conversation(conn, old)
        if not res.ok:
            raise SystemExit(res.error)
        rev1 = res.revision_id
        blocks1 = conn.execute("select donto.project_extraction(%s)", (rev1,)).fetchone()[0]
        conn.commit()
        rev2 = loader.append_turns(conn, iri, new_msgs)
        conn.commit()
        blocks2 = conn.execute(
            "select count(*) from donto.extraction_block as b join donto.projection as p "
            "using (projection_id) where p.revision_id = %s", (rev2,)).fetchone()[0]
        with FakeLLM(default="[]") as fake:
            pool = ProviderPool([Provider(name="local", base_url=fake.base_url,
                                          model="count-calls")])
            run = conn.execute("select run_id from donto.start_extraction_run(%s)", (json.dumps(
                [{"name": "local", "model": "count-calls"}]),)).fetchone()[0]
            before = conn.execute(OLD_PENDING, {"run": run, "revs": [rev1, rev2]}).fetchone()[0]
            conn.commit()
            t = time.perf_counter()
            report = extract.run_extraction(lambda: psycopg.connect(url),
                                            revision_ids=[rev1, rev2], providers=pool,
                                            alarm_after=0, concurrency=2)
            out["extract_s"] = round(time.perf_counter() - t, 1)
            calls = len(fake.requests)
        out.update(blocks_rev1=blocks1, blocks_rev2=blocks2, calls_before=before,
                   calls_after=calls, ok=report.ok)
    if as_json:
        print(json.dumps(out, indent=2))
        return
    print(f"conversation {out['conversation']} grown by {turns} messages: revision 1 "
          f"{blocks1} blocks, revision 2 {blocks2}; extract -r 1 -r 2 asked the provider "
          f"{calls} times (before: {before})")


if __name__ == "__main__":
    typer.run(main)
