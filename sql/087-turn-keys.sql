-- Recall keys per user turn (migration 017): the short text of each user turn,
-- embedded on its own and indexed for full text, a second way to find the chunk
-- that holds it (the key arms of donto.recall_by_vector).

create or replace function donto._turn_key_texts(p_revision_id bigint)
returns table (
    seq integer, header_start integer, char_start integer, char_end integer, txt text
)
language plpython3u
stable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].recall.turn_key_texts(plpy, p_revision_id)
$py$;

comment on function donto._turn_key_texts(bigint) is
'The user turns of a revision with their text (seq, header, span, text), for the recall keys.';

create or replace function donto.project_turn_keys(rev_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The recall keys of revision REV_ID: one donto.x_turn_key row per user turn with
text, for every recall projection of the revision (its own, or one grown to it
by donto._extend_recall), holding the turn's text (its char span
[char_start, char_end) of the body) and its full-text vector. Idempotent and
append-only: a turn already keyed in a projection (same header offset) is
skipped, so a grown conversation adds keys for its new turns only. The full-text
vector covers a turn's first 100,000 characters (a tsvector holds at most 1 MB; the
embedder reads far fewer). Vectors come
from donto-pg embed (donto.ingest_turn_key_embeddings). Returns the keys added.
*/
declare
    v_n integer := 0;
    v_add integer;
    v_proj bigint;
    v_doc bigint;
begin
    select r.document_id into v_doc from donto.revision as r where r.revision_id = rev_id;
    if not found then
        raise exception 'donto.project_turn_keys: no revision %', rev_id using errcode = '22023';
    end if;
    perform donto._check_document_writer(v_doc, 'donto.project_turn_keys');
    perform donto._lock('turn-keys', rev_id);
    for v_proj in
        select p.projection_id from donto.projection as p
        where p.kind = 'recall'
              and (p.revision_id = rev_id
                   or exists (select 1 from donto.projection_extension as pe
                              where pe.projection_id = p.projection_id
                                    and pe.revision_id = rev_id))
        order by p.projection_id
    loop
        insert into donto.x_turn_key (
            projection_id, revision_id, turn_seq, header_start, char_start, char_end, key_text,
            key_tsv
        )
        select v_proj, rev_id, t.seq, t.header_start, t.char_start, t.char_end, t.txt,
               -- a tsvector holds at most 1 MB: a pasted log of a turn is keyed by its start
               pg_catalog.to_tsvector('pg_catalog.english', pg_catalog.left(t.txt, 100000))
        from donto._turn_key_texts(rev_id) as t
        where not exists (select 1 from donto.x_turn_key as k
                              where k.projection_id = v_proj
                                    and k.header_start = t.header_start)
        order by t.seq;
        get diagnostics v_add = row_count;
        v_n := v_n + v_add;
    end loop;
    return v_n;
end;
$$;

comment on function donto.project_turn_keys(bigint) is
'Recall keys: one row per user turn of each recall projection of a revision (its text and '
'full-text vector, anchored by char span); idempotent, append-only; returns the keys added.';

create or replace function donto._turn_key_vector_projection()
returns trigger
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Trigger body (before insert on donto.x_turn_key_vector): a key vector's
projection is its key's projection, whatever the inserter wrote, so that recall
can search one conversation's key vectors alone (donto._recall_keys).
*/
begin
    select k.projection_id into new.projection_id
    from donto.x_turn_key as k where k.key_id = new.key_id;
    return new;
end;
$$;

comment on function donto._turn_key_vector_projection() is
'Trigger function: donto.x_turn_key_vector.projection_id is the projection of the vector''s key.';

drop trigger if exists turn_key_vector_projection on donto.x_turn_key_vector;
create trigger turn_key_vector_projection before insert on donto.x_turn_key_vector
for each row execute function donto._turn_key_vector_projection();

create or replace function donto._ensure_key_indexes(p_model_id integer)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Create the missing HNSW cosine indexes of one model's recall-key vectors for the
projections holding more than a quarter of donto._index_exact_max() of them (2,500
by default: an exact scan of 10,000 key vectors costs about 10 ms on two cores,
BENCHMARKS.md; the bound of donto.ensure_context_indexes, which calls this, so a
writer cannot lower it either): one partial index per
projection (x_turn_key_vector_hnsw_m<model>_p<projection>), so that the key arm
of a large conversation reads that index alone; smaller ones are scanned
exactly. Returns how many were created. Index names and bounds are built from
id numbers only.
*/
declare
    v_dim integer;
    v_min bigint := donto._index_exact_max() / 4;
    v_projs bigint[];
    v_proj bigint;
    v_name text;
    v_n integer := 0;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto: no embedding model %', p_model_id using errcode = '22023';
    end if;
    -- The projections missing their index first (no scan of the table may be open during
    -- CREATE INDEX), without the lock: none missing, nothing held.
    select pg_catalog.array_agg(x.projection_id order by x.projection_id) into v_projs
    from (
        select v.projection_id from donto.x_turn_key_vector as v
        where v.model_id = p_model_id
        group by v.projection_id
        having pg_catalog.count(*) > v_min
    ) as x
    where pg_catalog.to_regclass(pg_catalog.format('donto.x_turn_key_vector_hnsw_m%s_p%s',
                                                   p_model_id, x.projection_id)) is null;
    if v_projs is not null then
        perform donto._lock('key-indexes', p_model_id);
    end if;
    foreach v_proj in array coalesce(v_projs, '{}') loop
        v_name := pg_catalog.format('x_turn_key_vector_hnsw_m%s_p%s', p_model_id, v_proj);
        continue when pg_catalog.to_regclass('donto.' || v_name) is not null;
        execute pg_catalog.format(
            'create index %I on donto.x_turn_key_vector using hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) '
            'where model_id = %s and projection_id = %s',
            v_name, v_dim, p_model_id, v_proj);
        v_n := v_n + 1;
    end loop;
    return v_n;
end;
$$;

comment on function donto._ensure_key_indexes(integer) is
'Create the HNSW (cosine) index of each recall projection above a quarter of '
'donto._index_exact_max() key vectors of one model, if missing; returns how many were created.';

create or replace function donto.ingest_turn_key_embeddings(
    p_model_id integer, p_ids bigint[], p_vectors text[]
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Store vectors (pgvector text, one per id) of recall keys P_IDS (donto.x_turn_key)
for model P_MODEL_ID, as donto-pg embed computed them. Existing vectors are
kept; an id that is not a key (null included), a null vector, a wrong dimension
or unequal array lengths are refused. Returns the rows added.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    v_dim := donto._vector_batch_dimension(
        'donto.ingest_turn_key_embeddings', p_model_id, p_ids, p_vectors);
    select u.id into v_bad
    from unnest(p_ids, p_vectors) as u (id, v)
    where u.v is null or vector_dims(u.v::vector) <> v_dim
          or not exists (select 1 from donto.x_turn_key as x where x.key_id = u.id)
    limit 1;
    -- FOUND, not v_bad: a null id is no key either
    if found then
        raise exception 'donto.ingest_turn_key_embeddings: % is not a recall key or its vector '
            'does not have % dimensions', coalesce(v_bad::text, 'null'), v_dim
            using errcode = '22023';
    end if;
    perform donto._check_may_embed('donto.ingest_turn_key_embeddings', p_ids, true);
    insert into donto.x_turn_key_vector (key_id, model_id, embedding)
    select u.id, p_model_id, u.v::vector
    from unnest(p_ids, p_vectors) as u (id, v)
    order by u.id
    on conflict (key_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_turn_key_embeddings(integer, bigint[], text[]) is
'Store client-computed vectors of recall keys (user turns) for one model; skips existing ones.';

create or replace function donto._recall_keys(
    p_embedding vector, p_query text, p_context_id bigint, p_as_of timestamptz,
    p_model_id integer, p_pool integer, p_vector boolean, p_lexical boolean
)
returns table (statement_id bigint, key_vector_rank bigint, key_lexical_rank bigint)
language plpgsql
stable
rows 100
set search_path to pg_catalog, public, pg_temp
as $$
/*
The key arms of donto.recall_by_vector: the recall keys (user turns,
donto.x_turn_key) of context P_CONTEXT_ID (null: every context) known at
P_AS_OF, ranked by cosine distance of their vectors for model P_MODEL_ID to
P_EMBEDDING (P_VECTOR) and by the lexical arm's BM25-like score over the keys
(P_LEXICAL: idf over the context's keys x saturating ts_rank, the scaffolding
lexemes weighed down as in donto._recall_lexical; exact, so left out when the
context has more than donto.recall_key_lexical_max keys, default 2,500); the
top P_POOL of each, each mapped to the chunk of its projection that holds the
turn's header (known at P_AS_OF, not superseded by then; a key whose chunk was
retracted by then is left out, and so is a key whose turn holds words forgotten by then,
donto._forgotten_text). The key vector arm reads the projection's own HNSW
index when the context has one projection and donto._ensure_key_indexes gave it one,
else it scans the projections' key vectors exactly. Returns one row per chunk with its
best rank in each key arm (null: not ranked by it).
*/
#variable_conflict use_column
declare
    v_scaffold text[] := donto._recall_scaffold();
    v_scaffold_w double precision := donto._recall_number(
        'recall_lexical_scaffold_weight', '0.5', 0, 1e9);
    v_projs bigint[];
    v_tqs tsquery[];
    v_tws double precision[];
    v_dim integer;
    v_kv_ids bigint[];
    v_lex_max bigint := donto._recall_integer(
        'recall_key_lexical_max', '2500', 0, 9223372036854775807
    );
begin
    -- The recall projections searched that have keys (none: nothing to rank), less
    -- those a changed conversation superseded by P_AS_OF (their keys would take places
    -- in the pool and then stand for retracted chunks).
    select pg_catalog.array_agg(p.projection_id order by p.projection_id) into v_projs
    from donto.projection as p
    where p.kind = 'recall' and (p_context_id is null or p.context_id = p_context_id)
          and exists (select 1 from donto.x_turn_key as tk
                      where tk.projection_id = p.projection_id)
          and not exists (
              select 1 from donto.projection_superseded as ps
              where ps.projection_id = p.projection_id
                    and (p_as_of is null or ps.created_at <= p_as_of));
    if v_projs is null then
        return;
    end if;
    -- The lexical key arm reads every key of the context (its cost grows with them,
    -- about 4 us each): above donto.recall_key_lexical_max keys (default 2,500, the
    -- bound of the exact key vector scan) it is left out.
    if p_lexical and (
        select pg_catalog.count(*) from (
            select 1 from donto.x_turn_key as k0 where k0.projection_id = any(v_projs)
            limit v_lex_max + 1) as x
    ) > v_lex_max then
        p_lexical := false;
    end if;
    if p_lexical and p_query is not null then
        select pg_catalog.array_agg(q.tq order by q.t),
               pg_catalog.array_agg(case when q.t = any(v_scaffold) then v_scaffold_w else 1 end
                                    order by q.t)
        into v_tqs, v_tws
        from (select distinct u.lexeme as t, pg_catalog.quote_literal(u.lexeme)::tsquery as tq
              from pg_catalog.unnest(pg_catalog.to_tsvector('pg_catalog.english', p_query)) as u
        ) as q;
    end if;
    -- The key vector arm first, into an array of key ids in rank order: through the
    -- projection's own HNSW index when the context has one projection and it has one
    -- (donto._ensure_key_indexes; the ids inlined, so that the planner can use the
    -- partial index), else by an exact scan of the projections' key vectors.
    if p_vector and p_embedding is not null then
        select m.dimension into v_dim from donto.embedding_model as m
        where m.model_id = p_model_id;
        if pg_catalog.cardinality(v_projs) = 1 and pg_catalog.to_regclass(pg_catalog.format(
                'donto.x_turn_key_vector_hnsw_m%s_p%s', p_model_id, v_projs[1])) is not null then
            perform pg_catalog.set_config('hnsw.iterative_scan', 'relaxed_order', true);
            execute pg_catalog.format($q$
                select pg_catalog.array_agg(x.key_id order by x.d, x.key_id)
                from (
                    select v.key_id, (v.embedding::vector(%1$s)) <=> $1 as d
                    from donto.x_turn_key_vector as v
                    where v.model_id = %2$s and v.projection_id = %3$s
                          and ($2::timestamptz is null or exists (
                              select 1 from donto.x_turn_key as k
                              where k.key_id = v.key_id and k.created_at <= $2))
                    order by (v.embedding::vector(%1$s)) <=> $1
                    limit $3
                ) as x $q$, v_dim, p_model_id, v_projs[1])
            into v_kv_ids
            using p_embedding, p_as_of, p_pool;
        else
            select pg_catalog.array_agg(x.key_id order by x.d, x.key_id) into v_kv_ids
            from (
                -- (the keys' own rows are read only for AS_OF: reading them for every
                -- vector of a large conversation would cost twice the scan)
                select v.key_id, v.embedding <=> p_embedding as d
                from donto.x_turn_key_vector as v
                where v.model_id = p_model_id and v.projection_id = any(v_projs)
                      and (p_as_of is null or exists (
                          select 1 from donto.x_turn_key as k
                          where k.key_id = v.key_id and k.created_at <= p_as_of))
                order by 2, 1
                limit p_pool
            ) as x;
        end if;
    end if;
    return query
    with keys as materialized (
        -- (the lexical key arm's keys: read only when it is asked for)
        select k.key_id, k.projection_id, k.header_start, k.key_tsv
        from donto.x_turn_key as k
        where p_lexical and v_tqs is not null
              and k.projection_id = any(v_projs) and (p_as_of is null or k.created_at <= p_as_of)
    ),
    kv as (
        select u.key_id, u.r from unnest(v_kv_ids) with ordinality as u (key_id, r)
    ),
    -- (materialized: computed once, whatever the planner thinks the chunks are;
    -- a projection loaded since the last ANALYZE is estimated at one row)
    n as materialized (
        select pg_catalog.count(*)::float8 as n from keys
    ),
    terms as materialized (
        select t.tq, t.w, pg_catalog.count(k.key_id)::float8 as df
        from unnest(v_tqs, v_tws) as t (tq, w)
        left join keys as k on k.key_tsv @@ t.tq
        group by t.tq, t.w
    ),
    kl as (
        select x.key_id, pg_catalog.row_number() over (order by x.score desc, x.key_id) as r
        from (
            select k.key_id,
                   pg_catalog.sum(t.w * pg_catalog.ln(1 + (n.n - t.df + 0.5) / (t.df + 0.5))
                                  * pg_catalog.ts_rank(k.key_tsv, t.tq, 1)) as score
            from keys as k
            inner join terms as t on k.key_tsv @@ t.tq
            cross join n
            group by k.key_id
            order by 2 desc, k.key_id
            limit p_pool
        ) as x
    ),
    ranked as (
        select coalesce(a.key_id, b.key_id) as key_id, a.r as vr, b.r as lr
        from kv as a full outer join kl as b on a.key_id = b.key_id
    ),
    -- The forgotten words of the keys' revisions (recall chunks retracted by hand by
    -- P_AS_OF, donto._forgotten_text), once per revision; only when anything was ever
    -- retracted by hand (a probe of a partial index).
    gone as materialized (
        select x.rev, donto._forgotten_text(x.rev, p_as_of) as spans
        from (select distinct k0.revision_id as rev
              from ranked as r0 inner join donto.x_turn_key as k0 on r0.key_id = k0.key_id
        ) as x
        where exists (select 1 from donto.retraction as rb where rb.by_hand)
    )
    select hm.statement_id, pg_catalog.min(rk.vr), pg_catalog.min(rk.lr)
    from ranked as rk
    inner join donto.x_turn_key as k on rk.key_id = k.key_id
    cross join lateral (
        select m.statement_id from donto.x_memory_record as m
        where m.projection_id = k.projection_id and m.char_start <= k.header_start
              and (p_as_of is null
                   or exists (select 1 from donto.statement as s1
                              where s1.statement_id = m.statement_id and s1.tx_from <= p_as_of))
              and not exists (
                  select 1 from donto.projection_extension as pe
                  where pe.superseded_statement_id = m.statement_id
                        and (p_as_of is null or pe.created_at <= p_as_of))
        order by m.char_start desc, m.statement_id desc
        limit 1
    ) as hm
    -- A retracted chunk stands for nothing (by then); nor does a key whose turn holds
    -- forgotten words (its text would find them).
    where not exists (
        select 1 from donto.retraction as rt
        where rt.statement_id = hm.statement_id
              and (p_as_of is null or rt.tx_from <= p_as_of))
          and not exists (
              select 1 from gone as g
              where g.rev = k.revision_id
                    and g.spans && pg_catalog.int4range(k.header_start, k.char_end))
    group by hm.statement_id;
end;
$$;

comment on function donto._recall_keys(
    vector, text, bigint, timestamptz, integer, integer, boolean, boolean
) is
'Key arms of donto.recall_by_vector: user-turn keys ranked by vector and by BM25-like score, '
'mapped to the chunks holding them.';

-- The columns of the recall-key tables (migration 017) that the generic names of
-- sql/096-comments.sql do not explain.
comment on column donto.x_turn_key.key_id is 'The recall key (one user turn in one projection).';
comment on column donto.x_turn_key.turn_seq is
'The user turn (donto.turn seq of revision_id) the key was cut from.';
comment on column donto.x_turn_key.header_start is
'Start of the turn''s header in the body (the turn''s span is [header_start, char_end)); the key '
'maps to the projection''s chunk holding this offset.';
comment on column donto.x_turn_key.key_text is
'The key''s text: the turn''s content, body [char_start, char_end).';
comment on column donto.x_turn_key.key_tsv is
'Full-text vector (english) of key_text, for the lexical key arm.';
comment on column donto.x_turn_key_vector.key_id is 'The recall key (donto.x_turn_key).';
comment on column donto.x_turn_key_vector.embedding is 'The key text''s vector for the model.';
comment on column donto.x_turn_key_vector.projection_id is
'The key''s projection (set from donto.x_turn_key on insert): one conversation''s key vectors.';
