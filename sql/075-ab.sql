-- The A/B gate of chunking strategies (donto-pg ab: donto_pg/ab.py on the client,
-- donto_pg/server/ab.py in PL/Python). Session summaries are sql/076-summaries.sql.
--
-- An arm re-chunks ONLY a holdout into contexts of its own, ctx:measure/<arm>/<doc>:
-- its units are extraction blocks of a projection whose strategy starts with 'ab/'
-- (so the live extractor, whose pending blocks are strategy 'turn-coherent-v1',
-- never sees them) and mem:measure/unit statements as their recall keys (so
-- donto.recall, which reads mem:episodic/chunk, never returns them). Projection A and
-- the live claims contexts are never written. Everything is append-only (I3).

create or replace function donto.measure_context_iri(p_arm text, p_document_iri text)
returns text
language sql
immutable
security invoker
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* ctx:measure/<arm>/<scheme>/<rest> for an arm and a document IRI <scheme>:<rest>. */
    select 'ctx:measure/' || p_arm || '/' || pg_catalog.regexp_replace(p_document_iri, ':', '/');
$$;

comment on function donto.measure_context_iri(text, text) is
'The context of an A/B arm''s units for a document: (semantic, beam:100K/1) -> '
'ctx:measure/semantic/beam/100K/1. Immutable, security invoker.';

-- -- arms and their units -------------------------------------------------------------

create or replace function donto._login_tag(p_login text)
returns text
language sql
immutable
strict
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* P_LOGIN with every character but a-z, 0-9 and _ percent-encoded (its UTF-8 bytes). */
    select pg_catalog.string_agg(
        case when c.c ~ '^[a-z0-9_]$' then c.c
            else pg_catalog.regexp_replace(
                pg_catalog.upper(pg_catalog.encode(pg_catalog.convert_to(c.c, 'UTF8'), 'hex')),
                '(..)', '%\1', 'g')
        end, '' order by c.n)
    from pg_catalog.regexp_split_to_table(p_login, '') with ordinality as c (c, n);
$$;

comment on function donto._login_tag(text) is
'A login as it follows @ in a writer''s A/B arm names: a-z, 0-9 and _ as they are, every '
'other character percent-encoded (alice -> alice, Bob -> %42ob). Immutable.';

create or replace function donto._arm_key(p_name text)
returns text
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
The stored name of this session's A/B arm P_NAME: unchanged for the schema owner's
session, else P_NAME@<login> (donto._login_tag of session_user). A writer's arms are
its own: registering fixed1200 makes fixed1200@alice, never the owner's fixed1200.
*/
    select case when donto._session_owns_schema() then p_name
                else p_name || '@' || donto._login_tag(session_user) end;
$$;

comment on function donto._arm_key(text) is
'The stored name of this login''s A/B arm: the name for the owner''s session, name@login '
'for any other (donto._login_tag). Stable.';

create or replace function donto._arm_is_mine(p_stored_name text)
returns boolean
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* Whether the arm stored as P_STORED_NAME is this session's to write to: it is what
   donto._arm_key makes of its name (the part before @; names and login tags have none):
   for the owner's session an arm without @, for any other its own name@login. Never
   null. */
    select coalesce(
        p_stored_name = donto._arm_key(pg_catalog.split_part(p_stored_name, '@', 1)), false);
$$;

comment on function donto._arm_is_mine(text) is
'Whether a stored A/B arm name is this session''s to write to (the owner''s: no @; a '
'writer''s: name@its login). Stable.';

create or replace function donto._arm_named(p_name text)
returns bigint
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* The id of the arm a caller names to read it: its own (donto._arm_key), else the arm
stored under exactly that name (the owner's fixed1200, a writer's fixed1200@alice); null
when there is none. */
    select coalesce(
        (select a.arm_id from donto.ab_arm as a where a.name = donto._arm_key(p_name)),
        (select a.arm_id from donto.ab_arm as a where a.name = p_name));
$$;

comment on function donto._arm_named(text) is
'The id of the A/B arm a caller names to read it: its own first, else the arm of exactly '
'that name; null if none. Stable.';

create or replace function donto._arm(p_name text, p_function text, p_write boolean)
returns donto.ab_arm
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The A/B arm a caller names P_NAME: this login's own (donto._arm_key), else, to read
(P_WRITE false), the arm stored under exactly that name (the owner's fixed1200, or a
writer's fixed1200@alice). To write (project units, copy vectors, record a result) the
arm must be this login's own: for a writer its name@login (so by construction), for the
owner's session an arm without @ (whichever owner login registered it, and whatever the
owner is called after a restore); 22023 when there is none, 42501 when it is another
login's.
*/
declare
    v_arm donto.ab_arm;
begin
    select a.* into v_arm from donto.ab_arm as a
    where a.arm_id = case when p_write
                          then (select b.arm_id from donto.ab_arm as b
                                where b.name = donto._arm_key(p_name))
                          else donto._arm_named(p_name) end;
    if v_arm.arm_id is null and p_write
       and exists (select 1 from donto.ab_arm as a where a.name = p_name) then
        raise exception '%: arm % is not this login''s (its own would be %)', p_function,
            p_name, donto._arm_key(p_name)
            using errcode = '42501', hint = 'Register an arm of your own with '
                                            'donto.ab_register_arm; it may use the same name.';
    end if;
    if v_arm.arm_id is null then
        raise exception '%: no arm % (donto.ab_register_arm)', p_function, p_name
            using errcode = '22023';
    end if;
    if p_write and not donto._arm_is_mine(v_arm.name) then
        raise exception '%: arm % is %''s, not %''s', p_function, v_arm.name,
            coalesce(v_arm.login_role, 'the owner'), session_user using errcode = '42501';
    end if;
    return v_arm;
end;
$$;

comment on function donto._arm(text, text, boolean) is
'The A/B arm a caller names: its own first, else (to read) the arm of exactly that name; '
'writing needs the caller''s own arm (42501). Stable, security invoker.';

create or replace function donto.ab_register_arm(
    p_name text, p_strategy text, p_params jsonb default '{}', p_spec text default null
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register the A/B arm P_NAME: strategy 'fixed' (fixed line-respecting windows used as
extraction units; params {window}, default 1,200) or 'semantic' (the segmenter of
donto.project_extraction; params as there, defaults filled in). Idempotent: the same
name with the same effective parameters returns the existing arm; a name already used
for other parameters is refused (its contexts would mix two cuts). The name is this
login's (donto._arm_key): a writer's fixed1200 is stored as fixed1200@<login>.
*/
declare
    v_name text;
    v_params jsonb;
    v_id bigint;
    v_have record;
    v_bad text;
begin
    -- An arm is its login's: checked and bound first (the owner's login too, 029).
    perform donto._session_login();
    if p_name is null or p_name !~ '^[a-z0-9][a-z0-9_.-]*$' or p_name in ('chunkqual', 'summary')
    then
        raise exception 'donto.ab_register_arm: bad arm name % (lower-case letters, digits, '
            '_ . -; not chunkqual or summary)', coalesce(p_name, 'null') using errcode = '22023';
    end if;
    if p_strategy = 'semantic' then
        v_params := donto._extraction_params(coalesce(p_params, '{}'));
    elsif p_strategy = 'fixed' then
        select pg_catalog.string_agg(k.key, ', ') into v_bad
        from pg_catalog.jsonb_object_keys(coalesce(p_params, '{}')) as k (key)
        where k.key <> 'window';
        if v_bad is not null then
            raise exception 'donto.ab_register_arm: unknown fixed params % (known: window)', v_bad
                using errcode = '22023';
        end if;
        v_params := pg_catalog.jsonb_build_object(
            'window', coalesce(p_params -> 'window', '1200'::jsonb));
        if pg_catalog.jsonb_typeof(v_params -> 'window') <> 'number'
           or (v_params ->> 'window')::numeric <> pg_catalog.trunc((v_params ->> 'window')::numeric)
           or (v_params ->> 'window')::numeric < 1 then
            raise exception 'donto.ab_register_arm: window must be an integer >= 1, got %',
                v_params -> 'window' using errcode = '22023';
        end if;
    else
        raise exception 'donto.ab_register_arm: strategy must be fixed or semantic, not %',
            coalesce(p_strategy, 'null') using errcode = '22023';
    end if;
    v_name := donto._arm_key(p_name);
    perform donto._lock('ab-arm', pg_catalog.hashtextextended(v_name, 0));
    select a.arm_id, a.strategy, a.params into v_have from donto.ab_arm as a where a.name = v_name;
    if found then
        if v_have.strategy <> p_strategy or v_have.params <> v_params then
            raise exception 'donto.ab_register_arm: arm % already means %:%, not %:%', v_name,
                v_have.strategy, v_have.params, p_strategy, v_params
                using errcode = '23505', hint = 'Give the new arm another name.';
        end if;
        return v_have.arm_id;
    end if;
    insert into donto.ab_arm (name, strategy, params, spec)
    values (v_name, p_strategy, v_params,
            coalesce(p_spec, p_name || '=' || p_strategy || ':' || v_params::text))
    returning arm_id into v_id;
    return v_id;
end;
$$;

comment on function donto.ab_register_arm(text, text, jsonb, text) is
'Register an A/B arm (name, strategy fixed|semantic, effective params); idempotent; a name '
'is bound to one strategy and parameters. Volatile, security definer.';

create or replace function donto._ab_fixed_blocks(rev_id bigint, window_chars integer)
returns setof donto.extraction_block_row
language plpython3u
stable
security invoker
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].ab.fixed_blocks_sql(plpy, rev_id, window_chars)
$py$;

comment on function donto._ab_fixed_blocks(bigint, integer) is
'Fixed line-respecting windows of a revision (the spans of projection A) as extraction '
'units: message content parts as metadata, kind by code fences, no inert prefix; windows '
'holding no message content are left out (donto_pg.server.ab.fixed_block_rows). Stable, invoker.';

create or replace function donto.ab_project_arm(p_arm text, p_revision_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Cut revision P_REVISION_ID with arm P_ARM into its own context
ctx:measure/<arm>/<document>: a projection of kind 'extraction' and strategy
'ab/fixed-window' or 'ab/turn-coherent-v1' (params {arm, ...}), its extraction
blocks, and one mem:measure/unit statement per block (the unit as a recall key,
with donto.ab_unit). Returns the number of units. Idempotent per (arm, revision);
projection A, the claims contexts and the live projection B are never touched.
*/
declare
    v_arm donto.ab_arm;
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_proj bigint;
    v_strategy text;
    v_params jsonb;
    v_n integer;
begin
    v_arm := donto._arm(p_arm, 'donto.ab_project_arm', true);
    select r.document_id, d.iri into v_doc, v_iri
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.revision_id = p_revision_id;
    if not found then
        raise exception 'donto.ab_project_arm: no revision %', p_revision_id
            using errcode = '22023';
    end if;
    v_strategy := case v_arm.strategy when 'fixed' then 'ab/fixed-window'
                                      else 'ab/turn-coherent-v1' end;
    v_params := pg_catalog.jsonb_build_object('arm', v_arm.name) || v_arm.params;
    v_ctx := donto._claim_context(donto.measure_context_iri(v_arm.name, v_iri), 'measure',
                                  v_doc, 'donto.ab_project_arm');
    -- Per arm context: arms of other writers on the same revision do not wait on this one.
    perform donto._lock('ab-project', v_ctx);

    select p.projection_id into v_proj from donto.projection as p
    where p.revision_id = p_revision_id and p.kind = 'extraction' and p.strategy = v_strategy
          and p.params = v_params and p.context_id = v_ctx;
    if found then
        select pg_catalog.count(*)::integer into v_n
        from donto.ab_unit as u inner join donto.extraction_block as b using (block_id)
        where b.projection_id = v_proj;
        return v_n;
    end if;

    insert into donto.projection (revision_id, kind, strategy, params, context_id)
    values (p_revision_id, 'extraction', v_strategy, v_params, v_ctx)
    returning projection_id into v_proj;

    -- Straight from the block functions into the tables, no temp table (a definer touches
    -- nothing a caller can create or shadow).
    if v_arm.strategy = 'fixed' then
        insert into donto.extraction_block (
            projection_id, revision_id, seq, kind, char_start, char_end, turns,
            prefix_start, prefix_end, prefix_turn_seq, split, valid_time
        )
        select
            v_proj, p_revision_id, b.seq, b.kind, b.char_start, b.char_end, b.turns,
            b.prefix_start, b.prefix_end, b.prefix_turn_seq, b.split,
            case when b.min_date is null then '(,)'::daterange
                 else pg_catalog.daterange(b.min_date, b.max_date, '[]') end
        from donto._ab_fixed_blocks(p_revision_id, (v_arm.params ->> 'window')::integer) as b
        order by b.seq;
    else
        insert into donto.extraction_block (
            projection_id, revision_id, seq, kind, char_start, char_end, turns,
            prefix_start, prefix_end, prefix_turn_seq, split, valid_time
        )
        select
            v_proj, p_revision_id, b.seq, b.kind, b.char_start, b.char_end, b.turns,
            b.prefix_start, b.prefix_end, b.prefix_turn_seq, b.split,
            case when b.min_date is null then '(,)'::daterange
                 else pg_catalog.daterange(b.min_date, b.max_date, '[]') end
        from donto._extraction_blocks(p_revision_id, v_arm.params) as b
        order by b.seq;
    end if;

    with u as materialized (
        select
            b.block_id, b.seq, b.kind, b.char_start, b.char_end, b.valid_time,
            donto.span_text(p_revision_id, b.char_start, b.char_end) as unit_text,
            pg_catalog.nextval(
                pg_catalog.pg_get_serial_sequence('donto.statement', 'statement_id')) as sid
        from donto.extraction_block as b
        where b.projection_id = v_proj
    ),

    s as (
        insert into donto.statement (
            statement_id, subject, predicate, object_lit, context_id, valid_time, document_id,
            derived_from_revision, char_start, char_end
        ) overriding system value
        select
            u.sid, 'block:' || u.block_id, 'mem:measure/unit',
            pg_catalog.jsonb_build_object('arm', v_arm.name, 'block_id', u.block_id,
                                          'seq', u.seq, 'kind', u.kind),
            v_ctx, u.valid_time, v_doc, p_revision_id, u.char_start, u.char_end
        from u
        order by u.seq
    )

    insert into donto.ab_unit (
        statement_id, arm_id, block_id, revision_id, char_start, char_end, tsv
    )
    select u.sid, v_arm.arm_id, u.block_id, p_revision_id, u.char_start, u.char_end,
           pg_catalog.to_tsvector('pg_catalog.english', u.unit_text)
    from u
    order by u.seq;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ab_project_arm(text, bigint) is
'Re-chunk one revision with an A/B arm into ctx:measure/<arm>/<doc>: extraction blocks '
'(strategy ab/...) and their mem:measure/unit recall keys; idempotent; returns the unit '
'count. Never touches projection A or the claims contexts. Volatile, security definer.';

create or replace function donto.ab_pending_blocks(
    p_arm text, p_run_id bigint, p_revision_ids bigint[]
)
returns table (block_id bigint, revision_id bigint, seq integer, kind text)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* The arm's blocks of P_REVISION_IDS with no ingested response for run P_RUN_ID. */
    select b.block_id, b.revision_id, b.seq, b.kind
    from donto.ab_arm as a
    inner join donto.ab_unit as u on a.arm_id = u.arm_id
    inner join donto.extraction_block as b on u.block_id = b.block_id
    where a.arm_id = (select (donto._arm(p_arm, 'donto.ab_pending_blocks', false)).arm_id)
          and u.revision_id = any(p_revision_ids)
          and not exists (
              select 1 from donto.extraction_response as x
              where x.block_id = b.block_id and x.run_id = p_run_id
          )
    order by b.revision_id, b.seq;
$$;

comment on function donto.ab_pending_blocks(text, bigint, bigint[]) is
'Blocks of an A/B arm still to extract in a run (no ingested response yet), in body order. '
'Stable, security invoker.';

create or replace function donto.ab_arm_quality(
    p_arm text, p_run_id bigint, p_revision_ids bigint[]
)
returns jsonb
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Metrics 1-4 of an arm's extraction run over the units of P_REVISION_IDS ingested so
far: facts per chunk (mean), median anchor rate (over dialogue blocks that returned
facts, as the extractor's alarm), hypothesis rate (hypotheses / facts), injection rate
(injected / extracted blocks); with the zero-fact rate, pooled and all-block anchor
rates, counts by fate and by kind.
*/
    with u as (
        select u.block_id
        from donto.ab_unit as u inner join donto.ab_arm as a using (arm_id)
        where a.arm_id = (select (donto._arm(p_arm, 'donto.ab_arm_quality', false)).arm_id)
              and u.revision_id = any(p_revision_ids)
    ),

    q as (
        select
            q.kind,
            q.fate,
            q.injection,
            q.facts_per_chunk as facts,
            q.anchor_rate,
            (x.summary ->> 'anchored')::integer as anchored,
            (x.summary ->> 'hypotheses')::integer as hypotheses
        from donto.chunk_quality as q
        inner join u on q.block_id = u.block_id
        inner join donto.extraction_response as x on q.response_id = x.response_id
        where q.run_id = p_run_id
    )

    select pg_catalog.jsonb_build_object(
        'units', (select pg_catalog.count(*) from u),
        'blocks', pg_catalog.count(*),
        'facts', coalesce(pg_catalog.sum(q.facts), 0),
        'facts_per_chunk', pg_catalog.round(pg_catalog.avg(q.facts), 4),
        'zero_fact_rate', case when pg_catalog.count(*) > 0 then pg_catalog.round(
            (pg_catalog.count(*) filter (where q.facts = 0))::numeric / pg_catalog.count(*), 4)
        end,
        'median_anchor_rate', pg_catalog.percentile_cont(0.5) within group (
            order by q.anchor_rate) filter (where q.kind = 'dialogue' and q.facts > 0),
        'dialogue_blocks_with_facts',
        pg_catalog.count(*) filter (where q.kind = 'dialogue' and q.facts > 0),
        'median_anchor_rate_all', pg_catalog.percentile_cont(0.5) within group (
            order by q.anchor_rate) filter (where q.facts > 0),
        'anchor_rate_pooled', case when pg_catalog.sum(q.facts) > 0 then pg_catalog.round(
            pg_catalog.sum(q.anchored)::numeric / pg_catalog.sum(q.facts), 4) end,
        'hypothesis_rate', case when pg_catalog.sum(q.facts) > 0 then pg_catalog.round(
            pg_catalog.sum(q.hypotheses)::numeric / pg_catalog.sum(q.facts), 4) end,
        'injection_rate', case when pg_catalog.count(*) > 0 then pg_catalog.round(
            pg_catalog.sum(q.injection)::numeric / pg_catalog.count(*), 4) end,
        'injected', coalesce(pg_catalog.sum(q.injection), 0),
        'healthy', pg_catalog.count(*) filter (where q.fate = 'healthy'),
        'degraded', pg_catalog.count(*) filter (where q.fate = 'degraded'),
        'broken', pg_catalog.count(*) filter (where q.fate = 'broken'),
        'by_kind', coalesce((
            select pg_catalog.jsonb_object_agg(k.kind, k.n)
            from (select q2.kind, pg_catalog.count(*) as n from q as q2 group by q2.kind) as k
        ), '{}'::jsonb)
    )
    from q;
$$;

comment on function donto.ab_arm_quality(text, bigint, bigint[]) is
'Metrics 1-4 of an A/B arm''s run over a holdout (facts per chunk, median dialogue anchor '
'rate, hypothesis rate, injection rate) with zero-fact rate and counts. Stable, invoker.';

-- -- recall keys: vectors and search ----------------------------------------------------

create or replace function donto.ingest_measure_embeddings(p_model_id integer)
returns integer
language plpgsql
volatile
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Move vectors staged by the caller (its own temp table _donto_embedding_stage(statement_id,
embedding)) into donto.embedding for one model, for A/B units and session summaries
only (recall chunks go through donto.ingest_embeddings). Existing vectors are kept;
a wrong dimension or another kind of statement is refused. Returns the rows added.
SECURITY INVOKER, like donto.ingest_embeddings: the caller's temp table is read with
the caller's rights.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    select m.dimension into v_dim from donto.embedding_model as m where m.model_id = p_model_id;
    if not found then
        raise exception 'donto.ingest_measure_embeddings: no model %', p_model_id
            using errcode = '22023';
    end if;
    select st.statement_id into v_bad
    from pg_temp._donto_embedding_stage as st
    where vector_dims(st.embedding) <> v_dim
          or not (exists (select 1 from donto.ab_unit as u where u.statement_id = st.statement_id)
                  or exists (select 1 from donto.x_session_summary as s
                             where s.statement_id = st.statement_id))
    limit 1;
    if v_bad is not null then
        raise exception 'donto.ingest_measure_embeddings: statement % is not an A/B unit or a '
            'session summary, or its vector does not have % dimensions', v_bad, v_dim
            using errcode = '22023';
    end if;
    insert into donto.embedding (statement_id, model_id, embedding)
    select st.statement_id, p_model_id, st.embedding
    from pg_temp._donto_embedding_stage as st
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_measure_embeddings(integer) is
'Move the caller''s staged vectors of A/B units and session summaries into donto.embedding '
'(skips existing). Volatile, security invoker.';

create or replace function donto.ab_reuse_embeddings(
    p_arm text, p_model_id integer, p_revision_ids bigint[]
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Give the arm's units of P_REVISION_IDS that have no vector for the model the vector of
another recall key with the same text: a recall chunk (projection A) or a unit of
another arm with the same revision and span (same text, same vector). Returns the
vectors copied; the rest must be embedded. Only the arm's login (or the owner) copies
into its units, and only vectors this login or the owner filed are copied (never a
writer's into the owner's units; a vector from before 027, which names no filer, counts
as filed by whoever filed its statement). The copies are not cached
(donto._embedding_cache_fill): a copied vector may be one a writer filed for its chunk,
which the owner's session must not vouch for.
*/
declare
    v_arm bigint := (donto._arm(p_arm, 'donto.ab_reuse_embeddings', true)).arm_id;
    v_n integer;
    -- the owner's logins, asked once (donto._owners_login per row reads the binding)
    v_owners text[] := array(
        select r.rolname::text from pg_catalog.pg_roles as r
        where donto._owners_login(r.rolname::text)
    );
begin
    perform pg_catalog.set_config('donto.embedding_copy', 'on', true);
    insert into donto.embedding (statement_id, model_id, embedding)
    select distinct on (u.statement_id) u.statement_id, p_model_id, e.embedding
    from donto.ab_unit as u
    inner join donto.ab_arm as a on u.arm_id = a.arm_id
    inner join donto.statement as o
        on u.revision_id = o.derived_from_revision and u.char_start = o.char_start
           and u.char_end = o.char_end and u.statement_id <> o.statement_id
           and o.predicate in ('mem:episodic/chunk', 'mem:measure/unit')
    inner join donto.embedding as e on o.statement_id = e.statement_id and e.model_id = p_model_id
    where a.arm_id = v_arm
          and (coalesce(e.login_role, o.login_role) is null
               or coalesce(e.login_role, o.login_role) = session_user
               or coalesce(e.login_role, o.login_role) = any(v_owners))
          and u.revision_id = any(p_revision_ids)
          and not exists (select 1 from donto.embedding as h
                          where h.statement_id = u.statement_id and h.model_id = p_model_id)
    order by u.statement_id, o.statement_id
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    perform pg_catalog.set_config('donto.embedding_copy', 'off', true);
    return v_n;
end;
$$;

comment on function donto.ab_reuse_embeddings(text, integer, bigint[]) is
'Copy to an arm''s units the vector of a recall chunk or another arm''s unit with the same '
'revision span (same text); returns the count. Volatile, security definer.';

create or replace function donto.ab_recall_units(
    arm text,
    embedding vector,
    query text default null,
    k integer default 10,
    revision bigint default null,
    model text default null,
    arms text default 'hybrid',
    pool integer default null
)
returns table (
    statement_id bigint, revision_id bigint, char_start integer, char_end integer,
    score double precision, vector_rank integer, lexical_rank integer
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, public, pg_temp
as $$
/*
Top-K units of an A/B arm for a query vector (and its text), by the gate's own fixed
ranking, the same for every arm and for the baseline (arm projection-a: projection
A's spans), so that only the chunking differs: exact cosine order, full-text rank
(ts_rank_cd over the unit's text), reciprocal rank fusion (k = 60) for 'hybrid', ties
to the later valid time. REVISION limits to one revision (the question's conversation).
*/
#variable_conflict use_column
declare
    v_arm bigint;
    v_model integer;
    v_pool integer := coalesce(pool, greatest(k * 5, 50));
begin
    perform donto._check_query(query, 'donto.ab_recall_units', true);
    if k is null or k < 1 then
        raise exception 'donto.ab_recall_units: k must be >= 1' using errcode = '22023';
    end if;
    if arms not in ('vector', 'lexical', 'hybrid') then
        raise exception 'donto.ab_recall_units: arms must be vector, lexical or hybrid, not %',
            arms using errcode = '22023';
    end if;
    v_arm := (donto._arm(arm, 'donto.ab_recall_units', false)).arm_id;
    if arms <> 'lexical' then
        v_model := donto.embedding_model_id(model);
        if embedding is null then
            raise exception 'donto.ab_recall_units: the vector arm needs a vector'
                using errcode = '22023';
        end if;
    end if;
    return query
    with tq as (
        select pg_catalog.string_agg(pg_catalog.quote_literal(l.l), ' | ')::tsquery as q
        from pg_catalog.unnest(pg_catalog.tsvector_to_array(
            pg_catalog.to_tsvector('pg_catalog.english', coalesce(query, '')))) as l (l)
        where arms <> 'vector'
    ),

    vec as (
        select c.statement_id, pg_catalog.row_number() over (order by c.d) as r
        from (
            select u.statement_id, e.embedding <=> ab_recall_units.embedding as d
            from donto.ab_unit as u
            inner join donto.embedding as e
                on u.statement_id = e.statement_id and e.model_id = v_model
            where u.arm_id = v_arm
                  and (revision is null or u.revision_id = revision)
                  and arms <> 'lexical'
            order by d
            limit v_pool
        ) as c
    ),

    lex as (
        select c.statement_id,
               pg_catalog.row_number() over (order by c.rank desc, c.statement_id) as r
        from (
            select u.statement_id, pg_catalog.ts_rank_cd(u.tsv, tq.q, 1) as rank
            from donto.ab_unit as u cross join tq
            where tq.q is not null and u.tsv @@ tq.q and u.arm_id = v_arm
                  and (revision is null or u.revision_id = revision)
            order by rank desc, u.statement_id
            limit v_pool
        ) as c
    )

    select
        s.statement_id, s.derived_from_revision, s.char_start, s.char_end,
        f.score, f.vr::integer, f.lr::integer
    from (
        select
            coalesce(v.statement_id, l.statement_id) as statement_id,
            (coalesce(1.0 / (60 + v.r), 0) + coalesce(1.0 / (60 + l.r), 0))::float8 as score,
            v.r as vr,
            l.r as lr
        from vec as v full outer join lex as l using (statement_id)
    ) as f
    inner join donto.statement as s on f.statement_id = s.statement_id
    order by pg_catalog.round(f.score::numeric, 6) desc,
             pg_catalog.upper(s.valid_time) desc nulls last,
             s.statement_id desc
    limit k;
end;
$$;

comment on function donto.ab_recall_units(text, vector, text, integer, bigint, text, text, integer)
is
'Recall over an A/B arm''s units (never over live memory): exact vector + full-text ranks, '
'reciprocal rank fusion; arms and the fixed-1,200 baseline are measured with it. Stable, '
'security invoker.';

-- -- gates, results, verdicts ------------------------------------------------------------

create or replace function donto.ab_record_gate(
    p_gate_key text, p_revisions bigint[], p_holdout jsonb, p_k integer, p_model_id integer,
    p_recall_arm text, p_questions integer
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record an A/B holdout (gate); an existing gate_key returns its id. The key is this
login's (donto._scoped_key): a writer's gate is never the owner's, and only sessions of
the gate's login record its baseline and results (donto._check_adds_to).
*/
declare
    v_key text := donto._scoped_key(p_gate_key);
    v_id bigint;
begin
    -- A gate is its login's: checked and bound first (the owner's login too, 029).
    perform donto._session_login();
    insert into donto.ab_gate (gate_key, revisions, holdout, k, model_id, recall_arm, questions)
    values (v_key, p_revisions, p_holdout, p_k, p_model_id, p_recall_arm, p_questions)
    on conflict (gate_key) do nothing
    returning gate_id into v_id;
    if v_id is null then
        select g.gate_id into strict v_id from donto.ab_gate as g where g.gate_key = v_key;
    end if;
    return v_id;
end;
$$;

comment on function donto.ab_record_gate(text, bigint[], jsonb, integer, integer, text, integer)
is
'Record an A/B gate (holdout revisions and why, k, model, recall arm, question count) once '
'per key; returns its id. Volatile, security definer.';

create or replace function donto.ab_record_baseline(p_gate_id bigint, p_measure jsonb)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Record the fixed-1,200 baseline of a gate (P_MEASURE.hit = hit@k); the first one stays. */
declare
    v_id bigint;
begin
    perform donto._check_adds_to('gate', p_gate_id, 'donto.ab_record_baseline');
    insert into donto.ab_baseline (gate_id, hit, measure)
    values (p_gate_id, (p_measure ->> 'hit')::float8, p_measure)
    on conflict (gate_id) do nothing
    returning baseline_id into v_id;
    if v_id is null then
        select b.baseline_id into strict v_id from donto.ab_baseline as b
        where b.gate_id = p_gate_id;
    end if;
    return v_id;
end;
$$;

comment on function donto.ab_record_baseline(bigint, jsonb) is
'Record a gate''s fixed-1,200 recall baseline (hit@k and its measure) once; returns its id. '
'Volatile, security definer.';

create or replace function donto.ab_record_result(
    p_result_key text, p_gate_id bigint, p_arm text, p_run_id bigint, p_stage text,
    p_units integer, p_quality jsonb, p_stop_reason text default null, p_recall jsonb default null
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record one arm's measurement on a gate; an existing result_key returns its id. The key
is this login's (donto._scoped_key, as the gate's): a writer cannot file a result under
the key the owner's donto-pg ab will look up.
*/
declare
    v_key text := donto._scoped_key(p_result_key);
    v_arm bigint;
    v_id bigint;
begin
    perform donto._check_adds_to('gate', p_gate_id, 'donto.ab_record_result');
    if p_run_id is not null then
        perform donto._check_adds_to('run', p_run_id, 'donto.ab_record_result');
    end if;
    v_arm := (donto._arm(p_arm, 'donto.ab_record_result', true)).arm_id;
    insert into donto.ab_result (
        result_key, gate_id, arm_id, run_id, stage, units, quality, stop_reason, recall
    )
    values (v_key, p_gate_id, v_arm, p_run_id, p_stage, p_units, p_quality,
            p_stop_reason, p_recall)
    on conflict (result_key) do nothing
    returning result_id into v_id;
    if v_id is null then
        select r.result_id into strict v_id from donto.ab_result as r
        where r.result_key = v_key;
    end if;
    return v_id;
end;
$$;

comment on function donto.ab_record_result(
    text, bigint, text, bigint, text, integer, jsonb, text, jsonb
) is
'Record an A/B arm''s result on a gate (metrics 1-4, stage, stop reason, recall) once per '
'key; returns its id. Volatile, security definer.';

create or replace function donto.ab_decide(
    recall_hit double precision,
    baseline_hit double precision,
    injection_rate double precision,
    median_anchor_rate double precision,
    hypothesis_rate double precision,
    zero_fact_rate double precision,
    max_injection double precision default 0.02,
    min_anchor double precision default donto.healthy_anchor_rate(),
    min_hypothesis double precision default 0.5,
    max_zero_fact double precision default 0.5
)
returns table (verdict text, reasons text[])
language plpgsql
immutable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The gate's rule. commit iff recall hit >= the fixed-1,200 baseline AND injection rate
<= MAX_INJECTION AND median anchor rate >= MIN_ANCHOR; else re-chunk when the
injection rate is above MAX_INJECTION or the zero-fact rate above MAX_ZERO_FACT (the
boundary's problem); else re-prompt when recall is fine but the anchor rate is low and
the hypothesis rate at least MIN_HYPOTHESIS (the extractor's problem); else reject.
A null recall hit means no recall pass was spent (the arm was rejected early).
*/
declare
    v_recall_ok boolean := recall_hit is not null and baseline_hit is not null
                           and recall_hit >= baseline_hit;
    v_inj_ok boolean := coalesce(injection_rate, 0) <= max_injection;
    v_anchor_ok boolean := median_anchor_rate is not null and median_anchor_rate >= min_anchor;
    v_zero_ok boolean := coalesce(zero_fact_rate, 0) <= max_zero_fact;
    v_hyp_high boolean := coalesce(hypothesis_rate, 0) >= min_hypothesis;
    v_reasons text[] := '{}';
begin
    v_reasons := v_reasons || case
        when recall_hit is null then 'no recall pass (rejected before it)'
        when baseline_hit is null then 'no fixed-1,200 baseline'
        else pg_catalog.format('recall hit %s %s baseline %s',
                               pg_catalog.round(recall_hit::numeric, 4),
                               case when v_recall_ok then '>=' else '<' end,
                               pg_catalog.round(baseline_hit::numeric, 4))
    end;
    v_reasons := v_reasons || pg_catalog.format(
        'injection rate %s %s %s', coalesce(pg_catalog.round(injection_rate::numeric, 4)::text,
                                            'n/a'),
        case when v_inj_ok then '<=' else '>' end, max_injection);
    v_reasons := v_reasons || case
        when median_anchor_rate is null then 'no median anchor rate (no dialogue block with facts)'
        else pg_catalog.format('median anchor rate %s %s %s',
                               pg_catalog.round(median_anchor_rate::numeric, 4),
                               case when v_anchor_ok then '>=' else '<' end, min_anchor)
    end;
    v_reasons := v_reasons || pg_catalog.format(
        'zero-fact rate %s %s %s', coalesce(pg_catalog.round(zero_fact_rate::numeric, 4)::text,
                                            'n/a'),
        case when v_zero_ok then '<=' else '>' end, max_zero_fact);
    v_reasons := v_reasons || pg_catalog.format(
        'hypothesis rate %s %s %s', coalesce(pg_catalog.round(hypothesis_rate::numeric, 4)::text,
                                             'n/a'),
        case when v_hyp_high then '>=' else '<' end, min_hypothesis);
    verdict := case
        when v_recall_ok and v_inj_ok and v_anchor_ok then 'commit'
        when not v_inj_ok or not v_zero_ok then 're-chunk'
        when v_recall_ok and median_anchor_rate < min_anchor and v_hyp_high then 're-prompt'
        else 'reject'
    end;
    reasons := v_reasons;
    return next;
end;
$$;

comment on function donto.ab_decide(
    double precision, double precision, double precision, double precision, double precision,
    double precision, double precision, double precision, double precision, double precision
) is
'The A/B gate rule on given metrics: commit, re-chunk (injection or zero-fact rate high), '
're-prompt (recall fine, anchors low, hypotheses high) or reject, with the reasons. '
'Immutable, security invoker.';

create or replace function donto._ab_verdict(
    p_arm_id bigint,
    gate_id bigint default null,
    max_injection double precision default 0.02,
    min_anchor double precision default donto.healthy_anchor_rate(),
    min_hypothesis double precision default 0.5,
    max_zero_fact double precision default 0.5
)
returns table (
    arm_name text, gate bigint, result_id bigint, run_id bigint, stage text,
    recall_hit double precision, baseline_hit double precision,
    injection_rate double precision, median_anchor_rate double precision,
    hypothesis_rate double precision, zero_fact_rate double precision,
    stop_reason text, verdict text, reasons text[]
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The verdict of the arm P_ARM_ID on gate GATE_ID (default: the latest gate the arm's own
login measured it on: a writer's arm, name@login, by that login; an arm without @ by an
owner login; whoever reads), from its latest result there and the gate's fixed-1,200
baseline, by donto.ab_decide with the given thresholds. An incomplete extraction is a
reject, and so is a recall pass over no gold question (nothing measured).
*/
    select
        a.name, r.gate_id, r.result_id, r.run_id, r.stage,
        (r.recall ->> 'hit')::float8,
        b.hit,
        (r.quality ->> 'injection_rate')::float8,
        (r.quality ->> 'median_anchor_rate')::float8,
        (r.quality ->> 'hypothesis_rate')::float8,
        (r.quality ->> 'zero_fact_rate')::float8,
        r.stop_reason,
        case when r.stage = 'incomplete' or (r.recall ->> 'n')::integer = 0 then 'reject'
             else d.verdict end,
        case when r.stage = 'incomplete'
                 then array['extraction incomplete: ' || r.stop_reason] || d.reasons
             -- 0 >= 0 is no evidence: a holdout without gold questions measures no recall
             when (r.recall ->> 'n')::integer = 0
                 then array['no gold question in the holdout: recall was not measured']
                      || d.reasons
             else d.reasons end
    from donto.ab_arm as a
    inner join donto.ab_result as r on a.arm_id = r.arm_id
    left join donto.ab_baseline as b on r.gate_id = b.gate_id
    cross join lateral donto.ab_decide(
        (r.recall ->> 'hit')::float8,
        b.hit,
        (r.quality ->> 'injection_rate')::float8,
        (r.quality ->> 'median_anchor_rate')::float8,
        (r.quality ->> 'hypothesis_rate')::float8,
        (r.quality ->> 'zero_fact_rate')::float8,
        $3, $4, $5, $6
    ) as d
    where a.arm_id = $1
          and r.gate_id = coalesce($2, (
              select r2.gate_id from donto.ab_result as r2
              where r2.arm_id = a.arm_id
                    and case when pg_catalog.strpos(a.name, '@') > 0
                             then r2.login_role = a.login_role
                             else donto._owners_login(r2.login_role) end
              order by r2.result_id desc limit 1))
    order by r.result_id desc
    limit 1;
$$;

comment on function donto._ab_verdict(
    bigint, bigint, double precision, double precision, double precision, double precision
) is
'donto.ab_verdict of an arm given by id (so donto.ab_report shows each row''s own arm, '
'whoever reads it). Stable, invoker.';

create or replace function donto.ab_verdict(
    arm text,
    gate_id bigint default null,
    max_injection double precision default 0.02,
    min_anchor double precision default donto.healthy_anchor_rate(),
    min_hypothesis double precision default 0.5,
    max_zero_fact double precision default 0.5
)
returns table (
    arm_name text, gate bigint, result_id bigint, run_id bigint, stage text,
    recall_hit double precision, baseline_hit double precision,
    injection_rate double precision, median_anchor_rate double precision,
    hypothesis_rate double precision, zero_fact_rate double precision,
    stop_reason text, verdict text, reasons text[]
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The verdict of arm ARM (this login's own, else the arm of exactly that name:
donto._arm_named) on gate GATE_ID (default: the latest gate the arm's own login measured
it on), by donto._ab_verdict with the given thresholds.
*/
    select * from donto._ab_verdict(donto._arm_named($1), $2, $3, $4, $5, $6);
$$;

comment on function donto.ab_verdict(
    text, bigint, double precision, double precision, double precision, double precision
) is
'The A/B verdict of an arm (commit, re-prompt, re-chunk, reject) with its metrics and '
'reasons, on a gate (default: its latest); thresholds are parameters. Stable, invoker.';

create or replace view donto.ab_report as
select  -- noqa: ST06
    g.gate_id,
    g.revisions,
    g.k,
    g.recall_arm,
    a.name as arm,
    a.strategy,
    a.params,
    a.spec,
    r.result_id,
    r.run_id,
    er.label as run_label,
    er.is_baseline,
    r.stage,
    r.units,
    r.stop_reason,
    (r.quality ->> 'facts_per_chunk')::float8 as facts_per_chunk,
    (r.quality ->> 'median_anchor_rate')::float8 as median_anchor_rate,
    (r.quality ->> 'hypothesis_rate')::float8 as hypothesis_rate,
    (r.quality ->> 'injection_rate')::float8 as injection_rate,
    (r.quality ->> 'zero_fact_rate')::float8 as zero_fact_rate,
    (r.recall ->> 'hit')::float8 as recall_hit,
    bl.hit as baseline_hit,
    v.verdict,
    v.reasons,
    r.quality,
    r.recall,
    bl.measure as baseline,
    r.created_at
from donto.ab_result as r
inner join donto.ab_gate as g on r.gate_id = g.gate_id
left join donto.ab_baseline as bl on r.gate_id = bl.gate_id
inner join donto.ab_arm as a on r.arm_id = a.arm_id
inner join donto.extraction_run as er on r.run_id = er.run_id
cross join lateral donto._ab_verdict(a.arm_id, r.gate_id) as v
where not exists (
    select 1 from donto.ab_result as n
    where n.gate_id = r.gate_id and n.arm_id = r.arm_id and n.result_id > r.result_id
);

comment on view donto.ab_report is
'The latest result of every A/B arm on every gate, with metrics 1-4, recall hit@k against '
'the fixed-1,200 baseline and the verdict at the default thresholds (for the dashboard).';
