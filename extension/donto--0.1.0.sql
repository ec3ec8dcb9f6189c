-- donto--0.1.0.sql: built by `donto-pg extension build` from sql/ and migrations/; do not edit.

\echo Use "CREATE EXTENSION donto CASCADE" to load this file. \quit

-- 000-head.sql
-- Head: runs first, on every install and upgrade, before the migrations.
-- It creates only what the migration ledger itself needs.

create schema if not exists donto;

comment on schema donto is
'donto-pg: an append-only, bitemporal memory substrate for long conversations.';

create table if not exists donto.migration (
    name text primary key,
    sha256 text not null,
    applied_at timestamptz not null default now()
);

comment on table donto.migration is
'Ledger of run-once migrations (migrations/NNN-topic.sql) '
'with the SHA-256 of each file as applied.';

create table if not exists donto.setting (
    key text primary key,
    value jsonb not null,
    set_at timestamptz not null default now()
);

comment on table donto.setting is
'Installation settings written by donto-pg migrate / extension install (e.g. python_path). '
'The only mutable table: it holds configuration, not facts.';


-- migrations/001-core.sql
-- 001: the core fact model. Documents, content-addressed revisions, turns,
-- contexts, bitemporal statements and their retractions.

create table donto.document (
    document_id bigint generated always as identity primary key,
    iri text not null unique check (btrim(iri) <> ''),
    meta jsonb not null default '{}',
    created_at timestamptz not null default now()
);

create table donto.revision (
    revision_id bigint generated always as identity primary key,
    document_id bigint not null references donto.document,
    sha256 bytea not null unique check (length(sha256) = 32),
    body text not null check (body <> ''),
    body_chars integer not null,
    supersedes bigint references donto.revision,
    meta jsonb not null default '{}',
    registered_at timestamptz not null default now()
);

-- Uncompressed out-of-line storage lets substring() read a slice of a large
-- body without detoasting all of it.
alter table donto.revision alter column body set storage external;

create index revision_document_idx on donto.revision (document_id, revision_id);

create table donto.turn (
    revision_id bigint not null references donto.revision,
    seq integer not null check (seq >= 0),
    turn_id integer,
    role text not null check (btrim(role) <> ''),
    session integer,
    exchange integer,
    time_anchor date,
    header_start integer not null,
    char_start integer not null,
    char_end integer not null,
    meta jsonb not null default '{}',
    primary key (revision_id, seq),
    check (0 <= header_start and header_start <= char_start and char_start <= char_end)
);

create index turn_turn_id_idx on donto.turn (revision_id, turn_id);

create table donto.context (
    context_id bigint generated always as identity primary key,
    iri text not null unique check (btrim(iri) <> ''),
    kind text,
    meta jsonb not null default '{}',
    created_at timestamptz not null default now()
);

create table donto.statement (
    statement_id bigint generated always as identity primary key,
    subject text not null,
    predicate text not null,
    object_iri text,
    object_lit jsonb,
    context_id bigint not null references donto.context,
    valid_time daterange not null default '(,)',
    tx_from timestamptz not null default now(),
    document_id bigint references donto.document,
    derived_from_revision bigint references donto.revision,
    char_start integer,
    char_end integer,
    is_hypothesis boolean not null default false,
    check ((object_iri is null) <> (object_lit is null)),
    check ((char_start is null) = (char_end is null)),
    check (char_start is null or (0 <= char_start and char_start <= char_end))
);

create index statement_context_idx on donto.statement (context_id, predicate);
create index statement_revision_span_idx on donto.statement (derived_from_revision, char_start);
create index statement_subject_idx on donto.statement (subject);

create table donto.retraction (
    retraction_id bigint generated always as identity primary key,
    statement_id bigint not null unique references donto.statement,
    reason text not null check (btrim(reason) <> ''),
    tx_from timestamptz not null default now()
);

create table donto.projection (
    projection_id bigint generated always as identity primary key,
    revision_id bigint not null references donto.revision,
    kind text not null check (kind in ('recall', 'extraction')),
    strategy text not null,
    params jsonb not null default '{}',
    context_id bigint not null references donto.context,
    created_at timestamptz not null default now(),
    unique (revision_id, kind, strategy, params, context_id)
);

comment on table donto.document is
'One row per source (e.g. a BEAM conversation), named by IRI such as beam:100K/1.';
comment on table donto.revision is
'Immutable canonical text of a document, content-addressed by SHA-256 of its body (unique).';
comment on table donto.turn is
'Per-message structure of a revision: turn id, role, session, exchange, date and char spans '
'(header_start = start of the line prefix; [char_start, char_end) = the message content).';
comment on table donto.context is
'Named graphs by IRI: ctx:memory/episodic/beam/<conv> (recall), ctx:claims/beam/<conv>, ...';
comment on table donto.statement is
'The fact table: subject, predicate, object (IRI or jsonb literal) in a context, with valid time, '
'transaction time (tx_from), the revision it derives from and its char span.';
comment on table donto.retraction is
'Retractions of statements (append-only: a retraction is a new row, never a delete).';
comment on table donto.projection is
'One projection of a revision (recall or extraction) under a strategy and parameters.';


insert into donto.migration (name, sha256) values ('001-core.sql', '6fc847a63ca94e266a76fd71db97872abe19f292749aa5ef33b89f4d031f481c');

-- migrations/002-recall.sql
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


insert into donto.migration (name, sha256) values ('002-recall.sql', '9067ed8172a5e3321c14f372e1212e370b16530d0f4e19338c79ebfae8e81a4c');

-- sql/010-append-only.sql
-- Invariant I3: append-only (SQLSTATE DI003). No UPDATE, DELETE or TRUNCATE may change or
-- remove a fact, for any role, the owner included. Every table of schema
-- donto is a fact table except donto.setting (configuration).
-- A retraction is a new row (donto.retract); "current" and "as of" are
-- views and functions over the history.

create or replace function donto._refuse_mutation()
returns trigger
language plpgsql
set search_path to pg_catalog, pg_temp
as $$
/* Trigger body: refuses every UPDATE, DELETE and TRUNCATE on a fact table. */
begin
    raise exception 'donto invariant I3 (append-only): % on %.% is not allowed',
        tg_op, tg_table_schema, tg_table_name
        using errcode = 'DI003',
        hint = 'Facts are never changed or removed. Use donto.retract() to retract a statement.';
end;
$$;

comment on function donto._refuse_mutation() is
'Trigger function enforcing invariant I3: raises on UPDATE, DELETE and TRUNCATE.';

do $$
declare
    v_table regclass;
begin
    for v_table in
        select c.oid::regclass
        from pg_catalog.pg_class as c
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        where n.nspname = 'donto'
              and c.relkind in ('r', 'p')
              and c.relname <> 'setting'
              and not c.relispartition
    loop
        -- Statement-level, so even an UPDATE or DELETE that matches no row fails.
        execute format('drop trigger if exists i3_refuse on %s', v_table);
        execute format(
            'create trigger i3_refuse before update or delete or truncate on %s '
            'for each statement execute function donto._refuse_mutation()', v_table);
    end loop;
end;
$$;


-- sql/020-revision.sql
-- Documents, content-addressed revisions and their turn tables.

create or replace function donto.register_revision(
    document_iri text, body text, meta jsonb default '{}'
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register BODY as a revision of the document DOCUMENT_IRI and return its id.
Content-addressed: the id is that of SHA-256(body); registering the same body
again (also concurrently) returns the existing id. A different body for the
same document is a new revision that supersedes the previous one.
*/
declare
    v_doc bigint;
    v_sha bytea;
    v_rev bigint;
    v_owner text;
    v_prev bigint;
begin
    if document_iri is null or btrim(document_iri) = '' then
        raise exception 'donto.register_revision: document_iri is empty' using errcode = '22023';
    end if;
    if body is null or body = '' then
        raise exception 'donto.register_revision: body of % is empty', document_iri
            using errcode = '22023';
    end if;
    v_sha := pg_catalog.sha256(pg_catalog.convert_to(body, 'UTF8'));

    select r.revision_id, d.iri into v_rev, v_owner
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.sha256 = v_sha;
    if found then
        if v_owner <> document_iri then
            raise exception 'donto.register_revision: this body is already revision % of %',
                v_rev, v_owner using errcode = '23505';
        end if;
        return v_rev;
    end if;

    insert into donto.document (iri) values (document_iri) on conflict (iri) do nothing;
    select d.document_id into strict v_doc from donto.document as d where d.iri = document_iri;
    -- One writer per document at a time, so "supersedes" is well defined.
    perform pg_catalog.pg_advisory_xact_lock(2056, v_doc::integer);

    select r.revision_id into v_prev from donto.revision as r
    where r.document_id = v_doc order by r.revision_id desc limit 1;

    insert into donto.revision (document_id, sha256, body, body_chars, supersedes, meta)
    values (v_doc, v_sha, body, pg_catalog.char_length(body), v_prev, coalesce(meta, '{}'))
    on conflict (sha256) do nothing
    returning revision_id into v_rev;
    if v_rev is null then
        -- Lost a race with an identical registration: return the winner.
        select r.revision_id into strict v_rev from donto.revision as r where r.sha256 = v_sha;
    end if;
    return v_rev;
end;
$$;

comment on function donto.register_revision(text, text, jsonb) is
'Register a body as an immutable, content-addressed (SHA-256) revision of a document; '
'idempotent: the same body returns the same revision id.';

create or replace function donto.record_turns(p_revision_id bigint, p_turns jsonb)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record the turn table of a revision from a JSON array of
{seq, turn_id, role, session, exchange, date, header_start, char_start, char_end, meta}.
Spans must lie inside the body, in order and without overlap; seq runs 0..n-1.
Idempotent: recording the same table again returns its size; a different one is refused.
*/
declare
    v_len integer;
    v_n integer;
    v_have integer;
    v_bad text;
begin
    select r.body_chars into v_len from donto.revision as r where r.revision_id = p_revision_id;
    if not found then
        raise exception 'donto.record_turns: no revision %', p_revision_id using errcode = '22023';
    end if;
    if p_turns is null or pg_catalog.jsonb_typeof(p_turns) <> 'array' then
        raise exception 'donto.record_turns: turns must be a JSON array' using errcode = '22023';
    end if;
    perform pg_catalog.pg_advisory_xact_lock(2057, p_revision_id::integer);

    create temp table if not exists _donto_turns (
        seq integer, turn_id integer, role text, session integer, exchange integer,
        time_anchor date, header_start integer, char_start integer, char_end integer, meta jsonb
    ) on commit drop;
    truncate _donto_turns;
    insert into _donto_turns
    select x.seq, x.turn_id, x.role, x.session, x.exchange, x.date, x.header_start,
           x.char_start, x.char_end, coalesce(x.meta, '{}')
    from pg_catalog.jsonb_to_recordset(p_turns) as x (
        seq integer, turn_id integer, role text, session integer, exchange integer,
        date date, header_start integer, char_start integer, char_end integer, meta jsonb
    );
    get diagnostics v_n = row_count;

    select pg_catalog.format('turn seq %s: %s', t.seq, t.problem) into v_bad
    from (
        select
            s.seq,
            case
                when s.seq is null or s.role is null or s.header_start is null
                     or s.char_start is null or s.char_end is null
                    then 'seq, role, header_start, char_start and char_end are required'
                when s.seq <> s.rn then pg_catalog.format('expected seq %s', s.rn)
                when not (0 <= s.header_start and s.header_start <= s.char_start
                          and s.char_start <= s.char_end)
                    then 'span is not ordered (header_start <= char_start <= char_end)'
                when s.char_end > v_len
                    then pg_catalog.format('span ends at %s, past the body (%s chars)',
                                           s.char_end, v_len)
                when s.header_start < s.prev_end
                    then pg_catalog.format('span overlaps the previous turn (which ends at %s)',
                                           s.prev_end)
            end as problem
        from (
            select
                t.*,
                (pg_catalog.row_number() over (order by t.seq) - 1)::integer as rn,
                pg_catalog.lag(t.char_end) over (order by t.seq) as prev_end
            from _donto_turns as t
        ) as s
    ) as t
    where t.problem is not null
    order by t.seq nulls first
    limit 1;
    if v_bad is not null then
        raise exception 'donto.record_turns: revision %: %', p_revision_id, v_bad
            using errcode = '22023';
    end if;

    select pg_catalog.count(*) into v_have from donto.turn as t where t.revision_id = p_revision_id;
    if v_have > 0 then
        if v_have = v_n and not exists (
            select t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
                   t.header_start, t.char_start, t.char_end
            from _donto_turns as t
            except
            select t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
                   t.header_start, t.char_start, t.char_end
            from donto.turn as t where t.revision_id = p_revision_id
        ) then
            return v_n;
        end if;
        raise exception 'donto.record_turns: revision % already has a different turn table',
            p_revision_id using errcode = '23505';
    end if;

    insert into donto.turn (revision_id, seq, turn_id, role, session, exchange, time_anchor,
                            header_start, char_start, char_end, meta)
    select p_revision_id, t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
           t.header_start, t.char_start, t.char_end, t.meta
    from _donto_turns as t;
    return v_n;
end;
$$;

comment on function donto.record_turns(bigint, jsonb) is
'Record the per-message structure (turn id, role, session, date, char span) of a revision; '
'validates spans; idempotent.';

create or replace function donto.ensure_context(p_iri text, p_kind text default null)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Return the id of the context named P_IRI, creating it if needed. */
declare
    v_id bigint;
begin
    select c.context_id into v_id from donto.context as c where c.iri = p_iri;
    if found then
        return v_id;
    end if;
    insert into donto.context (iri, kind) values (p_iri, p_kind) on conflict (iri) do nothing;
    select c.context_id into strict v_id from donto.context as c where c.iri = p_iri;
    return v_id;
end;
$$;

comment on function donto.ensure_context(text, text) is
'Return the id of a named context (graph) by IRI, creating it if needed.';

create or replace function donto.span_text(p_revision_id bigint, p_start integer, p_end integer)
returns text
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The exact text of [p_start, p_end) in a revision body (0-based char offsets). */
    select substring(r.body from p_start + 1 for p_end - p_start)
    from donto.revision as r
    where r.revision_id = p_revision_id;
$$;

comment on function donto.span_text(bigint, integer, integer) is
'The exact bytes of a revision span [start, end) (0-based character offsets).';


-- sql/030-bitemporal.sql
-- Bitemporality: valid time (statement.valid_time) and transaction time
-- (statement.tx_from, retraction.tx_from). Retractions are new rows.

create or replace function donto.retract(statement_id bigint, reason text)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Append a retraction of a statement; retracting twice returns the first retraction. */
declare
    v_id bigint;
    v_sid bigint := statement_id;
begin
    if not exists (select 1 from donto.statement as s where s.statement_id = v_sid) then
        raise exception 'donto.retract: no statement %', v_sid using errcode = '22023';
    end if;
    if reason is null or btrim(reason) = '' then
        raise exception 'donto.retract: a reason is required' using errcode = '22023';
    end if;
    insert into donto.retraction (statement_id, reason) values (v_sid, reason)
    on conflict on constraint retraction_statement_id_key do nothing
    returning retraction_id into v_id;
    if v_id is null then
        select r.retraction_id into strict v_id
        from donto.retraction as r
        where r.statement_id = v_sid;
    end if;
    return v_id;
end;
$$;

comment on function donto.retract(bigint, text) is
'Retract a statement by appending a retraction row (invariant I3: nothing is deleted).';

create or replace view donto.statement_current as
select s.*
from donto.statement as s
where not exists (
    select 1
    from donto.retraction as r
    where r.statement_id = s.statement_id
);

comment on view donto.statement_current is
'Statements as the database knows them now: every statement that has not been retracted.';

create or replace function donto.statements_as_of(tx timestamptz, valid date default null)
returns setof donto.statement
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
What the database knew at transaction time TX: statements recorded by then and not
retracted by then; with VALID, only those whose valid time contains that date.
*/
    select s.*
    from donto.statement as s
    where s.tx_from <= tx
          and (valid is null or s.valid_time @> valid)
          and not exists (
              select 1 from donto.retraction as r
              where r.statement_id = s.statement_id and r.tx_from <= tx
          );
$$;

comment on function donto.statements_as_of(timestamptz, date) is
'Bitemporal query: statements known at transaction time TX (and valid at VALID, if given).';


-- sql/040-python.sql
-- PL/Python plumbing. PL/Python bodies stay a few lines: they import plain
-- modules of the donto_pg package (unit-tested as ordinary Python). Where the
-- package lives for the server's Python is the setting python_path, written
-- by `donto-pg migrate` / `donto-pg extension install`.
--
-- Every PL/Python function starts with:
--     if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
--     D = GD['donto_pg']

create or replace function donto._py_boot()
returns void
language plpython3u
volatile
set search_path to pg_catalog, pg_temp
as $py$
# Put donto_pg on the server's sys.path (from setting python_path); cache it in GD.
import importlib
import json
import os
import sys

rows = plpy.execute("select value from donto.setting where key = 'python_path'")
paths = json.loads(rows[0]["value"]) if rows.nrows() else []
for p in reversed(paths):
    if p not in sys.path:
        sys.path.insert(0, p)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
try:
    GD["donto_pg"] = importlib.import_module("donto_pg.plpy_entry")
except ImportError as exc:
    plpy.error(
        "donto: the server's Python cannot import donto_pg (%s); python_path = %r. "
        "Run `donto-pg migrate` (or `donto-pg extension install`) from the environment where "
        "donto-pg is installed, and make sure the server's OS user can read it." % (exc, paths)
    )
$py$;

comment on function donto._py_boot() is
'Load the donto_pg Python package into this backend (PL/Python), using setting python_path.';


-- sql/090-roles.sql
-- Roles and privileges (run last, so it covers every object above).
--   donto_reader: reads every table and view, calls the read-only functions
--                 (recall, audit, rendering); cannot write.
--   donto_writer: reads, and writes ONLY through the security-definer
--                 functions (register_revision, project_recall, ...).
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

comment on role donto_reader is 'donto-pg: read and recall, never write.';
comment on role donto_writer is 'donto-pg: write through the donto functions only.';

grant usage on schema donto to donto_reader, donto_writer;
revoke create on schema donto from public;

revoke all on all tables in schema donto from public, donto_reader, donto_writer;
grant select on all tables in schema donto to donto_reader, donto_writer;
revoke update, delete, truncate on all tables in schema donto from current_user;
grant update, delete, truncate on donto.setting to current_user;

revoke all on all sequences in schema donto from public;

revoke execute on all functions in schema donto from public;
grant execute on all functions in schema donto to donto_writer;

do $$
declare
    v_fn regprocedure;
begin
    -- Read-only API for donto_reader: every function that is not volatile,
    -- plus the PL/Python loader and the read-only volatile ones named here.
    for v_fn in
        select p.oid::regprocedure
        from pg_catalog.pg_proc as p
        inner join pg_catalog.pg_namespace as n on p.pronamespace = n.oid
        where n.nspname = 'donto'
              and p.prokind = 'f'
              and (p.provolatile <> 'v'
                   or p.proname in ('_py_boot', 'recall', 'recall_by_vector', 'recall_payload',
                                    'embed_query', 'render_for_extraction', 'anchor'))
    loop
        execute pg_catalog.format('grant execute on function %s to donto_reader', v_fn);
    end loop;
end;
$$;


-- Let pg_dump keep the data of every table (extension member tables are otherwise
-- dumped empty).
do $$
declare v regclass;
begin
    for v in select c.oid::regclass from pg_catalog.pg_class as c
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        where n.nspname = 'donto' and c.relkind = 'r'
    loop
        perform pg_catalog.pg_extension_config_dump(v, '');
    end loop;
end;
$$;
