-- Roles and privileges (run last, so it covers every object above).
--   donto_reader: reads every table and view, calls the read-only functions
--                 (recall, audit, rendering); cannot write.
--   donto_writer: reads, and writes ONLY through the security-definer
--                 functions (register_revision, project_recall, ...), except
--                 INSERT of vectors into donto.embedding (checked by a trigger).
-- Nobody is granted UPDATE, DELETE or TRUNCATE on a fact table (I3); the
-- triggers of 010-append-only.sql refuse them even for the owner.

do $$
begin
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'donto_reader') then
        create role donto_reader nologin;
    end if;
    if not exists (select 1 from pg_catalog.pg_roles where rolname = 'donto_writer') then
        create role donto_writer nologin;
    end if;
end;
$$;

-- One owner: the schema's. CREATE OR REPLACE keeps an object's owner, and what a run
-- creates belongs to whoever runs it: an ALTER EXTENSION donto UPDATE or a migrate by
-- another superuser than the one who installed left the new tables, views, types and
-- functions (security definers among them) to that role, so it could no longer be dropped,
-- and the definers would run as whatever it became. Given back to the schema's owner, while
-- that owner is a superuser (as it must be, README "Who must be a superuser"); a table
-- takes its indexes and identity sequences along.
do $$
declare
    v_owner oid := (select n.nspowner from pg_catalog.pg_namespace as n
                    where n.nspname = 'donto');
    v_name text := (select pg_catalog.quote_ident(r.rolname) from pg_catalog.pg_roles as r
                    where r.oid = v_owner and r.rolsuper);
    v_obj record;
begin
    if v_name is null then
        return;
    end if;
    for v_obj in
        select
            case c.relkind
                when 'c' then 'type' when 'v' then 'view'
                when 'm' then 'materialized view' else 'table'
            end as kind,
            c.oid::regclass::text as name
        from pg_catalog.pg_class as c
        where
            c.relnamespace = 'donto'::regnamespace and c.relowner <> v_owner
            and c.relkind in ('r', 'p', 'v', 'm', 'c')
        union all
        select
            case p.prokind when 'a' then 'aggregate' else 'routine' end,
            p.oid::regprocedure::text
        from pg_catalog.pg_proc as p
        where p.pronamespace = 'donto'::regnamespace and p.proowner <> v_owner
    loop
        execute pg_catalog.format('alter %s %s owner to %s', v_obj.kind, v_obj.name, v_name);
    end loop;
end;
$$;

comment on role donto_reader is 'donto-pg: read and recall, never write.';
comment on role donto_writer is 'donto-pg: write through the donto functions only.';

grant usage on schema donto to donto_reader, donto_writer;
revoke create on schema donto from public;

revoke all on all tables in schema donto from public, donto_reader, donto_writer;
grant select on all tables in schema donto to donto_reader, donto_writer;
-- The one direct write: vectors, by binary COPY into the writer's own temp table and
-- donto.ingest_embeddings / ingest_measure_embeddings (security invoker). The trigger
-- donto._check_embeddings refuses a vector of anything but a recall key.
grant insert (statement_id, model_id, embedding) on donto.embedding to donto_writer;
-- The owner's own privileges: the schema's owner, whoever runs this (a restore migrated by
-- another superuser granted them to that superuser and left the owner's in place).
-- The writers' locks (migration 031): rows locked FOR UPDATE, which needs UPDATE; the owner
-- alone has it and reads them (I3's trigger still refuses an UPDATE statement there).
revoke select on donto.writer_lock from donto_reader, donto_writer;
do $$
declare
    v_owner text := (select pg_catalog.quote_ident(r.rolname)
                     from pg_catalog.pg_namespace as n
                     inner join pg_catalog.pg_roles as r on n.nspowner = r.oid
                     where n.nspname = 'donto');
begin
    execute 'revoke update, delete, truncate on all tables in schema donto from ' || v_owner;
    execute 'grant update, delete, truncate on donto.setting to ' || v_owner;
    execute 'grant update on donto.writer_lock to ' || v_owner;
    -- Row locks, not updates: donto.retract of a recall chunk locks the document's row
    -- FOR NO KEY UPDATE (donto._lock_forgetting), a filing FOR SHARE
    -- (donto._forget_new_statements); a locking clause needs UPDATE on a column; I3's
    -- trigger still refuses every UPDATE statement there.
    execute 'grant update (document_id) on donto.document to ' || v_owner;
end;
$$;

revoke all on all sequences in schema donto from public;

revoke execute on all functions in schema donto from public;
grant execute on all functions in schema donto to donto_writer;
-- Internal definers that only other definers call, after their own checks (which
-- document owns the revision, the projection, the response): a writer calling them
-- directly would skip those checks.
revoke execute on function donto._register_revision(text, text, jsonb, bigint) from donto_writer;
revoke execute on function donto._extend_projections(bigint, bigint) from donto_writer;
revoke execute on function donto._extend_recall(bigint, bigint) from donto_writer;
revoke execute on function donto._extend_extraction(bigint, bigint) from donto_writer;
revoke execute on function donto._standing_from_claims(bigint) from donto_writer;
revoke execute on function donto._spans_in(bigint, bigint, integer[], integer[])
from donto_writer;
revoke execute on function donto._trigger_every_table(text, text, text, text[]) from donto_writer;
revoke execute on function donto._lock(text, bigint) from donto_writer;
revoke execute on function donto._lock_document(bigint) from donto_writer;
revoke execute on function donto._lock_forgetting(bigint) from donto_writer;
revoke execute on function donto._lock_extraction_lease(bigint) from donto_writer;
-- ensure_context files a context name as the owner and checks nothing: only the definers
-- call it, after their checks (donto._claim_context). A writer calling it could file the
-- name another login's next load needs and hold it in its open transaction. The index
-- helpers run inside donto.ensure_context_indexes, after its bound.
revoke execute on function donto.ensure_context(text, text) from donto_writer;
revoke execute on function donto._ensure_lexical_indexes() from donto_writer;
revoke execute on function donto._ensure_key_indexes(integer) from donto_writer;
revoke execute on function donto._create_model_index(integer) from donto_writer;

do $$
declare
    v_fn regprocedure;
begin
    -- Read-only API for donto_reader: every function that is not volatile,
    -- plus the PL/Python loader and the read-only volatile ones named here; not the
    -- PL/Python helpers of the projections (_recall_windows, _extraction_blocks, ...),
    -- whose work grows with their arguments: the definers call them as the owner.
    revoke execute on all functions in schema donto from donto_reader;
    for v_fn in
        select p.oid::regprocedure
        from pg_catalog.pg_proc as p
        inner join pg_catalog.pg_namespace as n on p.pronamespace = n.oid
        inner join pg_catalog.pg_language as l on p.prolang = l.oid
        where n.nspname = 'donto'
              and p.prokind = 'f'
              and (p.provolatile <> 'v'
                   or p.proname in ('_py_boot', 'recall', 'recall_by_vector', 'recall_payload',
                                    'recall_summaries', 'recall_summaries_by_vector',
                                    'embed_query', 'render_for_extraction', 'anchor',
                                    'warmup', 'claims_as_of', 'statements_as_of',
                                    'as_of_horizon', '_check_as_of'))
              and not (l.lanname = 'plpython3u' and p.proname like '\_%'
                       and p.proname <> '_py_boot')
    loop
        execute pg_catalog.format('grant execute on function %s to donto_reader', v_fn);
    end loop;
end;
$$;

-- Who inserts: before any insert into a donto table (but the binding record, the migration
-- ledger and the settings), a session that is not the owner's has its login checked and
-- bound (donto._login_guard, migration 029).
select donto._trigger_every_table(
    'login_guard', 'insert', 'donto._login_guard', array['login_binding', 'migration', 'setting']
);
