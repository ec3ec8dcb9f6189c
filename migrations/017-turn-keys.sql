-- 017: short recall keys per user turn. A user turn (~360 characters) inside a
-- 1,200-character recall chunk is drowned by the assistant text around it; its
-- own text, embedded on its own and indexed for full text, is a second key of
-- the chunk that holds it (donto.recall's key arm). One row per (recall
-- projection, user turn), anchored by the turn's character span.

create table donto.x_turn_key (
    key_id bigint generated always as identity primary key,
    projection_id bigint not null references donto.projection,
    revision_id bigint not null references donto.revision,
    turn_seq integer not null,
    header_start integer not null,
    char_start integer not null,
    char_end integer not null,
    key_text text not null check (btrim(key_text) <> ''),
    key_tsv tsvector not null,
    created_at timestamptz not null default now(),
    unique (projection_id, header_start),
    foreign key (revision_id, turn_seq) references donto.turn (revision_id, seq),
    check (0 <= header_start and header_start <= char_start and char_start < char_end)
);

create index x_turn_key_revision_idx on donto.x_turn_key (revision_id);

create table donto.x_turn_key_vector (
    key_id bigint not null references donto.x_turn_key,
    model_id integer not null references donto.embedding_model,
    embedding vector not null,
    created_at timestamptz not null default now(),
    primary key (key_id, model_id)
);

comment on table donto.x_turn_key is
'Recall keys: one row per user turn of a recall projection (donto.project_turn_keys): the turn''s '
'own text and full-text vector, anchored by its char span; recall''s key arm ranks them and '
'maps each to the projection''s chunk holding the turn''s header.';
comment on table donto.x_turn_key_vector is
'Vectors of recall keys (donto.x_turn_key) per embedding model (donto-pg embed).';
