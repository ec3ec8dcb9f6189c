-- 019: the vectors of recall keys carry their projection
-- (donto.x_turn_key_vector.projection_id, filled by a trigger from the key), stored
-- clustered by (model, projection), so that the key arm of recall reads only the
-- searched conversation's keys: an exact scan of its rows (index
-- x_turn_key_vector_projection_idx) for a small projection, a partial HNSW index of
-- its own for a large one (created by donto.ensure_context_indexes, see
-- sql/087-turn-keys.sql), as migration 011 did for the chunks' vectors. Existing
-- vectors move over unchanged.

create table donto.x_turn_key_vector_019 (
    key_id bigint not null,
    model_id integer not null,
    projection_id bigint not null,
    embedding vector not null,
    created_at timestamptz not null default now()
);

insert into donto.x_turn_key_vector_019 (key_id, model_id, projection_id, embedding, created_at)
select
    v.key_id,
    v.model_id,
    k.projection_id,
    v.embedding,
    v.created_at
from donto.x_turn_key_vector as v
inner join donto.x_turn_key as k on v.key_id = k.key_id
order by v.model_id, k.projection_id, v.key_id;

drop table donto.x_turn_key_vector;
alter table donto.x_turn_key_vector_019 rename to x_turn_key_vector;

alter table donto.x_turn_key_vector
add constraint x_turn_key_vector_pkey primary key (key_id, model_id),
add constraint x_turn_key_vector_key_id_fkey
foreign key (key_id) references donto.x_turn_key,
add constraint x_turn_key_vector_model_id_fkey
foreign key (model_id) references donto.embedding_model,
add constraint x_turn_key_vector_projection_id_fkey
foreign key (projection_id) references donto.projection;

create index x_turn_key_vector_projection_idx
on donto.x_turn_key_vector (model_id, projection_id);

comment on table donto.x_turn_key_vector is
'Vectors of recall keys (donto.x_turn_key) per embedding model (donto-pg embed), with the '
'key''s projection (filled from the key on insert), clustered by model and projection.';
comment on index donto.x_turn_key_vector_projection_idx is
'The key vectors of one projection: the key arm''s exact scan of a small conversation.';
