-- 024: which projections a changed conversation superseded, and since when. When the
-- latest revision of a document does not extend an older one, donto._retract_superseded
-- (sql/085) retracts the older revision's statements in the context; recall's chunk arms
-- skip them, but the older projection's recall keys (donto.x_turn_key) and lexical rows
-- were still read, so they took places in the key arm's candidate pool (only to be
-- dropped afterwards for standing for retracted chunks) and counted in the lexical arm's
-- N and df. donto._retract_superseded now also records each such projection here, and
-- recall leaves the projections recorded by its AS_OF out.

create table donto.projection_superseded (
    projection_id bigint primary key references donto.projection,
    latest_revision_id bigint not null references donto.revision,
    created_at timestamptz not null default now()
);

comment on table donto.projection_superseded is
'A projection whose revision is outside the lineage of its document''s latest revision '
'(a changed conversation): its statements were retracted at created_at, and recall no '
'longer reads its keys or lexical rows (from then on, for as_of).';
comment on column donto.projection_superseded.projection_id is
'The superseded projection (of a revision the latest one does not extend).';
comment on column donto.projection_superseded.latest_revision_id is
'The document''s latest revision when it was superseded (the one that does not extend it).';
comment on column donto.projection_superseded.created_at is
'When it was superseded (the transaction that retracted its statements).';

-- Projections superseded before 024: those with a statement retracted for that reason
-- (donto._retract_superseded retracts all of a projection's statements at once).
insert into donto.projection_superseded (projection_id, latest_revision_id, created_at)
select
    p.projection_id,
    pg_catalog.min(substring(rt.reason from 'revision (\d+), the latest')::bigint) as latest,
    pg_catalog.min(rt.tx_from) as superseded_at
from donto.projection as p
inner join donto.statement as s
    on p.context_id = s.context_id and p.revision_id = s.derived_from_revision
inner join donto.retraction as rt on s.statement_id = rt.statement_id
where rt.reason like 'superseded: the conversation changed (revision %'
group by p.projection_id
order by p.projection_id;
