-- Token-budgeted recall payloads: donto.recall hits packed into one jsonb
-- whose rendered size never exceeds max_tokens (the logic is donto_pg.core.payload).

create or replace function donto.recall_payload(
    query text,
    max_tokens integer,
    k integer default 20,
    chunk_tokens integer default null,
    context text default null,
    as_of timestamptz default null,
    model text default null
)
returns jsonb
language plpython3u
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].payload.recall_payload_sql(
    plpy, query, max_tokens, k, chunk_tokens, context, as_of, model)
$py$;

comment on function donto.recall_payload(
    text, integer, integer, integer, text, timestamptz, text
) is
'Recall as a token-budgeted payload for a model: {query, memories, chunks, truncated, tokens, '
'omitted} from donto.recall (same k, context, as_of, model). Its compact JSON rendering, '
'counted with the embedding model''s tokenizer, never exceeds MAX_TOKENS; raw chunk texts '
'stop at CHUNK_TOKENS (default 60% of MAX_TOKENS); tokens is the exact size; omitted says what '
'was cut (counts and statement ids); a MAX_TOKENS below the empty envelope is an error. '
'Volatile (recall embeds the query), security invoker (the caller''s rights, donto_reader '
'suffices).';
