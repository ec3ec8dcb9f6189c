-- 023: the embedding cache hands out only vectors that a session of the schema's owner
-- stored. Until now every vector inserted into donto.embedding was cached under the
-- SHA-256 of its text, a writer's too, and donto-pg embed takes a cached vector as it is:
-- a writer who stored a made-up vector for a chunk of its own gave it to every later chunk
-- of the same text, in any document. donto._embedding_cache_fill (sql/085) now caches only
-- for sessions whose login role is a member of the schema's owner. Who filled the entries
-- already there was not recorded, so they are marked untrusted and never handed out again
-- (donto.cached_embeddings); their texts are encoded anew when they recur, and a trusted
-- entry may then stand beside the untrusted one.

alter table donto.embedding_cache add column trusted boolean not null default false;
alter table donto.embedding_cache alter column trusted set default true;
alter table donto.embedding_cache drop constraint embedding_cache_pkey;
alter table donto.embedding_cache add primary key (model_id, sha256, trusted);
