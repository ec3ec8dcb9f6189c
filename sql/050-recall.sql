-- Projection A (recall): fixed, line-respecting windows of a revision,
-- embedded per model, searched by vector + full text, fused.

create or replace function donto._recall_windows(p_revision_id bigint, p_window integer)
returns table (
    chunk_index integer, char_start integer, char_end integer, chunk_text text,
    first_date date, min_date date, max_date date
)
language plpython3u
stable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].recall_windows(plpy, p_revision_id, p_window)
$py$;

comment on function donto._recall_windows(bigint, integer) is
'The line-respecting windows of a revision (donto_pg.windows), with the dates of their turns.';

create or replace function donto.recall_context_iri(p_document_iri text)
returns text
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* ctx:memory/episodic/<scheme>/<rest> for a document IRI <scheme>:<rest>. */
    select 'ctx:memory/episodic/' || pg_catalog.regexp_replace(p_document_iri, ':', '/');
$$;

comment on function donto.recall_context_iri(text) is
'The recall context of a document: beam:100K/1 -> ctx:memory/episodic/beam/100K/1.';

create or replace function donto.project_recall(
    rev_id bigint, window_chars integer default 1200, context text default null
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Projection A: cut revision REV_ID into line-respecting windows of WINDOW_CHARS
(zero overlap) and record each as a statement (mem:episodic/chunk,
object_lit {v: text, dt: date of its first turn}, valid_time from its turns'
dates) with its donto.x_memory_record. Returns the number of chunks.
Idempotent: a second call with the same arguments returns the existing count.
*/
declare
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_proj bigint;
    v_params jsonb := pg_catalog.jsonb_build_object('window_chars', window_chars);
    v_n integer;
begin
    if window_chars is null or window_chars < 1 then
        raise exception 'donto.project_recall: window_chars must be >= 1, got %', window_chars
            using errcode = '22023';
    end if;
    select r.document_id, d.iri into v_doc, v_iri
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.revision_id = rev_id;
    if not found then
        raise exception 'donto.project_recall: no revision %', rev_id using errcode = '22023';
    end if;
    v_ctx := donto.ensure_context(coalesce(context, donto.recall_context_iri(v_iri)), 'recall');
    perform pg_catalog.pg_advisory_xact_lock(2058, rev_id::integer);

    select p.projection_id into v_proj from donto.projection as p
    where p.revision_id = rev_id and p.kind = 'recall' and p.strategy = 'fixed-window'
          and p.params = v_params and p.context_id = v_ctx;
    if found then
        select pg_catalog.count(*)::integer into v_n
        from donto.x_memory_record as m where m.projection_id = v_proj;
        return v_n;
    end if;

    insert into donto.projection (revision_id, kind, strategy, params, context_id)
    values (rev_id, 'recall', 'fixed-window', v_params, v_ctx)
    returning projection_id into v_proj;

    create temp table _donto_windows on commit drop as
    select w.*, pg_catalog.nextval(pg_catalog.pg_get_serial_sequence('donto.statement',
                                                                      'statement_id')) as sid
    from donto._recall_windows(rev_id, window_chars) as w;

    insert into donto.statement (
        statement_id, subject, predicate, object_lit, context_id, valid_time, document_id,
        derived_from_revision, char_start, char_end
    ) overriding system value
    select
        w.sid,
        pg_catalog.format('chunk:%s/%s/%s', rev_id, window_chars, w.chunk_index),
        'mem:episodic/chunk',
        pg_catalog.jsonb_build_object('v', w.chunk_text, 'dt', w.first_date),
        v_ctx,
        case when w.min_date is null then '(,)'::daterange
             else pg_catalog.daterange(w.min_date, w.max_date, '[]') end,
        v_doc, rev_id, w.char_start, w.char_end
    from _donto_windows as w
    order by w.chunk_index;

    insert into donto.x_memory_record (
        statement_id, projection_id, revision_id, chunk_index, char_start, char_end, tsv
    )
    select w.sid, v_proj, rev_id, w.chunk_index, w.char_start, w.char_end,
           pg_catalog.to_tsvector('pg_catalog.english', w.chunk_text)
    from _donto_windows as w
    order by w.chunk_index;
    get diagnostics v_n = row_count;
    drop table _donto_windows;
    return v_n;
end;
$$;

comment on function donto.project_recall(bigint, integer, text) is
'Projection A: fixed line-respecting windows (default 1,200 chars, zero overlap) of a revision '
'as mem:episodic/chunk statements with memory records; idempotent; returns the chunk count.';

create or replace function donto.ensure_embedding_model(
    p_name text, p_source text, p_dimension integer
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Register an embedding model (name, source, dimension) once; refuse a dimension change. */
declare
    v_id integer;
    v_dim integer;
begin
    insert into donto.embedding_model (name, source, dimension)
    values (p_name, p_source, p_dimension)
    on conflict (name) do nothing;
    select m.model_id, m.dimension into strict v_id, v_dim
    from donto.embedding_model as m where m.name = p_name;
    if v_dim <> p_dimension then
        raise exception 'donto: model % is registered with dimension %, not %',
            p_name, v_dim, p_dimension using errcode = '22023';
    end if;
    return v_id;
end;
$$;

comment on function donto.ensure_embedding_model(text, text, integer) is
'Register an embedding model with its dimension (once); returns its id.';

create or replace function donto.ensure_embedding_index(p_model_id integer)
returns text
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/* Create (if missing) the partial HNSW cosine index of one model; return its name. */
declare
    v_dim integer;
    v_name text := 'embedding_hnsw_m' || p_model_id;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto: no embedding model %', p_model_id using errcode = '22023';
    end if;
    execute pg_catalog.format(
        'create index if not exists %I on donto.embedding using hnsw '
        '((embedding::vector(%s)) vector_cosine_ops) where model_id = %s',
        v_name, v_dim, p_model_id);
    return v_name;
end;
$$;

comment on function donto.ensure_embedding_index(integer) is
'Create the HNSW (cosine) index of one embedding model over donto.embedding, if missing.';

create or replace function donto.embed_query(query text, model text default null)
returns vector
language plpython3u
volatile
set search_path to pg_catalog, public, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].embed_query(query, model)
$py$;

comment on function donto.embed_query(text, text) is
'Embed a text inside the database with a sentence-transformers model (cached per backend).';

create or replace function donto.recall_by_vector(
    embedding vector,
    query text default null,
    k integer default 10,
    context text default null,
    as_of timestamptz default null,
    model text default null,
    arms text default 'hybrid',
    pool integer default null
)
returns table (
    statement_id bigint, revision_id bigint, char_start integer, char_end integer,
    chunk_text text, valid_time daterange, score double precision,
    vector_rank integer, lexical_rank integer
)
language plpgsql
volatile
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K recall chunks for a query vector (and its text, for the lexical arm).
ARMS: 'vector', 'lexical' or 'hybrid' (reciprocal rank fusion, k = 60).
Ties in the fused score go to the later valid time (latest value wins).
CONTEXT limits to one context IRI; AS_OF to what the database knew then.
*/
#variable_conflict use_column
declare
    v_model integer;
    v_dim integer;
    v_ctx bigint;
    v_pool integer := coalesce(pool, greatest(k * 5, 50));
    v_exact boolean := false;
    v_tq tsquery;
begin
    if k is null or k < 1 then
        raise exception 'donto.recall: k must be >= 1' using errcode = '22023';
    end if;
    if arms not in ('vector', 'lexical', 'hybrid') then
        raise exception 'donto.recall: arms must be vector, lexical or hybrid, not %', arms
            using errcode = '22023';
    end if;
    if context is not null then
        select c.context_id into v_ctx from donto.context as c where c.iri = context;
        if not found then
            raise exception 'donto.recall: no context %', context using errcode = '22023';
        end if;
    end if;
    if arms <> 'lexical' then
        select m.model_id, m.dimension into v_model, v_dim from donto.embedding_model as m
        where model is null or m.name = model
        order by (m.name = 'all-MiniLM-L6-v2') desc, m.model_id
        limit 1;
        if not found then
            raise exception 'donto.recall: no embedding model % (run donto-pg embed)',
                coalesce(model, '(default)') using errcode = '22023';
        end if;
        if embedding is null then
            raise exception 'donto.recall: the vector arm needs an embedding' using errcode = '22023';
        end if;
        if vector_dims(embedding) <> v_dim then
            raise exception 'donto.recall: query vector has % dimensions, the model %',
                vector_dims(embedding), v_dim using errcode = '22023';
        end if;
        -- A small context is searched exactly; a large one through HNSW, with
        -- iterative scans so that filtering never returns fewer than k rows.
        if v_ctx is not null then
            v_exact := (select pg_catalog.count(*) from donto.statement as s
                        where s.context_id = v_ctx and s.predicate = 'mem:episodic/chunk')
                       <= 50000;
        end if;
        perform pg_catalog.set_config('hnsw.iterative_scan', 'relaxed_order', true);
        perform pg_catalog.set_config('hnsw.ef_search', greatest(100, v_pool)::text, true);
    end if;
    if arms <> 'vector' and query is not null then
        select pg_catalog.string_agg(pg_catalog.quote_literal(l), ' | ')::tsquery into v_tq
        from pg_catalog.unnest(
            pg_catalog.tsvector_to_array(pg_catalog.to_tsvector('pg_catalog.english', query))
        ) as l;
    end if;

    create temp table if not exists _donto_vec (statement_id bigint, r integer) on commit drop;
    create temp table if not exists _donto_lex (statement_id bigint, r integer) on commit drop;
    truncate _donto_vec;
    truncate _donto_lex;

    if arms <> 'lexical' then
        execute pg_catalog.format($q$
            insert into _donto_vec
            select c.statement_id, pg_catalog.row_number() over (order by c.d)
            from (
                select e.statement_id, (e.embedding::vector(%1$s)) <=> $1 as d
                from donto.embedding as e
                inner join donto.statement as s on s.statement_id = e.statement_id
                where e.model_id = %3$s
                      and ($2::bigint is null or s.context_id = $2)
                      and s.predicate = 'mem:episodic/chunk'
                      and ($3::timestamptz is null or s.tx_from <= $3)
                      and not exists (
                          select 1 from donto.retraction as r
                          where r.statement_id = s.statement_id
                                and ($3::timestamptz is null or r.tx_from <= $3))
                order by ((e.embedding::vector(%1$s)) <=> $1) %2$s
                limit $4
            ) as c $q$,
            v_dim,
            -- "+ 0" hides the expression from the HNSW index: an exact scan.
            case when v_exact then '+ 0' else '' end,
            v_model)
        using embedding, v_ctx, as_of, v_pool;
    end if;

    if v_tq is not null then
        insert into _donto_lex
        select c.statement_id, pg_catalog.row_number() over (order by c.rank desc, c.statement_id)
        from (
            select m.statement_id, pg_catalog.ts_rank_cd(m.tsv, v_tq, 1) as rank
            from donto.x_memory_record as m
            inner join donto.statement as s on s.statement_id = m.statement_id
            where m.tsv @@ v_tq
                  and (v_ctx is null or s.context_id = v_ctx)
                  and (as_of is null or s.tx_from <= as_of)
                  and not exists (
                      select 1 from donto.retraction as r
                      where r.statement_id = s.statement_id
                            and (as_of is null or r.tx_from <= as_of))
            order by rank desc, m.statement_id
            limit v_pool
        ) as c;
    end if;

    return query
    select
        s.statement_id, s.derived_from_revision, s.char_start, s.char_end,
        s.object_lit ->> 'v', s.valid_time,
        f.score, f.vr::integer, f.lr::integer
    from (
        select
            coalesce(v.statement_id, l.statement_id) as statement_id,
            (coalesce(1.0 / (60 + v.r), 0) + coalesce(1.0 / (60 + l.r), 0))::float8 as score,
            v.r as vr, l.r as lr
        from _donto_vec as v full outer join _donto_lex as l using (statement_id)
    ) as f
    inner join donto.statement as s on s.statement_id = f.statement_id
    order by pg_catalog.round(f.score::numeric, 6) desc,
             pg_catalog.upper(s.valid_time) desc nulls last,
             s.statement_id desc
    limit k;
end;
$$;

comment on function donto.recall_by_vector(
    vector, text, integer, text, timestamptz, text, text, integer
) is
'Recall for clients that embed themselves: vector (HNSW/exact) + lexical (full text) arms, '
'reciprocal rank fusion, latest valid time wins ties.';

create or replace function donto.recall(
    query text,
    k integer default 10,
    context text default null,
    as_of timestamptz default null,
    model text default null,
    arms text default 'hybrid',
    pool integer default null
)
returns table (
    statement_id bigint, revision_id bigint, char_start integer, char_end integer,
    chunk_text text, valid_time daterange, score double precision,
    vector_rank integer, lexical_rank integer
)
language plpgsql
volatile
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K recall chunks for a text query, from psql:
    select * from donto.recall('where did I move in March?', k => 5);
Embeds the query in the database, then calls donto.recall_by_vector.
*/
declare
    v_vec vector;
    v_model text := model;
begin
    if query is null or btrim(query) = '' then
        raise exception 'donto.recall: query is empty' using errcode = '22023';
    end if;
    if arms <> 'lexical' then
        if v_model is null then
            select m.name into v_model from donto.embedding_model as m
            order by (m.name = 'all-MiniLM-L6-v2') desc, m.model_id limit 1;
        end if;
        v_vec := donto.embed_query(query, v_model);
    end if;
    return query
    select * from donto.recall_by_vector(v_vec, query, k, context, as_of, v_model, arms, pool);
end;
$$;

comment on function donto.recall(text, integer, text, timestamptz, text, text, integer) is
'Recall from psql: top-K chunks for a text query (hybrid vector + lexical, fused), '
'with statement id, revision, char span, text, valid time, score and each arm''s rank.';

create or replace function donto.ingest_embeddings(p_model_id integer)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Move the vectors the caller staged (binary COPY into its temp table
_donto_embedding_stage(statement_id, embedding)) into donto.embedding for one
model. Vectors that already exist are skipped (resumable); a wrong dimension or
a statement that is not a recall chunk is refused. Returns the rows added.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto.ingest_embeddings: no model %', p_model_id using errcode = '22023';
    end if;
    select st.statement_id into v_bad
    from pg_temp._donto_embedding_stage as st
    where vector_dims(st.embedding) <> v_dim
          or not exists (select 1 from donto.x_memory_record as m
                         where m.statement_id = st.statement_id)
    limit 1;
    if v_bad is not null then
        raise exception 'donto.ingest_embeddings: statement % is not a recall chunk or its vector '
            'does not have % dimensions', v_bad, v_dim using errcode = '22023';
    end if;
    insert into donto.embedding (statement_id, model_id, embedding)
    select st.statement_id, p_model_id, st.embedding
    from pg_temp._donto_embedding_stage as st
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_embeddings(integer) is
'Move staged vectors (temp table _donto_embedding_stage) into donto.embedding; skips existing.';
