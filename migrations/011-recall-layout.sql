-- 011: the vectors of recall chunks carry their context (donto.embedding.context_id),
-- stored clustered by (model, context), so that recall's vector arm reads only the
-- searched context: an exact scan of the context's rows (index embedding_context_idx)
-- for small contexts, a partial HNSW index of its own for large ones (created by
-- donto.ensure_embedding_index, see sql/050-recall.sql). The per-model HNSW index
-- stays for recall over every context. Existing vectors move over unchanged.

create table donto.embedding_011 (
    statement_id bigint not null,
    model_id integer not null,
    context_id bigint not null,
    embedding vector not null,
    created_at timestamptz not null default now()
);

insert into donto.embedding_011 (statement_id, model_id, context_id, embedding, created_at)
select
    e.statement_id,
    e.model_id,
    s.context_id,
    e.embedding,
    e.created_at
from donto.embedding as e
inner join donto.statement as s on e.statement_id = s.statement_id
order by e.model_id, s.context_id, e.statement_id;

drop table donto.embedding;
alter table donto.embedding_011 rename to embedding;

alter table donto.embedding
add constraint embedding_pkey primary key (statement_id, model_id),
add constraint embedding_statement_id_fkey
foreign key (statement_id) references donto.statement,
add constraint embedding_model_id_fkey
foreign key (model_id) references donto.embedding_model,
add constraint embedding_context_id_fkey
foreign key (context_id) references donto.context;

create index embedding_context_idx on donto.embedding (model_id, context_id);

-- The per-model HNSW indexes of donto.ensure_embedding_index, rebuilt for the
-- models that have vectors (names and definitions as before).
do $$
declare
    v_models integer[];
    v_dims integer[];
begin
    -- The models first: no scan of donto.embedding may be open during CREATE INDEX.
    select
        pg_catalog.array_agg(m.model_id order by m.model_id),
        pg_catalog.array_agg(m.dimension order by m.model_id)
    into v_models, v_dims
    from donto.embedding_model as m
    where exists (select 1 from donto.embedding as e where e.model_id = m.model_id);
    for i in 1 .. coalesce(pg_catalog.cardinality(v_models), 0) loop
        execute pg_catalog.format(
            'create index %I on donto.embedding using hnsw '
            '((embedding::vector(%s)) vector_cosine_ops) where model_id = %s',
            'embedding_hnsw_m' || v_models[i], v_dims[i], v_models[i]);
    end loop;
end;
$$;

comment on table donto.embedding is
'Vectors of recall chunks per embedding model, with the chunk''s context (filled from the '
'statement on insert), clustered by model and context (inserting a vector never updates a '
'statement).';
comment on index donto.embedding_context_idx is
'The vectors of one context: recall''s exact scan of a small context.';
