-- 002: projection A (recall): memory records, embedding models, embeddings.

create table donto.x_memory_record (
    statement_id bigint primary key references donto.statement,
    projection_id bigint not null references donto.projection,
    revision_id bigint not null references donto.revision,
    chunk_index integer not null,
    char_start integer not null,
    char_end integer not null,
    tsv tsvector not null,
    unique (projection_id, chunk_index),
    check (0 <= char_start and char_start < char_end)
);

create index x_memory_record_revision_idx on donto.x_memory_record (revision_id, char_start);
create index x_memory_record_tsv_idx on donto.x_memory_record using gin (tsv);

create table donto.embedding_model (
    model_id integer generated always as identity primary key,
    name text not null unique,
    source text not null,
    dimension integer not null check (dimension between 1 and 16000),
    created_at timestamptz not null default now()
);

-- One table for every model; a partial HNSW index per model over
-- (embedding::vector(dim)) is created by donto.ensure_embedding_index.
create table donto.embedding (
    statement_id bigint not null references donto.statement,
    model_id integer not null references donto.embedding_model,
    embedding vector not null,
    created_at timestamptz not null default now(),
    primary key (statement_id, model_id)
);

create index embedding_model_idx on donto.embedding (model_id);

comment on table donto.x_memory_record is
'Recall overlay: one row per recall chunk statement '
'(revision, chunk index, span, full-text vector).';
comment on table donto.embedding_model is
'Embedding models by name, with their source (name or path) and dimension.';
comment on table donto.embedding is
'Vectors of recall chunks per embedding model (inserting a vector never updates a statement).';
