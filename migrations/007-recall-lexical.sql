-- 007: the full-text vector of a recall chunk becomes a derived index of its own
-- (donto.x_memory_lexical, filled by donto.index_lexical), like the embeddings,
-- so that projection A writes only its chunks. Existing vectors move over
-- unchanged; nothing is lost.

create table donto.x_memory_lexical (
    statement_id bigint primary key references donto.x_memory_record,
    projection_id bigint not null references donto.projection,
    tsv tsvector not null
);

insert into donto.x_memory_lexical (statement_id, projection_id, tsv)
select
    m.statement_id,
    m.projection_id,
    m.tsv
from donto.x_memory_record as m
order by m.statement_id;

create index x_memory_lexical_projection_idx on donto.x_memory_lexical (projection_id);
create index x_memory_lexical_tsv_idx on donto.x_memory_lexical using gin (tsv);

drop index donto.x_memory_record_tsv_idx;
alter table donto.x_memory_record drop column tsv;

-- project_recall gains the LEXICAL argument (sql/050-recall.sql); the old
-- three-argument form would make one-to-three-argument calls ambiguous.
drop function if exists donto.project_recall(bigint, integer, text);

comment on table donto.x_memory_record is
'Recall overlay: one row per recall chunk statement (revision, chunk index, span).';
comment on table donto.x_memory_lexical is
'Full-text vectors of recall chunks (every word with weight D, the user''s words once more '
'with weight A), derived from the chunks by donto.index_lexical.';
