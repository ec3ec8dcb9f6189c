-- 015: accountability and ownership (issue 10, section 4).
--   * A retraction records who made it: the login role, the role the session had
--     SET, the backend pid (its transaction time is tx_from). Rows retracted
--     before this migration keep null there (nobody knows who made them).
--   * The same body may be a revision of several documents: a revision is
--     content-addressed within its document (unique (document_id, sha256)), so
--     whoever registers a public text first does not block anybody else's copy,
--     its turn table or its projections.
--   * A context belongs to the document whose rows filled it first
--     (donto.context_owner); the rows already stored decide the owner of the
--     existing contexts that hold one document's rows only.

-- Defaults set apart from ADD COLUMN, so that the rows stored before stay null
-- (a volatile default in ADD COLUMN would stamp them with the migrating session).
alter table donto.retraction add column login_role text;
alter table donto.retraction alter column login_role set default session_user;
alter table donto.retraction add column session_role text;
alter table donto.retraction alter column session_role
set default nullif(pg_catalog.current_setting('role'), 'none');
alter table donto.retraction add column backend_pid integer;
alter table donto.retraction alter column backend_pid set default pg_catalog.pg_backend_pid();

alter table donto.revision drop constraint revision_sha256_key;
alter table donto.revision add constraint revision_document_sha256_key
unique (document_id, sha256);
create index revision_sha256_idx on donto.revision (sha256);

create table donto.context_owner (
    context_id bigint primary key references donto.context,
    document_id bigint not null references donto.document,
    created_at timestamptz not null default now()
);

create index context_owner_document_idx on donto.context_owner (document_id);

insert into donto.context_owner (context_id, document_id)
select
    s.context_id,
    pg_catalog.min(s.document_id) as document_id
from donto.statement as s
where s.document_id is not null
group by s.context_id
having pg_catalog.count(distinct s.document_id) = 1
order by s.context_id;

comment on table donto.context_owner is
'The document a context belongs to: only that document''s revisions are projected, '
'extracted or appended into it (issue 10, section 4).';
