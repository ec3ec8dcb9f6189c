-- Conversations that grow: a revision that extends the latest one (its body
-- starts with the old body) is projected incrementally. Projection A keeps
-- every unchanged window (statement, vector, full-text vector) and supersedes
-- only the old last window; projection B re-segments only the last session;
-- vectors are cached by content (model, SHA-256 of the text).

create or replace function donto._recall_windows_from(
    p_revision_id bigint, p_window integer, p_start integer
)
returns table (
    char_start integer, char_end integer, chunk_text text,
    first_date date, min_date date, max_date date
)
language plpython3u
stable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].recall.recall_windows_from(plpy, p_revision_id, p_window, p_start)
$py$;

comment on function donto._recall_windows_from(bigint, integer, integer) is
'The line-respecting windows of a revision from a window boundary on (donto_pg.core.windows), '
'with the dates of their turns; reads only the body after the boundary.';

create or replace function donto._render_turns(p_turns jsonb, p_start integer, p_prev jsonb)
returns table (appended text, turns jsonb)
language plpython3u
immutable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].append.render_turns(plpy, p_turns, p_start, p_prev)
$py$;

comment on function donto._render_turns(jsonb, integer, jsonb) is
'The canonical text (donto_pg.core.transcript) of messages appended after a body, and their '
'turn '
'table rows (spans in the whole body).';

create or replace function donto._turns_dated_back(p_turns jsonb, p_since integer)
returns text
language plpython3u
immutable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].append.turns_dated_back(plpy, p_turns, p_since)
$py$;

comment on function donto._turns_dated_back(jsonb, integer) is
'What donto.record_turns notices of a turn table ({turn_id, session, date} rows in order): '
'its turns from position P_SINCE on dated before a turn before them in their session, by day '
'(null: none).';

create or replace function donto._extension_fault(p_base bigint, body text, turns jsonb)
returns text
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Why BODY with its turn table TURNS (as donto.record_turns takes it) is not a longer
version of revision P_BASE, or null when it is: BODY starts with the old body and is
longer, the old turns are the first TURNS unchanged, and the other TURNS start after
the old body. The one test of an append: donto.extend_revision refuses with this
reason, and the loaders append rather than load anew when it is null. The owner's
session builds on no other login's revision: its longer text of a document another
login registered is a new revision (the owner takes the document, and the other
login's chunks, vectors and retractions there stop counting), never an append that
would keep them.
*/
declare
    v_base donto.revision;
    v_old text := donto.revision_body(p_base);
    v_chars integer := pg_catalog.char_length(body);
    v_n integer;
    v_bad integer;
    v_lo integer := 0;
    v_hi integer;
    v_mid integer;
begin
    select r.* into strict v_base from donto.revision as r where r.revision_id = p_base;
    if donto._session_owns_schema() and not donto._owners_login(v_base.login_role) then
        return pg_catalog.format(
            'revision %s was registered by login %s: the owner''s session does not build on '
            'another login''s revision (its rows would count as the owner''s)', p_base,
            v_base.login_role);
    end if;
    if v_chars <= v_base.body_chars
       or pg_catalog.left(body, v_base.body_chars) <> v_old then
        -- The first character where they differ (binary search on prefixes).
        v_hi := least(v_chars, v_base.body_chars);
        while v_lo < v_hi loop
            v_mid := (v_lo + v_hi + 1) / 2;
            if pg_catalog.left(body, v_mid) = pg_catalog.left(v_old, v_mid) then
                v_lo := v_mid;
            else
                v_hi := v_mid - 1;
            end if;
        end loop;
        return pg_catalog.format(
            'the new body does not extend revision %s (%s chars; the new body has %s, and '
            'differs from it at char %s)', p_base, v_base.body_chars, v_chars, v_lo);
    end if;
    if turns is null or pg_catalog.jsonb_typeof(turns) <> 'array' then
        return 'turns must be a JSON array';
    end if;

    select pg_catalog.count(*)::integer into v_n from donto.turn as o
    where o.revision_id = p_base;
    -- the first old turn that differs: min(), not "order by seq limit 1", which the planner
    -- ran as a nested loop rescanning the new table once per old turn (quadratic: 21 s
    -- for the 11,746 turns of a BEAM-10M-sized conversation); min() reads both once
    -- (a hash join)
    select pg_catalog.min(o.seq) into v_bad
    from donto.turn as o
    left join donto._turn_rows(turns) as t on o.seq = t.seq
    where o.revision_id = p_base
          and (t.seq is null
               or (o.turn_id, o.role, o.session, o.exchange, o.time_anchor, o.header_start,
                   o.char_start, o.char_end)
               is distinct from (t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
                                 t.header_start, t.char_start, t.char_end));
    if v_bad is not null then
        return pg_catalog.format('turn seq %s of revision %s differs in the new turn table '
                                 '(the old turns must be its prefix)', v_bad, p_base);
    end if;
    select t.seq into v_bad from donto._turn_rows(turns) as t
    where t.seq >= v_n and t.header_start < v_base.body_chars
    order by t.seq limit 1;
    if v_bad is not null then
        return pg_catalog.format('new turn seq %s starts inside the old body (%s chars)',
                                 v_bad, v_base.body_chars);
    end if;
    return null;
end;
$$;

comment on function donto._extension_fault(bigint, text, jsonb) is
'Why a body and turn table do not extend a revision (null when they do): the one test of an '
'append, used by donto.extend_revision and the loaders.';

create or replace function donto.extend_revision(
    document_iri text, body text, turns jsonb, meta jsonb default '{}'
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register BODY, the longer version of the document DOCUMENT_IRI whose latest
revision (donto._latest_revision: the latest projected for recall) is its prefix, with its whole turn table TURNS (as donto.record_turns
takes it: the old turns unchanged, then the new ones, which start after the old
body). Records the link (donto.revision_extension), the turns, and projects the
new revision incrementally wherever the old one was projected: every recall
projection (fixed windows) grows (donto.project_recall keeps every unchanged
window and its vectors, supersedes the old last window), every extraction
projection is re-segmented from its last session (donto.project_extraction).
Returns the new revision id. Idempotent: the same body again returns the same
revision and changes nothing.
Refused with SQLSTATE 22023, before anything is registered, when the document is
unknown or when BODY and TURNS do not extend its latest revision (the reason is
donto._extension_fault's: BODY must start with the old body and be longer, the old
turns must be the first TURNS, the new ones must start after the old body).
*/
declare
    v_doc bigint;
    v_sha bytea := pg_catalog.sha256(pg_catalog.convert_to(body, 'UTF8'));
    v_base bigint;
    v_rev bigint;
    v_fault text;
    v_extends bigint;
begin
    if body is null or body = '' then
        raise exception 'donto.extend_revision: body is empty' using errcode = '22023';
    end if;
    select d.document_id into v_doc from donto.document as d where d.iri = document_iri;
    if not found then
        raise exception 'donto.extend_revision: no document % (load it first)', document_iri
            using errcode = '22023';
    end if;
    perform donto._lock_document(v_doc);
    perform donto._check_document_writer(v_doc, 'donto.extend_revision');

    select r.revision_id into v_rev from donto.revision as r
    where r.sha256 = v_sha and r.document_id = v_doc;
    if found then
        -- Registered already: extended before (or the very revision): nothing new, but make
        -- sure its projections exist (an interrupted call left nothing: one transaction).
        select x.extends_revision_id into v_extends
        from donto.revision_extension as x where x.revision_id = v_rev;
        if found then
            perform donto._extend_projections(v_extends, v_rev);
        end if;
        return v_rev;
    end if;

    -- Checked before anything is registered.
    v_base := donto._latest_revision(v_doc);
    v_fault := donto._extension_fault(v_base, body, turns);
    if v_fault is not null then
        raise exception 'donto.extend_revision: document %: %', document_iri, v_fault
            using errcode = '22023',
                  hint = 'A changed conversation is a new revision: donto.register_revision.';
    end if;

    -- Stored as a skip-delta on an earlier revision of the chain when V_BASE is its latest.
    v_rev := donto._register_revision(document_iri, body, meta, v_base);
    insert into donto.revision_extension (revision_id, extends_revision_id, prefix_chars)
    select v_rev, r.revision_id, r.body_chars from donto.revision as r
    where r.revision_id = v_base;
    perform donto.record_turns(v_rev, turns);
    perform donto._extend_projections(v_base, v_rev);
    return v_rev;
end;
$$;

comment on function donto.extend_revision(text, text, jsonb, jsonb) is
'Register the longer version of a document (its latest revision is a prefix), link it to the '
'revision it extends, record its turns and project it incrementally; idempotent; refuses a '
'body that does not extend the latest revision (22023).';

create or replace function donto._extend_projections(p_base bigint, p_revision_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Project revision P_REVISION_ID (which extends P_BASE) wherever P_BASE is
projected: each recall projection with fixed windows (its window and context)
and each extraction projection (its parameters). Returns how many projections.
*/
declare
    v_p record;
    v_n integer := 0;
begin
    for v_p in
        select distinct (p.params ->> 'window_chars')::integer as w, c.iri, p.context_id
        from donto.projection as p inner join donto.context as c using (context_id)
        where p.kind = 'recall' and p.strategy = 'fixed-window'
              and (p.revision_id = p_base
                   or exists (select 1 from donto.projection_extension as pe
                              where pe.projection_id = p.projection_id
                                    and pe.revision_id = p_base))
        order by p.context_id, 1
    loop
        perform donto.project_recall(p_revision_id, v_p.w, v_p.iri);
        v_n := v_n + 1;
    end loop;
    for v_p in
        select p.params from donto.projection as p
        where p.revision_id = p_base and p.kind = 'extraction'
              and p.strategy = 'turn-coherent-v1'
        order by p.projection_id
    loop
        perform donto.project_extraction(p_revision_id, v_p.params);
        v_n := v_n + 1;
    end loop;
    -- Standing statements (sql/086) are cut from the whole revision (rules, cheap).
    if exists (select 1 from donto.projection as p
               where p.revision_id = p_base and p.kind = 'standing') then
        perform donto.project_standing(p_revision_id);
        v_n := v_n + 1;
    end if;
    return v_n;
end;
$$;

comment on function donto._extend_projections(bigint, bigint) is
'Project an extending revision wherever the revision it extends is projected (recall and '
'extraction).';

create or replace function donto.append_turns(
    document_iri text, turns jsonb, meta jsonb default '{}'
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Append messages to the conversation DOCUMENT_IRI: TURNS is a JSON array of
{role, content} with optional turn_id (default: the previous one + 1), session
(default: the last turn's), date (ISO) and exchange (default: a user message
opens a new exchange). They are rendered in the canonical format
(donto_pg.core.transcript) after the body of the latest revision
(donto._latest_revision: the latest projected for recall), and the longer body is
registered with donto.extend_revision (linked, turns recorded, projected
incrementally). Returns the new revision id.
Idempotent: when the latest revision is already the result of appending these
same turns to the revision it extends, it is returned and nothing changes.
*/
declare
    v_doc bigint;
    v_base donto.revision;
    v_prev jsonb;
    v_text text;
    v_rows jsonb;
    v_x donto.revision_extension;
    v_all jsonb;
begin
    if turns is null or pg_catalog.jsonb_typeof(turns) <> 'array'
       or pg_catalog.jsonb_array_length(turns) = 0 then
        raise exception 'donto.append_turns: turns must be a non-empty JSON array'
            using errcode = '22023';
    end if;
    select d.document_id into v_doc from donto.document as d where d.iri = document_iri;
    if not found then
        raise exception 'donto.append_turns: no document % (load it first)', document_iri
            using errcode = '22023';
    end if;
    perform donto._lock_document(v_doc);
    perform donto._check_document_writer(v_doc, 'donto.append_turns');
    select r.* into v_base from donto.revision as r
    where r.revision_id = donto._latest_revision(v_doc);

    -- Already appended: the latest revision extends one by exactly this text.
    select x.* into v_x from donto.revision_extension as x
    where x.revision_id = v_base.revision_id;
    if found then
        select pg_catalog.to_jsonb(t) into v_prev from (
            select t.seq, t.turn_id, t.session, t.exchange from donto.turn as t
            where t.revision_id = v_x.extends_revision_id order by t.seq desc limit 1
        ) as t;
        select r.appended into v_text
        from donto._render_turns(turns, v_x.prefix_chars, v_prev) as r;
        if v_x.prefix_chars + pg_catalog.char_length(v_text) = v_base.body_chars
           and donto.span_text(v_base.revision_id, v_x.prefix_chars, v_base.body_chars)
               = v_text then
            return v_base.revision_id;
        end if;
    end if;

    -- the last turn, with the latest date of its session (what an undated new turn of
    -- that session inherits, as the loaders date it)
    select pg_catalog.to_jsonb(t) into v_prev from (
        select t.seq, t.turn_id, t.session, t.exchange,
               (select t2.time_anchor from donto.turn as t2
                where t2.revision_id = t.revision_id and t2.session = t.session
                      and t2.time_anchor is not null
                order by t2.seq desc limit 1) as date
        from donto.turn as t
        where t.revision_id = v_base.revision_id order by t.seq desc limit 1
    ) as t;
    select r.appended, r.turns into v_text, v_rows
    from donto._render_turns(turns, v_base.body_chars, v_prev) as r;
    select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'seq', t.seq, 'turn_id', t.turn_id, 'role', t.role, 'session', t.session,
               'exchange', t.exchange, 'date', t.time_anchor, 'header_start', t.header_start,
               'char_start', t.char_start, 'char_end', t.char_end, 'meta', t.meta)
               order by t.seq), '[]'::jsonb)
    into v_all
    from donto.turn as t where t.revision_id = v_base.revision_id;
    return donto.extend_revision(document_iri, donto.revision_body(v_base.revision_id) || v_text,
                                 v_all || v_rows,
                                 coalesce(meta, '{}') || v_base.meta);
end;
$$;

comment on function donto.append_turns(text, jsonb, jsonb) is
'Append messages ({role, content, turn_id?, session?, date?, exchange?}) to a conversation: '
'the longer body as a new revision that extends the latest, projected incrementally; '
'idempotent.';

create or replace function donto._extend_recall(p_projection_id bigint, p_revision_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Grow the recall projection P_PROJECTION_ID to revision P_REVISION_ID, which
extends the projection's latest revision. The windows are greedy from the
start, so every window but the last old one is unchanged: those chunks are
kept (statements, vectors, full-text vectors); the windows from the start of
the old last window on are cut again (donto._recall_windows_from) and recorded
as new chunks of P_REVISION_ID; the old last window, unless the new cut kept it
as it was, is retracted (superseded). Returns the revision's chunk count.
The full-text vectors of the new chunks are left to donto.index_lexical.
*/
declare
    v_proj donto.projection;
    v_doc bigint;
    v_window integer;
    v_last record;
    v_body_chars integer;
    v_base bigint;
    v_before integer;
    v_next integer;
    v_w record;
    v_sid bigint;
    v_from integer;
    v_new integer;
    v_superseded bigint;
begin
    select p.* into strict v_proj from donto.projection as p
    where p.projection_id = p_projection_id;
    v_window := (v_proj.params ->> 'window_chars')::integer;
    select r.document_id into strict v_doc from donto.revision as r
    where r.revision_id = p_revision_id;
    select x.extends_revision_id into strict v_base from donto.revision_extension as x
    where x.revision_id = p_revision_id;
    perform donto._lock('extend-recall', p_projection_id);

    -- How many chunks the base revision has in this projection.
    select pe.reused_chunks + pe.new_chunks into v_before
    from donto.projection_extension as pe
    where pe.projection_id = p_projection_id and pe.revision_id = v_base;
    if not found then
        if v_proj.revision_id <> v_base then
            raise exception 'donto._extend_recall: projection % does not hold revision %',
                p_projection_id, v_base using errcode = '22023';
        end if;
        select pg_catalog.count(*)::integer into v_before from donto.x_memory_record as m
        where m.projection_id = p_projection_id and m.revision_id = v_base;
    end if;

    -- The base's last window: its live chunk that starts last.
    select m.statement_id, m.char_start, m.char_end, s.valid_time into v_last
    from donto.x_memory_record as m
    inner join donto.statement as s on m.statement_id = s.statement_id
    where m.projection_id = p_projection_id
          and not exists (select 1 from donto.projection_extension as pe
                          where pe.superseded_statement_id = m.statement_id)
    order by m.char_start desc, m.statement_id desc
    limit 1;
    select r.body_chars into strict v_body_chars from donto.revision as r
    where r.revision_id = v_base;
    if v_last.statement_id is null or v_last.char_end <> v_body_chars then
        raise exception 'donto._extend_recall: projection % does not end at the end of '
            'revision % (% chars)', p_projection_id, v_base, v_body_chars
            using errcode = 'XX000';
    end if;
    select coalesce(pg_catalog.max(m.chunk_index), -1) + 1 into v_next
    from donto.x_memory_record as m where m.projection_id = p_projection_id;

    v_new := 0;
    for v_w in
        select w.char_start, w.char_end, w.chunk_text, w.first_date,
               case when w.min_date is null then '(,)'::daterange
                    else pg_catalog.daterange(w.min_date, w.max_date, '[]') end as valid_time
        from donto._recall_windows_from(p_revision_id, v_window, v_last.char_start) as w
        order by w.char_start
    loop
        if v_from is null then
            -- The first window starts where the old last window starts: unchanged, or
            -- the old one is superseded.
            if v_w.char_end = v_last.char_end and v_w.valid_time = v_last.valid_time then
                v_from := v_last.char_end;
                continue;
            end if;
            v_superseded := v_last.statement_id;
            v_from := v_last.char_start;
            insert into donto.retraction (statement_id, reason)
            values (v_last.statement_id, pg_catalog.format(
                'donto.append: superseded by revision %s (the conversation grew; the window '
                'was cut again)', p_revision_id))
            on conflict do nothing;
            v_before := v_before - 1;
        end if;
        insert into donto.statement (
            subject, predicate, object_lit, context_id, valid_time,
            document_id, derived_from_revision, char_start, char_end
        ) values (
            pg_catalog.format('chunk:%s/%s/%s', p_revision_id, v_window, v_before + v_new),
            'mem:episodic/chunk',
            pg_catalog.jsonb_build_object('v', v_w.chunk_text, 'dt', v_w.first_date),
            v_proj.context_id, v_w.valid_time, v_doc, p_revision_id, v_w.char_start, v_w.char_end
        ) returning statement_id into v_sid;
        insert into donto.x_memory_record (
            statement_id, projection_id, revision_id, chunk_index, char_start, char_end
        ) values (
            v_sid, p_projection_id, p_revision_id, v_next + v_new, v_w.char_start, v_w.char_end
        );
        v_new := v_new + 1;
    end loop;
    if v_from is null then
        raise exception 'donto._extend_recall: revision % has no window from char %',
            p_revision_id, v_last.char_start using errcode = 'XX000';
    end if;

    insert into donto.projection_extension (
        projection_id, revision_id, extends_revision_id, from_char, first_chunk_index,
        reused_chunks, new_chunks, superseded_statement_id
    ) values (
        p_projection_id, p_revision_id, v_base, v_from, v_next, v_before, v_new, v_superseded
    );
    return v_before + v_new;
end;
$$;

comment on function donto._extend_recall(bigint, bigint) is
'Grow a recall projection to a revision that extends its latest one: unchanged windows kept '
'with their vectors, the old last window superseded (retracted), the new tail recorded.';

create or replace function donto._projection_chunks(
    p_projection_id bigint, p_revision_id bigint,
    p_from integer default 0, p_to integer default 2147483647
)
returns table (statement_id bigint, revision_id bigint, char_start integer, char_end integer)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The chunks of recall projection P_PROJECTION_ID that make up revision
P_REVISION_ID (cut from it, or kept from a revision it extends) and overlap
[P_FROM, P_TO), in body order. A chunk is at most the projection's window long,
so only chunks starting after P_FROM - window are read.
*/
    with recursive chain as (
        -- The revision, then the revisions it extends, each with the position before
        -- which its chunks belong to the later revision.
        select $2 as rev, 2147483647 as upto
        union all
        select pe.extends_revision_id, least(chain.upto, pe.from_char)
        from chain
        inner join donto.projection_extension as pe
            on pe.projection_id = $1 and pe.revision_id = chain.rev
    )
    select m.statement_id, m.revision_id, m.char_start, m.char_end
    from chain
    inner join donto.projection as p on p.projection_id = $1
    inner join donto.x_memory_record as m
        on m.projection_id = $1 and m.revision_id = chain.rev
           and m.char_start < least(chain.upto, $4)
           and m.char_start >= $3 - (p.params ->> 'window_chars')::integer
           and m.char_end > $3
    order by m.char_start;
$$;

comment on function donto._projection_chunks(bigint, bigint, integer, integer) is
'The chunks of a recall projection that make up a revision (also one that grew from an '
'earlier revision), overlapping a span, in body order.';

create or replace function donto.revision_chunks(
    p_revision_id bigint, window_chars integer default 1200, context text default null
)
returns table (
    chunk_position integer, statement_id bigint, revision_id bigint,
    char_start integer, char_end integer, chunk_text text
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The recall chunks of projection A of a revision (window WINDOW_CHARS, context
CONTEXT, default the document's recall context) in body order, whether the
revision was cut from scratch or grew from the revision it extends (then the
kept chunks were cut from an earlier revision: the same bytes, as its body is
a prefix). CHUNK_POSITION is the window's position in the revision.
*/
    select
        (pg_catalog.row_number() over (order by c.char_start) - 1)::integer,
        c.statement_id, c.revision_id, c.char_start, c.char_end, s.object_lit ->> 'v'
    from (
        select pr.projection_id
        from donto.projection as pr
        inner join donto.revision as r on r.revision_id = $1
        inner join donto.document as d on r.document_id = d.document_id
        inner join donto.context as ct
            on ct.iri = coalesce($3, donto.recall_context_iri(d.iri))
        where pr.kind = 'recall' and pr.strategy = 'fixed-window'
              and pr.context_id = ct.context_id
              and (pr.params ->> 'window_chars')::integer = $2
              and (pr.revision_id = $1
                   or exists (select 1 from donto.projection_extension as pe
                              where pe.projection_id = pr.projection_id
                                    and pe.revision_id = $1))
        order by pr.projection_id
        limit 1
    ) as p
    cross join lateral donto._projection_chunks(p.projection_id, $1) as c
    inner join donto.statement as s on c.statement_id = s.statement_id
    order by c.char_start;
$$;

comment on function donto.revision_chunks(bigint, integer, text) is
'Recall chunks of a revision''s projection A in body order (position, statement, span, '
'text), also for a revision that grew from an earlier one.';

create or replace function donto.cached_embeddings(p_model_id integer, p_sha256 bytea[])
returns table (sha256 bytea, embedding vector)
language sql
stable
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/* The cached vectors of model P_MODEL_ID for the texts whose SHA-256 are P_SHA256: only
   trusted entries (stored by a session of the schema's owner, migration 023). */
    select c.sha256, c.embedding
    from donto.embedding_cache as c
    where c.model_id = $1 and c.sha256 = any($2) and c.trusted;
$$;

comment on function donto.cached_embeddings(integer, bytea[]) is
'Vectors already computed for these texts (by SHA-256) with a model, by a session of the '
'schema''s owner: the embed step encodes only the others.';

create or replace function donto._embedding_cache_fill()
returns trigger
language plpgsql
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
After vectors are inserted into donto.embedding by a session of the schema's
owner (donto._session_owns_schema): key them by content in donto.embedding_cache
(recall chunks by their text, A/B units by the text of their span, as the embed
step encodes them). Existing keys are kept. A writer's vectors are not cached: a
vector a writer made up would otherwise be handed to every later chunk of the same
text, in any document. Nor are copies of stored vectors (donto.ab_reuse_embeddings
sets donto.embedding_copy for its insert): the original may be a writer's. A superuser restoring a dump (check_function_bodies = off)
fills nothing: the dump brings the cache's own rows.
*/
begin
    if not donto._session_owns_schema()
       or pg_catalog.current_setting('donto.embedding_copy', true) = 'on'
       or (pg_catalog.current_setting('is_superuser') = 'on'
           and pg_catalog.current_setting('check_function_bodies') = 'off') then
        return null;
    end if;
    insert into donto.embedding_cache (model_id, sha256, embedding)
    select distinct on (n.model_id, x.sha) n.model_id, x.sha, n.embedding
    from new_rows as n
    inner join donto.statement as s on n.statement_id = s.statement_id
    cross join lateral (
        select pg_catalog.sha256(pg_catalog.convert_to(
            case when s.predicate = 'mem:episodic/chunk' then s.object_lit ->> 'v'
                else donto.span_text(s.derived_from_revision, s.char_start, s.char_end)
            end, 'UTF8')) as sha
    ) as x
    where s.predicate in ('mem:episodic/chunk', 'mem:measure/unit')
    order by n.model_id, x.sha, n.statement_id
    on conflict do nothing;
    return null;
end;
$$;

comment on function donto._embedding_cache_fill() is
'Trigger body: key the vectors a session of the schema''s owner inserts by content in '
'donto.embedding_cache (a writer''s are not cached).';

drop trigger if exists embedding_cache_fill on donto.embedding;
create trigger embedding_cache_fill after insert on donto.embedding
referencing new table as new_rows
for each statement execute function donto._embedding_cache_fill();

create or replace function donto._extraction_blocks_from(
    rev_id bigint, params jsonb, from_turn integer
)
returns table (
    seq integer, kind text, char_start integer, char_end integer, turns jsonb,
    prefix_start integer, prefix_end integer, prefix_turn_seq integer, split boolean,
    min_date date, max_date date
)
language plpython3u
stable
security invoker
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].extraction.extraction_blocks(plpy, rev_id, params, from_turn)
$py$;

comment on function donto._extraction_blocks_from(bigint, jsonb, integer) is
'The extraction blocks of a revision from the session opened by turn FROM_TURN on, numbered '
'from 0 (donto_pg.segmenter).';

create or replace function donto._extend_extraction(
    p_projection_id bigint, p_base_projection_id bigint
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Fill the new extraction projection P_PROJECTION_ID of a revision that extends
the revision of P_BASE_PROJECTION_ID (same parameters). Sessions are hard
boundaries of the segmenter (a block never spans two, the inert prefix never
crosses one), so the blocks before the session of the base's last block are
the same: they are copied; the revision is segmented again only from the first
turn of that session. Returns the block count.
*/
declare
    v_rev bigint;
    v_base bigint;
    v_params jsonb;
    v_last_turn integer;
    v_from_turn integer;
    v_from_char integer;
    v_kept integer;
    v_n integer;
begin
    select p.revision_id, p.params into strict v_rev, v_params from donto.projection as p
    where p.projection_id = p_projection_id;
    select p.revision_id into strict v_base from donto.projection as p
    where p.projection_id = p_base_projection_id;
    -- The first turn of the base's last block, and the first turn of its session run.
    select (b.turns -> 0 ->> 'seq')::integer into v_last_turn
    from donto.extraction_block as b where b.projection_id = p_base_projection_id
    order by b.seq desc limit 1;
    select coalesce(pg_catalog.max(t.seq) + 1, 0) into v_from_turn
    from donto.turn as t
    inner join donto.turn as l on l.revision_id = v_base and l.seq = v_last_turn
    where t.revision_id = v_base and t.seq < v_last_turn
          and t.session is distinct from l.session;
    select t.header_start into v_from_char from donto.turn as t
    where t.revision_id = v_rev and t.seq = v_from_turn;

    insert into donto.extraction_block (
        projection_id, revision_id, seq, kind, char_start, char_end, turns,
        prefix_start, prefix_end, prefix_turn_seq, split, valid_time
    )
    select
        p_projection_id, v_rev, b.seq, b.kind, b.char_start, b.char_end, b.turns,
        b.prefix_start, b.prefix_end, b.prefix_turn_seq, b.split, b.valid_time
    from donto.extraction_block as b
    where b.projection_id = p_base_projection_id and b.char_start < v_from_char
    order by b.seq;
    get diagnostics v_kept = row_count;

    insert into donto.extraction_block (
        projection_id, revision_id, seq, kind, char_start, char_end, turns,
        prefix_start, prefix_end, prefix_turn_seq, split, valid_time
    )
    select
        p_projection_id, v_rev, v_kept + b.seq, b.kind, b.char_start, b.char_end, b.turns,
        b.prefix_start, b.prefix_end, b.prefix_turn_seq, b.split,
        case when b.min_date is null then '(,)'::daterange
             else pg_catalog.daterange(b.min_date, b.max_date, '[]') end
    from donto._extraction_blocks_from(v_rev, v_params, v_from_turn) as b
    order by b.seq;
    get diagnostics v_n = row_count;
    return v_kept + v_n;
end;
$$;

comment on function donto._extend_extraction(bigint, bigint) is
'Projection B of an extending revision: the blocks before the last session copied from the '
'revision it extends, the rest segmented again.';

create or replace function donto._spans_in(
    p_old bigint, p_new bigint, p_starts integer[], p_ends integer[]
)
returns table (i integer, char_start integer, char_end integer)
language plpython3u
stable
security invoker
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].append.spans_in(plpy, p_old, p_new, p_starts, p_ends)
$py$;

comment on function donto._spans_in(bigint, bigint, integer[], integer[]) is
'Where the text of each span (P_STARTS[i], P_ENDS[i]) of revision P_OLD stands in revision '
'P_NEW, a changed text of the same conversation: rows (i from 1, start, end); none, one or '
'several per span (donto_pg.core.spans).';

create or replace function donto._not_taken_since(
    p_login text, p_at timestamptz, p_document_id bigint, p_revision_id bigint
)
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Whether what login P_LOGIN forgot at P_AT in document P_DOCUMENT_ID, as its writer, still
counts for revision P_REVISION_ID: the revision existed then (what the document's writer
asked stands for the texts it asked about, whoever has the document later), or the owner
has not taken the document since (a grant to a login that counts as the owner's, other
than P_LOGIN, made from P_AT on and by the time the revision was registered: the owner's
load of a text a writer registered first, or the owner giving it to itself). The squatter
rule of donto._forgot_then and donto._forgotten_spans. Never null.
*/
    with rv as (
        select r.registered_at from donto.revision as r where r.revision_id = p_revision_id
    )

    select coalesce(
        (select rv.registered_at <= p_at from rv)
        or not exists (
            select 1 from donto.document_grant as g
            cross join rv
            where g.document_id = p_document_id
                  and g.granted_at >= p_at and g.granted_at <= rv.registered_at
                  and g.login_role is distinct from p_login
                  and donto._owners_login(g.login_role)
        ),
        false
    );
$$;

comment on function donto._not_taken_since(text, timestamptz, bigint, bigint) is
'Whether a forgetting a writer made at a time still counts for a revision: the revision '
'existed then, or the owner has not taken the document since. Stable.';

create or replace function donto._forgot_then(
    p_login text, p_at timestamptz, p_document_id bigint, p_revision_id bigint
)
returns boolean
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Whether a retraction by hand that login P_LOGIN made at P_AT in document P_DOCUMENT_ID
still counts for revision P_REVISION_ID although the login may not add to the document now
(donto._forgotten_spans asks this only then): it was the document's writer then (the
document's login at P_AT, by the grants made by then, else its first registrant; or a
member of that login, both bound), and either the revision existed then (what the
document's writer asked stands for the texts it asked about, whoever has the document
later) or the owner has not taken the document since (a grant to a login that counts as
the owner's, made from P_AT on and by the time the revision was registered: the owner's
load of a text a writer registered first, donto.register_revision, or the owner giving it
to itself). A give_document to another login hands the forgetting on with the document:
the new writer's later revisions stay forgotten. The squatter case: a writer who
registered the start of the owner's text and retracted it hides nothing of the owner's
load, which took the document. Never null.
*/
    with w as (
        select coalesce(
            (select g.login_role from donto.document_grant as g
             where g.document_id = p_document_id and g.granted_at <= p_at
             order by g.grant_id desc limit 1),
            (select r.login_role from donto.revision as r
             where r.document_id = p_document_id order by r.revision_id limit 1)) as login
    )

    select coalesce(
        (select w.login = p_login
                or coalesce((select pg_catalog.pg_has_role(l.oid, o.oid, 'MEMBER')
                                    and donto._login_bound(l.rolname)
                                    and donto._login_bound(o.rolname)
                             from pg_catalog.pg_roles as l
                             cross join pg_catalog.pg_roles as o
                             where l.rolname = p_login and o.rolname = w.login), false)
         from w)
        and donto._not_taken_since(p_login, p_at, p_document_id, p_revision_id),
        false
    );
$$;

comment on function donto._forgot_then(text, timestamptz, bigint, bigint) is
'Whether a retraction by hand a login made at a time still counts for a revision of the '
'document: the login was its writer then, and the revision existed then or the owner has '
'not taken the document since (give_document hands the forgetting on). Stable.';

create or replace function donto._forgotten_spans(
    p_context_id bigint, p_revision_id bigint, p_as_of timestamptz
)
returns table (
    statement_id bigint, subject text, predicate text, object_lit jsonb,
    char_start integer, char_end integer, reason text, login_role text
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
What was retracted by hand (donto.retract) in context P_CONTEXT_ID from another revision
than P_REVISION_ID, as spans of P_REVISION_ID: a revision of its lineage (a text it
extends, or one that extends it) has its spans as they are (the same text there); a
revision outside it (the conversation changed) has them where their text stands in
P_REVISION_ID (donto._spans_in: in place before the edit, shifted after it, and in
between as a line diff maps it: none, one or several places). A statement without a span
comes as it is (matched by subject, predicate and object). Only the retractions asked
for count (and the requests by hand of a statement a carried retraction had taken,
donto.retraction_request), not those carried from them (reason "carried over from
statement N"), so a
forgotten span is mapped from the text it was forgotten in, once, and does not widen at
every edit; and only those asked by a login that may add to the document now
(donto._login_writes_document: the owner, the document's login, a member of it) or that
was its writer when it asked (recorded by donto.retract, writer_then, else
donto._forgot_then: for the revisions that existed then, and for later ones unless the
owner took the document since, donto._not_taken_since; give_document hands the
forgetting on): a writer who registered the start of a text first and retracted it cannot
hide the text of the owner, who took the document by loading it. P_AS_OF (null: now):
only the retractions made by then.
P_CONTEXT_ID null: the forgotten WORDS of the document (migration 034): the recall chunks
(mem:episodic/chunk) retracted by hand in any context of the document, P_REVISION_ID's own
included, as spans of P_REVISION_ID (donto._forgotten_text, donto._forget_in). For
donto._carry_retractions and donto._reconcile_claims (with a context).
*/
    -- the retractions asked for in the document (or the context), first: the login checks
    -- below then run for these only (not for every document's), and once per login
    with asked as materialized (
        select
            o.statement_id, o.subject, o.predicate, o.object_lit, o.derived_from_revision,
            o.char_start, o.char_end, r.reason, r.login_role, r.tx_from, r.writer_then,
            n.document_id
        from (
            select h.statement_id, h.reason, h.login_role, h.tx_from, h.writer_then
            from donto.retraction as h
            where h.by_hand and h.reason not like 'carried over from statement %'
            union all  -- asked by hand of a statement a carried retraction had taken
            select q.statement_id, q.reason, q.login_role, q.tx_from, q.writer_then
            from donto.retraction_request as q
        ) as r
        inner join donto.statement as o on r.statement_id = o.statement_id
        inner join donto.revision as n on n.revision_id = p_revision_id
        inner join donto.context as oc on o.context_id = oc.context_id
        where case when p_context_id is null
                       then o.predicate = 'mem:episodic/chunk' and o.char_start is not null
                            and o.document_id = n.document_id
                            -- an A/B arm's unit is a measurement, not the document's memory
                            and oc.iri not like 'ctx:measure/%'
                       else o.context_id = p_context_id
                            and o.derived_from_revision <> p_revision_id end
              and (p_as_of is null or r.tx_from <= p_as_of)
    ),

    writers as materialized (  -- may the login add to the document now: once per login
        select w.login_role, donto._login_writes_document(w.login_role, w.document_id) as now
        from (select distinct a.login_role, a.document_id from asked as a) as w
    ),

    gone as materialized (
        select
            a.statement_id, a.subject, a.predicate, a.object_lit, a.derived_from_revision,
            a.char_start, a.char_end, a.reason, a.login_role,
            a.char_start is null or a.derived_from_revision in (
                select l.rev from donto.revision_lineage(p_revision_id) as l (rev)
            ) as same_place
        from asked as a
        inner join writers as w on a.login_role is not distinct from w.login_role
        where w.now
              or case when a.writer_then  -- recorded by donto.retract: no membership
                      then donto._not_taken_since(a.login_role, a.tx_from,
                                                  a.document_id, p_revision_id)
                      else donto._forgot_then(a.login_role, a.tx_from, a.document_id,
                                              p_revision_id) end
    ),
    moved as (
        select
            g.derived_from_revision as rev,
            pg_catalog.array_agg(g.statement_id order by g.statement_id) as ids,
            pg_catalog.array_agg(g.char_start order by g.statement_id) as starts,
            pg_catalog.array_agg(g.char_end order by g.statement_id) as ends
        from gone as g
        where not g.same_place
        group by g.derived_from_revision
    )
    select g.statement_id, g.subject, g.predicate, g.object_lit, g.char_start, g.char_end,
           g.reason, g.login_role
    from gone as g
    where g.same_place
    union all
    select g.statement_id, g.subject, g.predicate, g.object_lit, m.char_start, m.char_end,
           g.reason, g.login_role
    from moved as x
    cross join lateral donto._spans_in(x.rev, p_revision_id, x.starts, x.ends) as m
    inner join gone as g on x.ids[m.i] = g.statement_id;
$$;

comment on function donto._forgotten_spans(bigint, bigint, timestamptz) is
'What was retracted by hand in a context (null: the recall chunks of the whole document, '
'the revision''s own included), as spans of this revision (where its text stands here when '
'the conversation changed), as of a time (null: now).';

create or replace function donto._forgotten_spans(p_context_id bigint, p_revision_id bigint)
returns table (
    statement_id bigint, subject text, predicate text, object_lit jsonb,
    char_start integer, char_end integer, reason text, login_role text
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* donto._forgotten_spans(P_CONTEXT_ID, P_REVISION_ID, null): as known now. */
    select * from donto._forgotten_spans(p_context_id, p_revision_id, null::timestamptz);
$$;

comment on function donto._forgotten_spans(bigint, bigint) is
'What was retracted by hand in a context, from other revisions, as spans of this revision '
'(where its text stands here when the conversation changed).';

create or replace function donto._forgotten_text(p_revision_id bigint, p_as_of timestamptz)
returns int4multirange
language sql
stable
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The forgotten words of revision P_REVISION_ID as known at P_AS_OF (null: now): the spans
of the recall chunks retracted by hand (donto.retract) in any revision of its document,
as they stand in this one (donto._forgotten_spans with no context: the same place in its
lineage, where the text stands now when the conversation changed; only the retractions
asked by a login that may add to the document). Empty when nothing was forgotten. Recall
clips these characters out of what it reads from the body around a hit (turn blocks) and
leaves out the recall keys that hold any of them. A definer (it maps spans through the
bodies with donto._spans_in, which readers may not call); it returns offsets only.
*/
    select coalesce(pg_catalog.range_agg(pg_catalog.int4range(f.char_start, f.char_end)),
                    '{}'::int4multirange)
    from donto._forgotten_spans(null, p_revision_id, p_as_of) as f
    where f.char_start < f.char_end;
$$;

comment on function donto._forgotten_text(bigint, timestamptz) is
'The spans of a revision whose words were forgotten (recall chunks retracted by hand, mapped '
'to this revision), as of a time; recall clips them out of turn blocks.';

create or replace function donto._forget_in(p_revision_id bigint, p_ids bigint[])
returns integer
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Forgetting is about text: retract the current statements of revision P_REVISION_ID (only
those of P_IDS, unless null) whose span overlaps words forgotten there
(donto._forgotten_spans with no context: a recall chunk retracted by hand in any revision of
the document, mapped to this one), in every context but the A/B measure ones: the chunks of
other recall projections, standing statements (the rules' and an LLM run's), claims, session
summaries. Reason "carried over from statement N: <reason>", by hand, in the name of whoever
asked (so donto._forgotten_spans does not take them for forgotten text of their own and the
area does not widen). Called by donto.retract (the revisions of the document) and by the
trigger donto._forget_new_statements (what is filed later: a grown or changed text's
projections, claims extracted afterwards). Claims and the LLM's standing statements go by
their block too, span or none (an unquoted hypothesis, an object that repeats the words
beside a quote from elsewhere in the block): a block whose text overlaps forgotten words is
done with, every claim of it whenever it was extracted (a prompt rendered before the
forgetting, or while it waited for its lock, held the words; donto.ingest_extraction calls
this for its answer's claims once they are filed, and donto.pending_extraction_blocks no
longer lists such a block). Returns the count.
*/
    with gone as materialized (
        select f.statement_id, f.char_start, f.char_end, f.reason, f.login_role
        from donto._forgotten_spans(null, p_revision_id, null) as f
        where f.char_start < f.char_end
    ),

    -- the statements over the words: every one of the revision, or (P_IDS: the trigger,
    -- the rows just filed) those of P_IDS, found by their ids, not by reading every
    -- statement of the revision at each filing (18,000 of a BEAM-10M-sized one)
    spans as (
        select s.statement_id, g.statement_id as source, g.reason, g.login_role
        from gone as g
        inner join donto.statement as s
            on s.derived_from_revision = p_revision_id
               and s.char_start < g.char_end and g.char_start < s.char_end
        inner join donto.context as c on s.context_id = c.context_id
        where p_ids is null and c.iri not like 'ctx:measure/%'
        union all
        select s.statement_id, g.statement_id as source, g.reason, g.login_role
        from (select distinct i.id from pg_catalog.unnest(p_ids) as i (id)) as i
        inner join donto.statement as s on i.id = s.statement_id
        inner join gone as g on s.char_start < g.char_end and g.char_start < s.char_end
        inner join donto.context as c on s.context_id = c.context_id
        where s.derived_from_revision = p_revision_id and c.iri not like 'ctx:measure/%'
    ),

    -- P_IDS: the claims among them and those the LLM's standing statements among them were
    -- made of (by id), the only claims the result can name then
    named as (
        select i.id as claim from pg_catalog.unnest(p_ids) as i (id)
        union
        select xc.statement_id
        from pg_catalog.unnest(p_ids) as i (id)
        inner join donto.x_standing as xs
            on i.id = xs.statement_id
               and xs.revision_id = p_revision_id and xs.detector = 'llm-v1'
        inner join donto.statement as ss on xs.statement_id = ss.statement_id
        inner join donto.x_claim as xc
            on xc.statement_id = (case when ss.object_lit ->> 'claim' ~ '^[0-9]{1,18}$'
                                       then (ss.object_lit ->> 'claim')::bigint end)
               and ss.object_lit ->> 'claim' = xc.statement_id::text
    ),

    -- a block that holds the words is done with: every claim of a block whose text (its
    -- turns or its CONTEXT prefix) overlaps them, whenever it was extracted (no clock
    -- tells whether its prompt was rendered before the forgetting), and the LLM's standing
    -- statements made of those claims. An A/B arm's blocks are measurements.
    answered as (
        select xc.statement_id as claim, g.statement_id as source, g.reason, g.login_role
        from gone as g
        inner join donto.extraction_block as b
            on b.revision_id = p_revision_id
               and ((b.char_start < g.char_end and g.char_start < b.char_end)
                    or (b.prefix_start < g.char_end and g.char_start < b.prefix_end))
        inner join donto.projection as p on b.projection_id = p.projection_id
        inner join donto.extraction_response as x on b.block_id = x.block_id
        inner join donto.x_claim as xc on x.response_id = xc.response_id
        where p_ids is null and p.strategy not like 'ab/%'
        union all  -- P_IDS: from the claims named, not every answer's of the database
        select xc.statement_id as claim, g.statement_id as source, g.reason, g.login_role
        from named as k
        inner join donto.x_claim as xc on k.claim = xc.statement_id
        inner join donto.extraction_response as x on xc.response_id = x.response_id
        inner join donto.extraction_block as b
            on x.block_id = b.block_id and b.revision_id = p_revision_id
        inner join donto.projection as p on b.projection_id = p.projection_id
        inner join gone as g
            on (b.char_start < g.char_end and g.char_start < b.char_end)
               or (b.prefix_start < g.char_end and g.char_start < b.prefix_end)
        where p.strategy not like 'ab/%'
    ),

    blocks as (
        select a.claim as statement_id, a.source, a.reason, a.login_role from answered as a
        union all
        select xs.statement_id, a.source, a.reason, a.login_role
        from answered as a
        inner join donto.x_standing as xs
            on xs.revision_id = p_revision_id and xs.detector = 'llm-v1'
        inner join donto.statement as ss
            on xs.statement_id = ss.statement_id
               and ss.object_lit ->> 'claim' = a.claim::text
    ),

    carried as (
        insert into donto.retraction (statement_id, reason, by_hand, login_role)
        select distinct on (t.statement_id)
            t.statement_id,
            pg_catalog.format('carried over from statement %s: %s', t.source, t.reason),
            true,
            t.login_role
        from (
            select * from spans
            union all
            select k.* from blocks as k
            where p_ids is null or k.statement_id = any(p_ids)
        ) as t
        where not exists (select 1 from donto.retraction as r2
                          where r2.statement_id = t.statement_id)
        order by t.statement_id, t.source
        on conflict do nothing
        returning 1
    )

    select pg_catalog.count(*)::integer from carried;
$$;

comment on function donto._forget_in(bigint, bigint[]) is
'Retract the statements of a revision (of P_IDS, or all) that overlap its forgotten words '
'(recall chunks retracted by hand, mapped to it), every context but A/B measures; returns '
'the count.';

create or replace function donto._lock_forgetting(p_document_id bigint)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Forgetting and filing wait for each other (donto.retract of a recall chunk takes it before
its retraction and donto._forget_in): the document's row locked FOR NO KEY UPDATE, which
conflicts with the FOR SHARE that the trigger donto._forget_new_statements takes on the
document rows of every insert of statements outside the A/B measure contexts (before it
looks for forgotten words), and not with the FOR KEY SHARE of the foreign key of
donto.statement.document_id: another writer measuring an A/B arm on the document's text
does not hold a forgetting up. So a forgetting waits for the transactions that are filing
statements of the document to commit, and its queries then see their rows (READ
COMMITTED: each a new snapshot); and a statement filed while it is in progress waits for
it, and the trigger then sees its retraction. A row lock fires no trigger (I3's refuse
only UPDATE, DELETE, TRUNCATE); it needs UPDATE on a column, which the owner has
(sql/090-roles.sql). A REPEATABLE READ or
SERIALIZABLE transaction whose snapshot was taken before the other committed does not see
it (README: "Forgetting is about text").
*/
begin
    perform 1 from donto.document as d where d.document_id = p_document_id for no key update;
end;
$$;

comment on function donto._lock_forgetting(bigint) is
'Lock a document''s row FOR NO KEY UPDATE for this transaction: a forgetting waits for the '
'filings in progress there (their FOR SHARE, donto._forget_new_statements) and later '
'filings wait for it.';

create or replace function donto._forget_new_statements()
returns trigger
language plpgsql
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Statement trigger on donto.statement (AFTER INSERT, transition table new_rows): what is
filed over forgotten words is retracted at once (donto._forget_in), whichever projection
filed it (the re-cut window of a grown text, a changed text's chunks and standing
statements, claims extracted after the retraction, a session summary), so no statement
ever shows a forgotten text, as_of any time. First it locks the document rows of the new
statements outside the A/B measure contexts FOR SHARE, which waits for a forgetting in
progress there (donto._lock_forgetting, FOR NO KEY UPDATE) and makes a later one wait for
this transaction; only then does it look (a new snapshot: READ COMMITTED) for forgotten
words, so a forgetting that committed while it waited is seen. Then it costs one probe of
the partial index of the retractions by hand when nothing was ever forgotten.
*/
declare
    v_rev bigint;
begin
    perform 1 from donto.document as d
    where d.document_id in (
        select n.document_id from new_rows as n
        inner join donto.context as c on n.context_id = c.context_id
        where c.iri not like 'ctx:measure/%')
    order by d.document_id
    for share of d;
    if not exists (select 1 from donto.retraction as r where r.by_hand) then
        return null;
    end if;
    for v_rev in
        select distinct n.derived_from_revision from new_rows as n
        where n.char_start is not null and n.derived_from_revision is not null
              and n.document_id in (  -- once for all rows (a hashed semi-join), not per row
                  select o.document_id from donto.retraction as r
                  inner join donto.statement as o on r.statement_id = o.statement_id
                  where r.by_hand and o.predicate = 'mem:episodic/chunk')
    loop
        perform donto._forget_in(
            v_rev,
            array(select n.statement_id from new_rows as n
                  where n.derived_from_revision = v_rev and n.char_start is not null));
    end loop;
    return null;
end;
$$;

comment on function donto._forget_new_statements() is
'Trigger: a statement filed over forgotten words (a recall chunk retracted by hand) is '
'retracted at once, carried over from that chunk.';

create or replace trigger forget_new_statements after insert on donto.statement
referencing new table as new_rows
for each statement execute function donto._forget_new_statements();

create or replace function donto._carry_retractions(p_context_id bigint, p_revision_id bigint)
returns integer
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
A conversation grew, or changed: revision P_REVISION_ID was projected into context
P_CONTEXT_ID, as new statements where its text is new (the re-cut last window, the
standing statements of the longer text; every statement of a changed text). Each of them
that overlaps, with the same predicate, what was retracted by hand (donto.retract) in
another revision of the context (donto._forgotten_spans: the same place in a text it
extends, where the text stands now in one that changed) is retracted too, "carried over
from statement N: <reason>": what someone asked to forget stays forgotten, the new window
that holds it included, and an edit elsewhere in the conversation does not bring it back.
Returns the count. Called by donto.project_recall and donto.project_standing (as the
owner).
*/
    with gone as (
        select f.statement_id, f.predicate, f.char_start, f.char_end, f.reason, f.login_role
        from donto._forgotten_spans(p_context_id, p_revision_id) as f
        where f.char_start is not null
    ),
    carried as (
        insert into donto.retraction (statement_id, reason, by_hand, login_role)
        select distinct on (s.statement_id)
            s.statement_id,
            pg_catalog.format('carried over from statement %s: %s', g.statement_id, g.reason),
            true,
            g.login_role  -- who asked for it, not who grew the conversation
        from gone as g
        inner join donto.statement as s
            on s.derived_from_revision = p_revision_id and s.context_id = p_context_id
               and s.predicate = g.predicate
               and s.char_start < g.char_end and g.char_start < s.char_end
        where not exists (select 1 from donto.retraction as r2
                          where r2.statement_id = s.statement_id)
        order by s.statement_id, g.statement_id
        on conflict do nothing
        returning 1
    )
    select pg_catalog.count(*)::integer from carried;
$$;

comment on function donto._carry_retractions(bigint, bigint) is
'Retract the statements of a grown or changed revision in a context that overlap what was '
'retracted by hand in another revision of it (what was asked to be forgotten stays '
'forgotten).';

create or replace function donto._reconcile_claims(p_response_id bigint)
returns integer
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The claims of response P_RESPONSE_ID were stored for a block of a revision of a
conversation that has others (it grew: its last session was cut again; or it changed).
In the block's claims context:
- what was asked to be forgotten stays forgotten: each new claim that is the same claim
  as one retracted by hand (donto.retract) in another revision (donto._forgotten_spans)
  is retracted too, "carried over from statement N: <reason>", by hand, in the name of
  whoever asked. The same claim: of the same run and predicate, with evidence that
  overlaps where the retracted claim's text stands in this revision; or with the same
  subject, predicate and object. (A retraction says "this claim is wrong" as often as
  "forget this text": another run's claim, or another predicate, on the same quote is
  not it.)
- the run's claims of a block that was cut again are replaced: each claim of the same run
  from a block of an earlier revision of the lineage that overlaps this block and was not
  copied into this block's projection (the same span: then it stands for both) is
  retracted, "superseded: block N was cut again as block M ...". So a grown conversation
  holds each claim once, and the claims of the old last session stay until the run has
  extracted the blocks that replace them.
- and the other way round: when the run has already extracted a later revision's block
  that was cut again from this one (a worker that finished late, or `extract` of an
  earlier revision after a later one), the new claims are retracted at once, "superseded:
  block N was cut again as block M of revision R, extracted before it".
Returns how many were retracted. Called by donto.ingest_extraction (as the owner).
*/
    with b as (
        select
            nb.block_id, nb.revision_id, nb.projection_id, nb.char_start, nb.char_end,
            x.run_id, p.context_id,
            array(select l.rev from donto.revision_lineage(nb.revision_id) as l (rev)
                  where l.rev < nb.revision_id) as earlier,  -- the revisions it extends
            array(select l.rev from donto.revision_lineage(nb.revision_id) as l (rev)
                  where l.rev > nb.revision_id) as later  -- those that extend it
        from donto.extraction_response as x
        inner join donto.extraction_block as nb on x.block_id = nb.block_id
        inner join donto.projection as p on nb.projection_id = p.projection_id
        where x.response_id = p_response_id
    ),
    late as materialized (  -- a later revision's block of this run that replaced it
        select lb.block_id, lb.revision_id
        from b
        inner join donto.extraction_block as lb
            on lb.revision_id = any(b.later)
               and lb.char_start < b.char_end and b.char_start < lb.char_end
               and (lb.char_start, lb.char_end) <> (b.char_start, b.char_end)
        where exists (select 1 from donto.extraction_response as lx
                      where lx.block_id = lb.block_id and lx.run_id = b.run_id)
        order by lb.revision_id, lb.block_id
        limit 1
    ),
    fresh as materialized (  -- this response's claims that are current facts
        select s.statement_id, s.subject, s.predicate, s.object_lit, s.char_start, s.char_end
        from donto.x_claim as xc
        inner join donto.statement as s on xc.statement_id = s.statement_id
        where xc.response_id = p_response_id
              and not exists (select 1 from donto.retraction as r
                              where r.statement_id = s.statement_id)
    ),
    stale as (
        insert into donto.retraction (statement_id, reason)
        select
            n.statement_id,
            pg_catalog.format('superseded: block %s was cut again as block %s of revision '
                              '%s, extracted before it', b.block_id, l.block_id, l.revision_id)
        from fresh as n
        cross join b
        cross join late as l
        order by n.statement_id
        on conflict do nothing
        returning 1
    ),
    forgotten as materialized (
        select f.*, fx.run_id
        from b
        cross join lateral donto._forgotten_spans(b.context_id, b.revision_id) as f
        left join donto.x_claim as fx on f.statement_id = fx.statement_id
    ),
    carried as (
        insert into donto.retraction (statement_id, reason, by_hand, login_role)
        select distinct on (n.statement_id)
            n.statement_id,
            pg_catalog.format('carried over from statement %s: %s', f.statement_id, f.reason),
            true,
            f.login_role
        from fresh as n
        cross join b
        inner join forgotten as f
            on (n.predicate = f.predicate and f.run_id = b.run_id
                and n.char_start < f.char_end and f.char_start < n.char_end)
               or (n.subject, n.predicate, n.object_lit)
               = (f.subject, f.predicate, f.object_lit)
        where not exists (select 1 from late)  -- retracted as stale already
        order by n.statement_id, f.statement_id
        on conflict do nothing
        returning 1
    ),
    replaced as (
        insert into donto.retraction (statement_id, reason)
        select
            oc.statement_id,
            pg_catalog.format('superseded: block %s was cut again as block %s (the '
                              'conversation grew to revision %s) and extracted anew',
                              ob.block_id, b.block_id, b.revision_id)
        from b
        inner join donto.extraction_block as ob
            on ob.revision_id = any(b.earlier)
               and ob.char_start < b.char_end and b.char_start < ob.char_end
        inner join donto.x_claim as oc on ob.block_id = oc.block_id and oc.run_id = b.run_id
        where not exists (select 1 from donto.extraction_block as kept
                          where kept.projection_id = b.projection_id
                                and (kept.char_start, kept.char_end)
                                = (ob.char_start, ob.char_end))
              and not exists (select 1 from donto.retraction as r
                              where r.statement_id = oc.statement_id)
        order by oc.statement_id
        on conflict do nothing
        returning 1
    )
    select ((select pg_catalog.count(*) from stale)
            + (select pg_catalog.count(*) from carried)
            + (select pg_catalog.count(*) from replaced))::integer;
$$;

comment on function donto._reconcile_claims(bigint) is
'After claims were stored for a block of a conversation that grew or changed: carry '
'retractions by hand to the same claims, retract the run''s claims of the blocks that were '
'cut again as this one, or the new claims when a later cut was extracted first; returns '
'the count.';

create or replace function donto._retract_superseded(p_context_id bigint, p_revision_id bigint)
returns integer
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
A changed conversation: a revision of P_REVISION_ID's document was projected into
context P_CONTEXT_ID (recall or standing; a context belongs to one document). The
latest revision projected into the context answers (the highest id among
P_REVISION_ID and the revisions of its projections, those they grew to included; a
revision registered
but never projected counts for nothing, so whoever projects a changed text is the
session that retracts the old one): retract every statement still current in the
context that comes from a revision outside the latest one's lineage
(donto.revision_lineage: the revisions it extends), with the reason, and record the
context's projections of those revisions in donto.projection_superseded (recall then
reads neither their keys nor their lexical rows). So projecting the latest
supersedes the older texts, and projecting an older one again (another window, say)
adds nothing current. as_of before now still finds them. Returns how many were
retracted. Called by donto.project_recall and donto.project_standing (as the
owner); a writer cannot insert into donto.retraction.
*/
    -- the latest revision and its lineage, computed once (not once per statement)
    with projected as (
        select p_revision_id as revision_id
        union all
        select p.revision_id from donto.projection as p where p.context_id = p_context_id
        union all
        select pe.revision_id from donto.projection_extension as pe
        inner join donto.projection as p on pe.projection_id = p.projection_id
        where p.context_id = p_context_id
    ),
    latest as (
        select
            pg_catalog.max(x.revision_id) as rev,
            array(select donto.revision_lineage(pg_catalog.max(x.revision_id))) as keep
        from projected as x
    ),
    -- (a data-modifying sub-statement runs whether or not it is read)
    retired as (
        insert into donto.projection_superseded (projection_id, latest_revision_id)
        select p.projection_id, l.rev
        from donto.projection as p
        cross join latest as l
        where p.context_id = p_context_id and p.revision_id <> all (l.keep)
        order by p.projection_id
        on conflict do nothing
    ),
    gone as (
        insert into donto.retraction (statement_id, reason)
        select
            s.statement_id,
            pg_catalog.format('superseded: the conversation changed (revision %s, the latest, '
                              'does not extend revision %s)', l.rev, s.derived_from_revision)
        from donto.statement as s
        cross join latest as l
        where s.context_id = p_context_id
              and s.derived_from_revision <> all (l.keep)
              and not exists (select 1 from donto.retraction as r
                              where r.statement_id = s.statement_id)
        order by s.statement_id
        on conflict do nothing
        returning 1
    )
    select pg_catalog.count(*)::integer from gone;
$$;

comment on function donto._retract_superseded(bigint, bigint) is
'Retract the statements of a context that come from revisions outside the lineage of the '
'latest revision projected into it (a changed conversation), and record their projections in '
'donto.projection_superseded; returns the count.';
