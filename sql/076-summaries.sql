-- Session summaries: one summary per session of a revision (donto-pg summarize,
-- donto_pg/summaries.py), recorded in ctx:memory/summary/<doc> and embedded as a
-- coarse recall key; donto.recall never returns them, donto.recall_summaries does.

create or replace function donto.summary_context_iri(p_document_iri text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* ctx:memory/summary/<scheme>/<rest> for a document IRI <scheme>:<rest>. */
    select 'ctx:memory/summary/' || pg_catalog.regexp_replace(p_document_iri, ':', '/');
$$;

comment on function donto.summary_context_iri(text) is
'The session-summary context of a document: beam:100K/1 -> ctx:memory/summary/beam/100K/1. '
'Immutable, security invoker.';

create or replace view donto.session_span as
select
    t.revision_id,
    t.session,
    pg_catalog.min(t.seq) as seq_first,
    pg_catalog.max(t.seq) as seq_last,
    (pg_catalog.array_agg(t.turn_id order by t.seq))[1] as turn_first,
    (pg_catalog.array_agg(t.turn_id order by t.seq desc))[1] as turn_last,
    pg_catalog.count(*) as turns,
    pg_catalog.min(t.header_start) as char_start,
    pg_catalog.max(t.char_end) as char_end,
    pg_catalog.min(t.time_anchor) as first_date,
    pg_catalog.max(t.time_anchor) as last_date
from donto.turn as t
group by t.revision_id, t.session;

comment on view donto.session_span is
'Sessions (BEAM batches) of every revision: first/last turn, turn count, char span from the '
'first turn''s header to the last turn''s end, and dates.';

create or replace function donto.own_session_summary(
    p_revision_id bigint, p_session integer, p_summarizer text
)
returns bigint
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
The summary of session P_SESSION of revision P_REVISION_ID by P_SUMMARIZER that this
session's login filed (donto._acts_for: the login itself, or the schema's owner for the
owner's sessions) and nobody retracted, or null. A summary another login filed under
the same name is not this login's: donto-pg summarize makes its own beside it.
*/
    select pg_catalog.min(x.statement_id)
    from donto.x_session_summary as x
    inner join donto.statement as s on x.statement_id = s.statement_id
    where x.revision_id = p_revision_id and x.session = p_session
          and x.summarizer = p_summarizer and donto._acts_for(s.login_role)
          and not exists (select 1 from donto.retraction as r
                          where r.statement_id = x.statement_id);
$$;

comment on function donto.own_session_summary(bigint, integer, text) is
'This login''s current summary of a session by a summarizer (null: none), as '
'donto.record_session_summary and donto-pg summarize find it.';

create or replace function donto.record_session_summary(
    p_revision_id bigint,
    p_session integer,
    p_summary text,
    p_method text,
    p_summarizer text,
    p_meta jsonb default '{}'
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record the summary of one session of a revision as a coarse recall key: a
mem:summary/session statement in ctx:memory/summary/<document> whose span is the
session's turns (object_lit {v: text, method, summarizer, session, meta}, valid time
from the session's dates), with its donto.x_session_summary row. METHOD is
'extractive' or 'abstractive'. Idempotent per (revision, session, summarizer) and
login (donto._acts_for): the first summary this login filed stays, unless retracted,
and its id is returned while the login may still add to the document; a summary another
login filed under the same summarizer name is not this login's (the statement names who
filed it).
*/
declare
    v_span record;
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_sid bigint;
begin
    if p_summary is null or btrim(p_summary) = '' then
        raise exception 'donto.record_session_summary: the summary is empty'
            using errcode = '22023';
    end if;
    if p_method not in ('extractive', 'abstractive') then
        raise exception 'donto.record_session_summary: method must be extractive or '
            'abstractive, not %', p_method using errcode = '22023';
    end if;
    select s.* into v_span from donto.session_span as s
    where s.revision_id = p_revision_id and s.session is not distinct from p_session;
    if not found then
        raise exception 'donto.record_session_summary: revision % has no session %',
            p_revision_id, p_session using errcode = '22023';
    end if;
    -- Checked before the lock: a login that filed a summary here before the document was
    -- given away would otherwise hold the new writer's lock with a call that succeeds.
    select r.document_id, d.iri into v_doc, v_iri
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.revision_id = p_revision_id;
    v_ctx := donto._claim_context(donto.summary_context_iri(v_iri), 'summary', v_doc,
                                  'donto.record_session_summary');
    perform donto._lock('summary', p_revision_id);
    v_sid := donto.own_session_summary(p_revision_id, p_session, p_summarizer);
    if v_sid is not null then
        return v_sid;
    end if;
    insert into donto.statement (
        subject, predicate, object_lit, context_id, valid_time, document_id,
        derived_from_revision, char_start, char_end
    )
    values (
        pg_catalog.format('session:%s/%s', p_revision_id, p_session), 'mem:summary/session',
        pg_catalog.jsonb_build_object('v', p_summary, 'method', p_method,
                                      'summarizer', p_summarizer, 'session', p_session,
                                      'meta', coalesce(p_meta, '{}')),
        v_ctx,
        case when v_span.first_date is null then '(,)'::daterange
             else pg_catalog.daterange(v_span.first_date, v_span.last_date, '[]') end,
        v_doc, p_revision_id, v_span.char_start, v_span.char_end
    )
    returning statement_id into v_sid;
    insert into donto.x_session_summary (
        statement_id, revision_id, session, method, summarizer, seq_first, seq_last,
        turn_first, turn_last, char_start, char_end, tsv
    )
    values (
        v_sid, p_revision_id, p_session, p_method, p_summarizer, v_span.seq_first,
        v_span.seq_last, v_span.turn_first, v_span.turn_last, v_span.char_start,
        v_span.char_end, pg_catalog.to_tsvector('pg_catalog.english', p_summary)
    );
    return v_sid;
end;
$$;

comment on function donto.record_session_summary(bigint, integer, text, text, text, jsonb) is
'Record a session''s summary (extractive or abstractive) as a mem:summary/session recall key '
'spanning the session''s turns; idempotent per (revision, session, summarizer). Volatile, '
'security definer.';

create or replace function donto.recall_summaries_by_vector(
    embedding vector,
    query text default null,
    k integer default 3,
    context text default null,
    model text default null,
    arms text default 'hybrid',
    by_summarizer text default null,
    pool integer default null
)
returns table (
    statement_id bigint, revision_id bigint, session integer, char_start integer,
    char_end integer, summary text, method text, summarizer text, score double precision,
    vector_rank integer, lexical_rank integer
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K session summaries for a query vector (and its text): exact cosine order,
full-text rank, reciprocal rank fusion (k = 60) as donto.recall_by_vector. CONTEXT is a
summary context (ctx:memory/summary/...) or the document's recall context
(ctx:memory/episodic/..., mapped to its summaries); BY_SUMMARIZER picks one summarizer.
*/
#variable_conflict use_column
declare
    v_model integer;
    v_ctx bigint;
    v_pool integer := coalesce(pool, greatest(k * 5, 50));
begin
    perform donto._check_query(query, 'donto.recall_summaries_by_vector', true);
    if k is null or k < 1 then
        raise exception 'donto.recall_summaries: k must be >= 1' using errcode = '22023';
    end if;
    if arms not in ('vector', 'lexical', 'hybrid') then
        raise exception 'donto.recall_summaries: arms must be vector, lexical or hybrid, not %',
            arms using errcode = '22023';
    end if;
    if context is not null then
        select c.context_id into v_ctx from donto.context as c
        where c.iri = pg_catalog.regexp_replace(context, '^ctx:memory/episodic/',
                                                'ctx:memory/summary/');
        if not found then
            raise exception 'donto.recall_summaries: no summaries in context %', context
                using errcode = '22023';
        end if;
    end if;
    if arms <> 'lexical' then
        v_model := donto.embedding_model_id(model);
        if embedding is null then
            raise exception 'donto.recall_summaries: the vector arm needs a vector'
                using errcode = '22023';
        end if;
    end if;
    return query
    with keys as (
        select x.statement_id, x.tsv
        from donto.x_session_summary as x
        inner join donto.statement as s on x.statement_id = s.statement_id
        where (v_ctx is null or s.context_id = v_ctx)
              and (by_summarizer is null or x.summarizer = by_summarizer)
              and not exists (select 1 from donto.retraction as rt
                              where rt.statement_id = s.statement_id)
    ),

    tq as (
        select pg_catalog.string_agg(pg_catalog.quote_literal(l.l), ' | ')::tsquery as q
        from pg_catalog.unnest(pg_catalog.tsvector_to_array(
            pg_catalog.to_tsvector('pg_catalog.english', coalesce(query, '')))) as l (l)
        where arms <> 'vector'
    ),

    vec as (
        select c.statement_id, pg_catalog.row_number() over (order by c.d) as r
        from (
            select y.statement_id, e.embedding <=> recall_summaries_by_vector.embedding as d
            from keys as y
            inner join donto.embedding as e
                on y.statement_id = e.statement_id and e.model_id = v_model
            where arms <> 'lexical'
            order by d
            limit v_pool
        ) as c
    ),

    lex as (
        select c.statement_id,
               pg_catalog.row_number() over (order by c.rank desc, c.statement_id) as r
        from (
            select y.statement_id, pg_catalog.ts_rank_cd(y.tsv, tq.q, 1) as rank
            from keys as y cross join tq
            where tq.q is not null and y.tsv @@ tq.q
            order by rank desc, y.statement_id
            limit v_pool
        ) as c
    )

    select
        x.statement_id, x.revision_id, x.session, x.char_start, x.char_end,
        s.object_lit ->> 'v', x.method, x.summarizer, f.score, f.vr::integer, f.lr::integer
    from (
        select
            coalesce(v.statement_id, l.statement_id) as statement_id,
            (coalesce(1.0 / (60 + v.r), 0) + coalesce(1.0 / (60 + l.r), 0))::float8 as score,
            v.r as vr,
            l.r as lr
        from vec as v full outer join lex as l using (statement_id)
    ) as f
    inner join donto.x_session_summary as x on f.statement_id = x.statement_id
    inner join donto.statement as s on x.statement_id = s.statement_id
    order by pg_catalog.round(f.score::numeric, 6) desc,
             pg_catalog.upper(s.valid_time) desc nulls last,
             x.statement_id desc
    limit k;
end;
$$;

comment on function donto.recall_summaries_by_vector(
    vector, text, integer, text, text, text, text, integer
) is
'Session-summary recall for clients that embed themselves: vector + full-text ranks fused; '
'a separate arm, never mixed into donto.recall. Stable, security invoker.';

create or replace function donto.recall_summaries(
    query text,
    k integer default 3,
    context text default null,
    model text default null,
    arms text default 'hybrid',
    by_summarizer text default null,
    pool integer default null
)
returns table (
    statement_id bigint, revision_id bigint, session integer, char_start integer,
    char_end integer, summary text, method text, summarizer text, score double precision,
    vector_rank integer, lexical_rank integer
)
language plpgsql
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K session summaries for a text query, from psql (the session-summary recall arm,
off by default: donto.recall never includes it):
    select session, score, summary from donto.recall_summaries('where did I move?',
        k => 2, context => 'ctx:memory/episodic/beam/100K/1');
*/
declare
    v_vec vector;
    v_model text := model;
begin
    perform donto._check_query(query, 'donto.recall_summaries');
    if query is null or btrim(query) = '' then
        raise exception 'donto.recall_summaries: query is empty' using errcode = '22023';
    end if;
    if arms <> 'lexical' then
        select m.name into v_model from donto.embedding_model as m
        where m.model_id = donto.embedding_model_id(model);
        v_vec := donto.embed_query(query, v_model);
    end if;
    return query
    select * from donto.recall_summaries_by_vector(
        v_vec, query, k, context, v_model, arms, by_summarizer, pool);
end;
$$;

comment on function donto.recall_summaries(text, integer, text, text, text, text, integer) is
'Session-summary recall from psql: top-K summaries (session, span, text, method) for a query; '
'embeds it in the database. Volatile (embeds), security invoker.';
