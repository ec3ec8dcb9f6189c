-- 014: conversations that grow. A revision that extends an earlier one (its
-- body starts with the earlier body) is recorded as such; its recall
-- projection grows the earlier revision's projection instead of starting
-- afresh (only the last old window is superseded); vectors are cached by
-- content so that identical text is never embedded twice.

create table donto.revision_extension (
    revision_id bigint primary key references donto.revision,
    extends_revision_id bigint not null references donto.revision,
    prefix_chars integer not null check (prefix_chars > 0),
    created_at timestamptz not null default now(),
    check (revision_id <> extends_revision_id)
);

create index revision_extension_extends_idx on donto.revision_extension (extends_revision_id);

create table donto.projection_extension (
    projection_id bigint not null references donto.projection,
    revision_id bigint not null references donto.revision,
    extends_revision_id bigint not null references donto.revision,
    from_char integer not null check (from_char >= 0),
    first_chunk_index integer not null check (first_chunk_index >= 0),
    reused_chunks integer not null check (reused_chunks >= 0),
    new_chunks integer not null check (new_chunks >= 0),
    superseded_statement_id bigint references donto.statement,
    created_at timestamptz not null default now(),
    primary key (projection_id, revision_id)
);

create index projection_extension_revision_idx on donto.projection_extension (revision_id);
create index projection_extension_superseded_idx
on donto.projection_extension (superseded_statement_id);

-- The chunk holding a position, within a projection whatever revision it was
-- cut from (recall's exchange folding, donto.revision_chunks).
create index x_memory_record_projection_span_idx
on donto.x_memory_record (projection_id, char_start);

create table donto.embedding_cache (
    model_id integer not null references donto.embedding_model,
    sha256 bytea not null check (length(sha256) = 32),
    embedding vector not null,
    created_at timestamptz not null default now(),
    primary key (model_id, sha256)
);

-- Vectors already stored become the cache's first entries (recall chunks:
-- their text; A/B units: the text of their span, as the A/B driver embeds it).
with keyed as (
    select
        e.model_id,
        e.statement_id,
        e.embedding,
        pg_catalog.sha256(pg_catalog.convert_to(
            case
                when s.predicate = 'mem:episodic/chunk' then s.object_lit ->> 'v'
                else substring(r.body from s.char_start + 1 for s.char_end - s.char_start)
            end, 'UTF8'
        )) as sha
    from donto.embedding as e
    inner join donto.statement as s on e.statement_id = s.statement_id
    inner join donto.revision as r on s.derived_from_revision = r.revision_id
    where s.predicate in ('mem:episodic/chunk', 'mem:measure/unit')
)

insert into donto.embedding_cache (model_id, sha256, embedding)
select distinct on (k.model_id, k.sha)
    k.model_id,
    k.sha,
    k.embedding
from keyed as k
order by k.model_id asc, k.sha asc, k.statement_id asc
on conflict do nothing;

comment on table donto.revision_extension is
'A revision whose body starts with the body of the revision it extends (donto.append_turns): '
'the link, and the length of the shared prefix.';
comment on table donto.projection_extension is
'A recall projection grown to a later revision that extends its revision: which chunks it '
'kept (reused_chunks), where the new ones start (first_chunk_index) and the chunk statement '
'the new text superseded (retracted). Its chunks for the revision: the earlier revision''s '
'chunks that start before from_char, and the chunks recorded for the revision itself.';
comment on table donto.embedding_cache is
'Vectors keyed by content: (model, SHA-256 of the embedded text). The embed step looks here '
'before encoding, so identical text is embedded once across revisions, projections and arms.';
