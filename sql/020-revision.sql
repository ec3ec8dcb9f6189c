-- Documents, content-addressed revisions and their turn tables.

create or replace function donto._lock_document(p_document_id bigint)
returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* One writer per document at a time (advisory lock 2056 for this transaction): taken by
   donto.register_revision and the append path, so "supersedes" is well defined. */
    select pg_catalog.pg_advisory_xact_lock(2056, p_document_id::integer);
$$;

comment on function donto._lock_document(bigint) is
'Take the document''s writer lock (advisory 2056) for this transaction.';

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
    perform donto._lock_document(v_doc);

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

create or replace function donto._turn_rows(p_turns jsonb)
returns table (
    seq integer, turn_id integer, role text, session integer, exchange integer,
    time_anchor date, header_start integer, char_start integer, char_end integer, meta jsonb
)
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* The rows of a JSON turn table (see donto.record_turns), one per array element. */
    select x.seq, x.turn_id, x.role, x.session, x.exchange, x.date, x.header_start,
           x.char_start, x.char_end, coalesce(x.meta, '{}')
    from pg_catalog.jsonb_to_recordset(p_turns) as x (
        seq integer, turn_id integer, role text, session integer, exchange integer,
        date date, header_start integer, char_start integer, char_end integer, meta jsonb
    );
$$;

comment on function donto._turn_rows(jsonb) is
'The rows of a JSON turn table {seq, turn_id, role, session, exchange, date, header_start, '
'char_start, char_end, meta} (donto.record_turns reads its argument through it).';

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

    -- The rows are read from the argument each time (donto._turn_rows), never staged in
    -- a temp table: a definer must touch nothing a caller can create or shadow.
    v_n := pg_catalog.jsonb_array_length(p_turns);

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
            from donto._turn_rows(p_turns) as t
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
            from donto._turn_rows(p_turns) as t
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
    from donto._turn_rows(p_turns) as t;
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
/* The exact text of [p_start, p_end) in a revision body (0-based offsets in characters,
   not bytes). */
    select substring(r.body from p_start + 1 for p_end - p_start)
    from donto.revision as r
    where r.revision_id = p_revision_id;
$$;

comment on function donto.span_text(bigint, integer, integer) is
'The exact text of a revision span [start, end); offsets count characters (0-based), not '
'bytes.';
