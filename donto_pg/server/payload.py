"""PL/Python body of ``donto.recall_payload`` (sql/080-payload.sql).

Recall through SQL, pack with the pure :func:`donto_pg.core.payload.build_payload`.
"""

from __future__ import annotations

from typing import Any

from donto_pg.core.payload import (
    Hit,
    Interruptible,
    PayloadError,
    TokenizerCounter,
    build_payload,
    tokenizer_for_model,
)
from donto_pg.core.tokens import render_json
from donto_pg.server.interrupt import interrupt_check

# The model recall embeds the query with: donto.embedding_model_id holds the rule (which
# one is the default); it is asked only when some model matches, since it raises otherwise.
_MODEL_SQL = (
    "select m.name, m.source from donto.embedding_model as m "
    "where m.model_id = case when exists (select 1 from donto.embedding_model as e "
    "where $1::text is null or e.name = $1) then donto.embedding_model_id($1) end"
)
_RECALL_SQL = (
    "select r.statement_id, r.revision_id, r.char_start, r.char_end, r.chunk_text, r.score, "
    "pg_catalog.to_char(pg_catalog.lower(r.valid_time), 'YYYY-MM-DD') as valid_from, "
    "pg_catalog.to_char(pg_catalog.upper(r.valid_time) - 1, 'YYYY-MM-DD') as valid_to, "
    "x.kind "
    "from donto.recall(query => $1, k => $2, context => $3, as_of => $4, model => $5) "
    "with ordinality as r "
    "left join donto.x_standing as x "
    "on x.statement_id = r.statement_id and r.vector_rank is null and r.lexical_rank is null "
    "order by r.ordinality"
)


def recall_payload_sql(plpy: Any, query: str, max_tokens: int, k: int,
                       chunk_tokens: int | None, context: str | None, as_of: str | None,
                       model: str | None) -> str:
    """Body of ``donto.recall_payload``: recall, pack, return the payload as JSON text.
    Packing honours cancellation and statement_timeout: every count looks (now and
    then) at PostgreSQL's interrupt flags."""
    try:
        if max_tokens is None or max_tokens < 1:
            raise PayloadError(
                f"donto.recall_payload: max_tokens must be >= 1, got {max_tokens!r}")
        if chunk_tokens is not None and chunk_tokens < 0:
            raise PayloadError(
                f"donto.recall_payload: chunk_tokens must be >= 0 or null, got {chunk_tokens!r}")
        plan = plpy.prepare(_RECALL_SQL, ["text", "integer", "text", "timestamptz", "text"])
        rows = plpy.execute(plan, [query, k, context, as_of, model])
        plan = plpy.prepare(_MODEL_SQL, ["text"])
        found = plpy.execute(plan, [model])
        if found.nrows():
            tokenizer = tokenizer_for_model(found[0]["name"], found[0]["source"])
        else:
            tokenizer = tokenizer_for_model(model, model)
        hits = [
            Hit(statement_id=r["statement_id"], revision_id=r["revision_id"],
                char_start=r["char_start"], char_end=r["char_end"],
                chunk_text=r["chunk_text"] or "", score=r["score"],
                valid_from=r["valid_from"] or None, valid_to=r["valid_to"] or None,
                kind=r.get("kind"))
            for r in rows
        ]
        payload = build_payload(query, hits, max_tokens, chunk_tokens,
                                counter=Interruptible(TokenizerCounter(tokenizer),
                                                      interrupt_check(plpy)))
    except PayloadError as exc:
        plpy.error(str(exc), sqlstate="22023")
        raise  # plpy.error raises; this line is never reached
    return render_json(payload)
