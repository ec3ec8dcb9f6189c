"""`donto-pg demo`: the whole path on one BEAM conversation, narrated.

Every step is a call into the database API, printed so it can be pasted into
psql: register a content-addressed revision, show I3 refusing an UPDATE, cut
and embed projection A, recall three probing questions (hit or miss against
their gold turns), cut projection B, render one prompt, extract and trace a
claim back to its text (character offsets).
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import psycopg

from donto_pg import beam, db, loader, resources

EXAMPLE = resources.data_dir("examples") / "beam" / "chats" / "100K" / "13"
QUESTION_ABILITIES = ("information_extraction", "knowledge_update", "temporal_reasoning")

Echo = Callable[[str], None]


def _head(echo: Echo, title: str) -> None:
    echo("")
    echo(f"== {title} " + "=" * max(0, 70 - len(title)))


def _short(text: str, width: int = 110) -> str:
    return textwrap.shorten(" ".join(text.split()), width=width, placeholder=" ...")


def show_revision(conn: psycopg.Connection, echo: Echo, conv: beam.Conversation) -> int:
    _head(echo, "1. One conversation -> one content-addressed revision")
    body, spans = beam.format_chat(conv)
    iri = loader.document_iri(conv)
    echo(f"{conv.conversation_id}: {len(conv.messages)} messages, {len(body):,} chars of "
         "canonical text. Its first lines:")
    for line in body.splitlines()[:3]:
        echo("    " + _short(line, 100))
    rev = conn.execute("select donto.register_revision(%s, %s)", (iri, body)).fetchone()[0]
    sha = conn.execute("select encode(sha256, 'hex') from donto.revision where revision_id = %s",
                       (rev,)).fetchone()[0]
    again = conn.execute("select donto.register_revision(%s, %s)", (iri, body)).fetchone()[0]
    conn.commit()
    echo(f"select donto.register_revision('{iri}', <body>)  -> revision {rev}")
    echo(f"  sha256 {sha}")
    echo(f"registering the same body again                 -> revision {again} "
         f"({'the same: idempotent' if again == rev else 'DIFFERENT?!'})")
    return rev


def show_i3(conn: psycopg.Connection, echo: Echo, rev: int) -> None:
    _head(echo, "2. Invariant I3: facts are append-only, enforced by the database")
    sql = f"update donto.revision set body = 'rewritten' where revision_id = {rev}"
    echo(sql)
    try:
        conn.execute(sql)
        echo("  !! the update went through: I3 is NOT enforced")
    except psycopg.Error as exc:
        echo(f"  refused: {exc.diag.message_primary}")
    conn.rollback()


def show_load(conn: psycopg.Connection, echo: Echo, path: Path) -> loader.LoadResult:
    _head(echo, "3. Load: turns, probing questions, projection A (recall chunks)")
    res = loader.load_beam(conn, str(path))[0]
    if not res.ok:
        raise RuntimeError(res.error)
    echo(f"turns {res.turns}, questions {res.questions}, recall chunks {res.chunks} "
         f"(select donto.project_recall({res.revision_id}) -- 1,200-char line-respecting "
         "windows)")
    return res


def show_embed(conn: psycopg.Connection, echo: Echo, res: loader.LoadResult) -> None:
    from donto_pg.cli import progress_enabled
    from donto_pg.embed import embed_pending

    _head(echo, "4. Embed the chunks (all-MiniLM-L6-v2, offline) into pgvector")
    # this conversation's only: the embedded database may hold other, unembedded work
    r = embed_pending(conn, context=loader.recall_context(conn, res.conversation),
                      progress=progress_enabled())
    echo(f"{r.embedded} new vectors ({r.already} already there) in {r.seconds:.1f}s; "
         f"HNSW index {r.index}")


def show_recall(conn: psycopg.Connection, echo: Echo, res: loader.LoadResult, dsn: str) -> None:
    _head(echo, "5. Recall three probing questions from SQL")
    context = loader.recall_context(conn, res.conversation)
    for ability in QUESTION_ABILITIES:
        row = conn.execute(
            "select question_id, question from donto.probe_question where revision_id = %s "
            "and ability = %s and jsonb_array_length(gold) > 0 order by qindex limit 1",
            (res.revision_id, ability)).fetchone()
        if row is None:
            continue
        qid, question = row
        gold = conn.execute("select header_start, char_end, turn_id from donto.question_gold_span "
                            "where question_id = %s", (qid,)).fetchall()
        hits = conn.execute(
            "select place, char_start, char_end, score, chunk_text, "
            "vector_rank is null and lexical_rank is null "
            "from donto.recall(%s, k => 3, context => %s)", (question, context)).fetchall()
        echo(f"[{ability}] {question}")
        echo(f"  gold turns: {sorted({g[2] for g in gold})}")
        for i, (place, s, e, score, text, standing) in enumerate(hits):
            number = f"{place}." if i == 0 or hits[i - 1][0] != place else "  "
            hit = any(s < ge and gs < e for gs, ge, _ in gold)
            mark = "standing" if standing else "HIT " if hit else "miss"
            echo(f"  {number} [{s}, {e}) score {score:.4f} {mark} {_short(text, 80)}")
    echo("")
    echo("k => 3 asks for three places: a chunk is one place; the standing block (the user's")
    echo("instructions and preferences in force that apply, 'standing') is one place however")
    echo("many statements it holds. The same from psql:")
    q = question.replace("'", "''").replace('"', '\\"')
    echo(f"  psql \"{db.shown(dsn)}\" -c \"select place, char_start, char_end, score, "
         f"left(chunk_text, 60) from donto.recall('{q}', k => 3, context => '{context}')\"")


def show_extraction(conn: psycopg.Connection, echo: Echo, res: loader.LoadResult, dsn: str,
                    provider_config: str | None = None) -> None:
    from donto_pg import extract
    from donto_pg.llm import ProviderPool

    _head(echo, "6. Projection B: extraction blocks")
    proj = extract.project_extraction(conn, revision_ids=[res.revision_id])[0]
    echo(f"select donto.project_extraction({res.revision_id}) -> {proj.blocks} blocks "
         f"{proj.by_kind} (turn-aligned, modality-pure, <= 4,000 chars)")
    block_id = conn.execute(
        "select block_id from donto.extraction_block where revision_id = %s and kind = 'dialogue' "
        "order by seq limit 1", (res.revision_id,)).fetchone()[0]
    prompt = conn.execute("select donto.render_for_extraction(%s)", (block_id,)).fetchone()[0]
    conn.commit()
    lines = prompt.splitlines()
    echo(f"select donto.render_for_extraction({block_id})  -- the only path to a prompt "
         f"({len(prompt):,} chars; first and last lines):")
    for line in lines[:8] + ["    ..."] + lines[-6:]:
        echo("  | " + _short(line, 104))

    _head(echo, "7. Extract claims, anchored by char offset")
    pool = ProviderPool.from_config(provider_config) if provider_config else None
    if pool is None:
        echo("no provider configured (--provider-config): using the offline rule-based "
             "baseline extractor, not a language model")
    report = extract.run_extraction(lambda: db.connect(dsn), revision_ids=[res.revision_id],
                                    providers=pool, alarm_after=0)
    echo(extract.format_report(report))

    _head(echo, "8. A claim traced back to its text (donto.claim_provenance)")
    row = conn.execute(
        "select claim_id, subject, predicate, object, revision_id, char_start, char_end, "
        "anchor_method, evidence_text, model, prompt_version, recall_chunks "
        "from donto.claim_provenance where char_start is not null and revision_id = %s "
        "order by claim_id limit 1", (res.revision_id,)).fetchone()
    if row is None:
        echo("no anchored claim in this run")
        return
    cid, s, p, o, rev, start, end, method, evidence, model, version, chunks = row
    exact = conn.execute("select donto.span_text(%s, %s, %s)", (rev, start, end)).fetchone()[0]
    echo(f"claim {cid}: ({s}, {p}, {o})  [{model}, prompt {version}]")
    echo(f"  evidence: revision {rev} [{start}, {end}) anchored {method}: "
         f"\"{_short(evidence, 90)}\"")
    echo(f"  select donto.span_text({rev}, {start}, {end}) returns the same text: "
         f"{'yes' if exact == evidence else 'NO'}; recall chunks over it: {chunks}")


def run(conn: psycopg.Connection, dsn: str, echo: Echo = print, path: Path = EXAMPLE,
        provider_config: str | None = None) -> dict[str, object]:
    """Run the demo on the conversation at PATH; returns the facts it showed."""
    conv = next(c for c in beam.iter_beam(path) if isinstance(c, beam.Conversation))
    rev = show_revision(conn, echo, conv)
    show_i3(conn, echo, rev)
    res = show_load(conn, echo, path)
    show_embed(conn, echo, res)
    show_recall(conn, echo, res, dsn)
    show_extraction(conn, echo, res, dsn, provider_config)
    return {"revision_id": rev, "chunks": res.chunks}
