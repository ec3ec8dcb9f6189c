-- Standing memory: the user's instructions, preferences and constraints,
-- projected from a revision by a rule-based detector (donto_pg.core.standing),
-- superseded by later ones on the same subject, recalled in reserved slots.

create or replace function donto._standing_detect(p_revision_id bigint)
returns table (
    ord integer, kind text, subject_key text, turn_seq integer, turn_id integer,
    char_start integer, char_end integer, statement_text text, said_on date
)
language plpython3u
stable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].standing.standing_rows(plpy, p_revision_id)
$py$;

comment on function donto._standing_detect(bigint) is
'The standing statements the rule-based detector (donto_pg.core.standing) finds in the user turns '
'of a revision, with their char spans in the revision and the date of their turn.';

create or replace function donto.standing_rules()
returns text
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The version of the rule-based detector: donto_pg.core.standing.RULES_VERSION, which
   donto._standing_detect runs (tests/db/test_standing.py checks that they agree). */
    select 'rules-v6'::text;
$$;

comment on function donto.standing_rules() is
'The version of the rule-based detector (donto_pg.core.standing.RULES_VERSION, rules-v6): the '
'strategy of the standing projections donto.project_standing makes now.';

create or replace function donto.standing_context_iri(p_document_iri text)
returns text
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* ctx:memory/standing/<scheme>/<rest> for a document IRI <scheme>:<rest>. */
    select 'ctx:memory/standing/' || pg_catalog.regexp_replace(p_document_iri, ':', '/');
$$;

comment on function donto.standing_context_iri(text) is
'The standing-memory context of a document: beam:100K/1 -> ctx:memory/standing/beam/100K/1.';

create or replace function donto._retract_older_rules(
    p_revision_id bigint, p_context_id bigint, p_rules text
)
returns integer
language sql
volatile
set search_path to pg_catalog, pg_temp
as $$
/*
Retract what an older version of the rule detector (rules-v<n>, n below P_RULES's) found
in context P_CONTEXT_ID in revision P_REVISION_ID or a revision of its lineage (the ones
it extends, donto.revision_lineage: the current rules' projection of the longer text
covers them) ('superseded: standing rules <P_RULES> replace <older>'). A newer version's
statements are never touched: a session running older rules retracts nothing. Returns
how many it retracted.
*/
    with gone as (
        insert into donto.retraction (statement_id, reason)
        select x.statement_id,
               pg_catalog.format('superseded: standing rules %s replace %s', p_rules, p.strategy)
        from donto.x_standing as x
        inner join donto.projection as p on x.projection_id = p.projection_id
        where x.revision_id in (
                  select l.rev from donto.revision_lineage(p_revision_id) as l (rev))
              and p.context_id = p_context_id and p.kind = 'standing'
              and pg_catalog.substring(p.strategy, '^rules-v([0-9]+)$')::integer
              < pg_catalog.substring(p_rules, '^rules-v([0-9]+)$')::integer
              and not exists (select 1 from donto.retraction as r
                              where r.statement_id = x.statement_id)
        order by x.statement_id
        on conflict do nothing
        returning 1
    )
    select pg_catalog.count(*)::integer from gone;
$$;

comment on function donto._retract_older_rules(bigint, bigint, text) is
'Retract what older rule-detector versions found in a revision''s standing context; returns '
'the count.';

create or replace function donto.project_standing(rev_id bigint, context text default null)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Project revision REV_ID into standing statements: every sentence of a user
turn that the rule-based detector (donto_pg.core.standing, strategy
donto.standing_rules(), e.g. rules-v6) reads as an instruction, a preference or a constraint becomes a statement
(predicate mem:standing/<kind>, object_lit {v: its text, subject: its subject
key}, char span of the sentence in the revision, so that substring(body from
char_start + 1 for char_end - char_start) is its exact text) with a
donto.x_standing row. Valid time: from the date of its turn; it ends where a
later statement of the same kind and subject key that asks for the same thing
(the knowledge-update rule, donto._standing_supersedes) takes over, on the
later one's date (a one-day range when both share a date), and is open
otherwise. CONTEXT defaults to donto.standing_context_iri of the
document. Idempotent: a second call returns the existing count. A changed
conversation (a revision that does not extend the others projected in the context)
retracts their standing statements (donto._retract_superseded). Newer rules replace
older ones: projecting a revision that an older rules version projected into the
context retracts what those found ('superseded: standing rules ...'; as_of before
still sees them).
*/
declare
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_proj bigint;
    v_n integer;
    v_rules text := donto.standing_rules();
begin
    select r.document_id, d.iri into v_doc, v_iri
    from donto.revision as r inner join donto.document as d using (document_id)
    where r.revision_id = rev_id;
    if not found then
        raise exception 'donto.project_standing: no revision %', rev_id using errcode = '22023';
    end if;
    v_ctx := donto._claim_context(coalesce(context, donto.standing_context_iri(v_iri)),
                                  'standing', v_doc, 'donto.project_standing');
    perform donto._lock('standing', rev_id);

    select p.projection_id into v_proj from donto.projection as p
    where p.revision_id = rev_id and p.kind = 'standing' and p.strategy = v_rules
          and p.params = '{}'::jsonb and p.context_id = v_ctx;
    if found then
        perform donto._retract_older_rules(rev_id, v_ctx, v_rules);
        select pg_catalog.count(*)::integer into v_n
        from donto.x_standing as x where x.projection_id = v_proj;
        return v_n;
    end if;
    insert into donto.projection (revision_id, kind, strategy, params, context_id)
    values (rev_id, 'standing', v_rules, '{}'::jsonb, v_ctx)
    returning projection_id into v_proj;

    with d1 as (
        select d0.*, donto._standing_words(d0.statement_text, d0.subject_key) as words
        from donto._standing_detect(rev_id) as d0
    ),
    d as (
        select
            d2.*,
            nx.said_on as next_on,
            nx.ord as next_ord,
            pg_catalog.nextval(pg_catalog.pg_get_serial_sequence(
                'donto.statement', 'statement_id')) as sid
        from d1 as d2
        -- the first later statement that takes over (donto._standing_supersedes)
        left join lateral (
            select l.said_on, l.ord from d1 as l
            where l.kind = d2.kind and l.subject_key = d2.subject_key and l.ord > d2.ord
                  -- donto._standing_supersedes, its words computed once per statement
                  and donto._standing_takes_over(l.words, d2.words)
            order by l.ord
            limit 1
        ) as nx on true
    ),
    s as (
        insert into donto.statement (
            statement_id, subject, predicate, object_lit, context_id, valid_time,
            document_id, derived_from_revision, char_start, char_end
        ) overriding system value
        select
            d.sid,
            pg_catalog.format('standing:%s/%s', rev_id, d.ord),
            'mem:standing/' || d.kind,
            pg_catalog.jsonb_build_object('v', d.statement_text, 'subject', d.subject_key),
            v_ctx,
            case
                when d.said_on is null then '(,)'::daterange
                when d.next_ord is null or d.next_on is null then
                    pg_catalog.daterange(d.said_on, null, '[)')
                when d.next_on > d.said_on then pg_catalog.daterange(d.said_on, d.next_on, '[)')
                else pg_catalog.daterange(d.said_on, d.said_on, '[]')
            end,
            v_doc, rev_id, d.char_start, d.char_end
        from d
        order by d.ord
    )
    insert into donto.x_standing (
        statement_id, projection_id, revision_id, ord, kind, subject_key, turn_seq, turn_id,
        char_start, char_end, detector
    )
    select d.sid, v_proj, rev_id, d.ord, d.kind, d.subject_key, d.turn_seq, d.turn_id,
           d.char_start, d.char_end, v_rules
    from d
    order by d.ord;
    get diagnostics v_n = row_count;
    perform donto._retract_older_rules(rev_id, v_ctx, v_rules);
    -- A grown conversation: what was retracted by hand in the text it extends stays so.
    perform donto._carry_retractions(v_ctx, rev_id);
    -- A changed conversation: the standing statements of the revisions it does not
    -- extend are retracted as superseded (those it extends are covered by it).
    perform donto._retract_superseded(v_ctx, rev_id);
    return v_n;
end;
$$;

comment on function donto.project_standing(bigint, text) is
'Standing memory: the instructions, preferences and constraints of a revision''s user turns '
'(rule-based detector donto.standing_rules()) as mem:standing/<kind> statements anchored to '
'their turn, valid until superseded; newer rules retract what older ones found; idempotent; '
'returns the count.';

create or replace function donto._standing_claim_key(p_subject text, p_text text, p_kind text)
returns text
language plpython3u
immutable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].standing.claim_subject_key(plpy, p_subject, p_text, p_kind)
$py$;

comment on function donto._standing_claim_key(text, text, text) is
'The subject key of an LLM standing claim: of the subject it names, else of its anchored text '
'(donto_pg.core.standing.subject_key).';

create or replace function donto._standing_condition(p_text text)
returns text
language plpython3u
immutable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].standing.statement_condition(plpy, p_text)
$py$;

comment on function donto._standing_condition(text) is
'The questions a standing statement applies to, when it names them: X of "... when I ask '
'about X" (donto_pg.core.standing.condition), else null. Recall''s standing slots match a '
'question against it as well as against the whole statement.';

create or replace function donto._standing_not_the_users(
    p_turn text, p_start integer, p_end integer
)
returns boolean
language plpython3u
immutable
set search_path to pg_catalog, pg_temp
as $py$
if 'donto_pg' not in GD: plpy.execute('select donto._py_boot()')
return GD['donto_pg'].standing.not_the_users(plpy, p_turn, p_start, p_end)
$py$;

comment on function donto._standing_not_the_users(text, integer, integer) is
'Whether [start, end) of a user turn''s text is not the user''s own words (quoted, pasted, '
'role-labelled, reported: donto_pg.core.voice, the rule detector''s filter), or lies in a '
'sentence that holds some, outside its clauses of the user''s own (the sentence rule).';

create or replace function donto._standing_claims_of(p_response_id bigint, p_rev bigint)
returns table (
    statement_id bigint, claim_index integer, topic text, kind text, is_hypothesis boolean,
    char_start integer, char_end integer, txt text, turn_seq integer, turn_id integer,
    said_on date, turn_start integer, turn_text text
)
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The standing claims (mem:standing/instruction, preference, constraint) of response
P_RESPONSE_ID that are current and anchored in revision P_REV: their evidence span and
text, and the user turn that holds the span (its seq, id, date, start and text; null when
no user turn holds it). For donto._standing_from_claims.
*/
    select
        xc.statement_id, xc.claim_index, cs.subject,
        pg_catalog.substr(cs.predicate, pg_catalog.length('mem:standing/') + 1),
        cs.is_hypothesis, el.char_start, el.char_end,
        donto.span_text(rv.revision_id, el.char_start, el.char_end),
        t.seq, t.turn_id, t.time_anchor, t.char_start,
        donto.span_text(rv.revision_id, t.char_start, t.char_end)
    from donto.x_claim as xc
    inner join donto.statement as cs on xc.statement_id = cs.statement_id
    inner join donto.evidence_link as el on xc.statement_id = el.statement_id
    inner join donto.revision as rv on el.revision_id = rv.revision_id
    left join lateral (
        select t0.seq, t0.turn_id, t0.time_anchor, t0.char_start, t0.char_end
        from donto.turn as t0
        where t0.revision_id = el.revision_id and t0.role = 'user'
              and t0.char_start <= el.char_start and el.char_end <= t0.char_end
        order by t0.seq
        limit 1
    ) as t on true
    where xc.response_id = p_response_id
          and cs.predicate in ('mem:standing/instruction', 'mem:standing/preference',
                               'mem:standing/constraint')
          and el.revision_id = p_rev
          and not exists (select 1 from donto.retraction as rt
                          where rt.statement_id = xc.statement_id);
$$;

comment on function donto._standing_claims_of(bigint, bigint) is
'The current standing claims of a response anchored in a revision, with their evidence and '
'the user turn that holds it (null when none).';

create or replace function donto._standing_from_claims(p_response_id bigint)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The LLM path into standing memory, run by donto.ingest_extraction for each
response it stores (after it has retracted what is not a current fact). Every
standing claim of response P_RESPONSE_ID (predicate mem:standing/<kind>, the
stated_fact/v2 claim type "standing") that is a current stated fact - not
retracted (so its response was not injected), not a hypothesis, its quote
anchored (donto.evidence_link) inside one USER turn of the block's revision, at
most 400 characters (donto_pg.core.standing.MAX_CHARS) and at least 12 - becomes a standing
statement beside the rule detector's: predicate mem:standing/<kind>, object_lit
{v: the anchored text of the revision, subject: its subject key (of the subject
the model named, donto._standing_claim_key), topic: that subject, claim: the
claim's statement id}, the anchored char span, valid time from its turn's date
(open: superseding is read by donto.standing), and a donto.x_standing row with
detector 'llm-v1' under the projection (revision, 'standing', 'llm-v1',
{run_id}) in the document's standing context. Claims that are not anchored
never become standing statements, nor do an A/B arm's (its blocks are measurements).
A standing claim anchored in no user turn (the assistant's words) or only in
words of a user turn that are not the user's own (donto._standing_not_the_users:
what the rule detector leaves out since rules-v5, and a clause of the user's in a sentence
whose rule is someone else's, "When I ask about X, my friend says to ...") is retracted instead
('donto._standing_from_claims: a standing claim is the user''s: ...').
Returns how many were added; a claim already projected is skipped.
*/
declare
    v_rev bigint;
    v_run bigint;
    v_doc bigint;
    v_iri text;
    v_ctx bigint;
    v_proj bigint;
    v_base integer;
    v_n integer;
begin
    select b.revision_id, x.run_id, r.document_id, d.iri into v_rev, v_run, v_doc, v_iri
    from donto.extraction_response as x
    inner join donto.extraction_block as b on x.block_id = b.block_id
    inner join donto.revision as r on b.revision_id = r.revision_id
    inner join donto.document as d on r.document_id = d.document_id
    where x.response_id = p_response_id;
    if not found then
        raise exception 'donto._standing_from_claims: no response %', p_response_id
            using errcode = '22023';
    end if;
    -- An A/B arm's claims are measurements (its blocks: strategy ab/...), never memory.
    if exists (select 1 from donto.extraction_response as x
               inner join donto.extraction_block as b on x.block_id = b.block_id
               inner join donto.projection as p on b.projection_id = p.projection_id
               where x.response_id = p_response_id and p.strategy like 'ab/%') then
        return 0;
    end if;
    if not exists (
        select 1 from donto.x_claim as xc
        inner join donto.statement as cs on xc.statement_id = cs.statement_id
        where xc.response_id = p_response_id and cs.predicate like 'mem:standing/%'
    ) then
        return 0;
    end if;
    v_ctx := donto._claim_context(donto.standing_context_iri(v_iri), 'standing', v_doc,
                                  'donto._standing_from_claims');
    perform donto._lock('standing-claims', v_rev);
    -- A standing claim is the user's: one whose quote lies in no user turn (the assistant's
    -- words) or only in words of a user turn that are not the user's own (a quoted,
    -- pasted or role-labelled line, someone else's reported words) stays on the record,
    -- retracted by the database (by_hand false), never a current claim.
    insert into donto.retraction (statement_id, reason)
    select a.statement_id,
           'donto._standing_from_claims: a standing claim is the user''s: its quote is '
           || case when pg_catalog.bool_or(a.in_user_turn)
                   then 'not the user''s own words (quoted, pasted or reported in a user turn)'
                   else 'not in a user turn' end
    from (
        select c.statement_id, c.turn_seq is not null as in_user_turn,
               c.turn_seq is not null and not donto._standing_not_the_users(
                   c.turn_text, c.char_start - c.turn_start, c.char_end - c.turn_start
               ) as users
        from donto._standing_claims_of(p_response_id, v_rev) as c
    ) as a
    group by a.statement_id
    having not pg_catalog.bool_or(a.users)
    order by a.statement_id
    on conflict do nothing;
    select p.projection_id into v_proj from donto.projection as p
    where p.revision_id = v_rev and p.kind = 'standing' and p.strategy = 'llm-v1'
          and p.params = pg_catalog.jsonb_build_object('run_id', v_run) and p.context_id = v_ctx;
    if not found then
        insert into donto.projection (revision_id, kind, strategy, params, context_id)
        values (v_rev, 'standing', 'llm-v1', pg_catalog.jsonb_build_object('run_id', v_run),
                v_ctx)
        returning projection_id into v_proj;
    end if;
    select coalesce(pg_catalog.max(x.ord) + 1, 0) into v_base
    from donto.x_standing as x where x.projection_id = v_proj;

    with c0 as (
        select
            x.statement_id as claim_sid, x.claim_index, x.topic, x.kind, x.char_start,
            x.char_end, x.turn_seq, x.turn_id, x.said_on, x.txt
        from donto._standing_claims_of(p_response_id, v_rev) as x
        where x.turn_seq is not null
              and not x.is_hypothesis
              -- a sentence, as the rule detector's (12 to 400 characters): a word
              -- ("audiobooks") is all subject, and would take over every statement on it
              and x.char_end - x.char_start between 12 and 400
              and not exists (
                  select 1 from donto.x_standing as xs
                  inner join donto.statement as ss on xs.statement_id = ss.statement_id
                  where xs.projection_id = v_proj
                        and ss.object_lit ->> 'claim' = x.statement_id::text)
    ),
    c as (
        select
            c0.*,
            donto._standing_claim_key(c0.topic, c0.txt, c0.kind) as subject_key,
            (v_base + pg_catalog.row_number() over (order by c0.claim_index) - 1)::integer
                as ord,
            pg_catalog.nextval(pg_catalog.pg_get_serial_sequence(
                'donto.statement', 'statement_id')) as sid
        from c0
    ),
    s as (
        insert into donto.statement (
            statement_id, subject, predicate, object_lit, context_id, valid_time,
            document_id, derived_from_revision, char_start, char_end
        ) overriding system value
        select
            c.sid,
            pg_catalog.format('standing:%s/llm/%s/%s', v_rev, v_run, c.ord),
            'mem:standing/' || c.kind,
            pg_catalog.jsonb_build_object('v', c.txt, 'subject', c.subject_key,
                                          'topic', c.topic, 'claim', c.claim_sid),
            v_ctx,
            case when c.said_on is null then '(,)'::daterange
                 else pg_catalog.daterange(c.said_on, null, '[)') end,
            v_doc, v_rev, c.char_start, c.char_end
        from c
        order by c.ord
    )
    insert into donto.x_standing (
        statement_id, projection_id, revision_id, ord, kind, subject_key, turn_seq, turn_id,
        char_start, char_end, detector
    )
    select c.sid, v_proj, v_rev, c.ord, c.kind, c.subject_key, c.turn_seq, c.turn_id,
           c.char_start, c.char_end, 'llm-v1'
    from c
    order by c.ord;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto._standing_from_claims(bigint) is
'Standing statements (detector llm-v1) from the anchored, current standing claims of one '
'extraction response, anchored in the user''s own words of a user turn; unanchored claims '
'never become one, and one anchored elsewhere is retracted.';

create or replace function donto.embed_standing(rev_id bigint default null, model text default null)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Embed, inside the database, every standing statement of revision REV_ID (null:
of every revision) that has no vector for MODEL (null: the default model;
registered, see donto.embedding_model_id), for recall's standing slots, and the
condition of each that names one (donto._standing_condition). Returns how many
statement vectors were added; a second call adds none. A session that is not the
owner's embeds only the statements its own login filed (donto._may_embed). A
retracted statement (forgotten, or superseded) is not embedded: recall reads none.
*/
declare
    v_model integer := donto.embedding_model_id(model);
    v_name text;
    v_n integer := 0;
    r record;
begin
    select m.name into v_name from donto.embedding_model as m where m.model_id = v_model;
    for r in
        select x.statement_id, s.object_lit ->> 'v' as txt
        from donto.x_standing as x
        inner join donto.statement as s on x.statement_id = s.statement_id
        where (rev_id is null or x.revision_id = rev_id)
              and donto._may_embed(s.login_role, s.document_id, s.context_id)
              and not exists (select 1 from donto.x_standing_vector as v
                              where v.statement_id = x.statement_id and v.model_id = v_model)
              and not exists (select 1 from donto.retraction as rt
                              where rt.statement_id = x.statement_id)
        order by x.statement_id
    loop
        insert into donto.x_standing_vector (statement_id, model_id, embedding)
        values (r.statement_id, v_model, donto.embed_query(r.txt, v_name))
        on conflict (statement_id, model_id) do nothing;
        v_n := v_n + 1;
    end loop;
    -- ... and the condition of each that names one (donto._standing_condition).
    for r in
        select c.statement_id, c.cond
        from (select x.statement_id, donto._standing_condition(s.object_lit ->> 'v') as cond
              from donto.x_standing as x
              inner join donto.statement as s on x.statement_id = s.statement_id
              where (rev_id is null or x.revision_id = rev_id)
                    and donto._may_embed(s.login_role, s.document_id, s.context_id)
                    and not exists (
                        select 1 from donto.x_standing_condition_vector as v
                        where v.statement_id = x.statement_id and v.model_id = v_model)
                    and not exists (select 1 from donto.retraction as rt
                                    where rt.statement_id = x.statement_id)
        ) as c
        where c.cond is not null
        order by c.statement_id
    loop
        insert into donto.x_standing_condition_vector (statement_id, model_id, embedding)
        values (r.statement_id, v_model, donto.embed_query(r.cond, v_name))
        on conflict (statement_id, model_id) do nothing;
    end loop;
    return v_n;
end;
$$;

comment on function donto.embed_standing(bigint, text) is
'Embed the standing statements (of one revision, or all) that have no vector for a model; '
'returns how many were added.';

create or replace function donto._standing_revisions(p_context_id bigint)
returns bigint[]
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* The revisions with any projection in context P_CONTEXT_ID (null: every revision),
   also those a projection there grew into (donto.projection_extension: appends). */
    select pg_catalog.array_agg(distinct r.revision_id)
    from (
        select p.revision_id from donto.projection as p
        where p_context_id is null or p.context_id = p_context_id
        union all
        select pe.revision_id from donto.projection_extension as pe
        inner join donto.projection as p on pe.projection_id = p.projection_id
        where p_context_id is null or p.context_id = p_context_id
    ) as r;
$$;

comment on function donto._standing_revisions(bigint) is
'Revisions projected into a context (recall, extraction or standing): whose standing '
'statements belong to it.';

create or replace function donto._standing_words(p_text text, p_subject text)
returns text[]
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The directive words of a standing statement P_TEXT of subject key P_SUBJECT (see
   donto._standing_supersedes): computed once per statement, compared per pair. */
    select pg_catalog.array_remove(array(
        select w from pg_catalog.unnest(pg_catalog.tsvector_to_array(
            pg_catalog.to_tsvector('pg_catalog.english'::pg_catalog.regconfig, p_text)
        )) as w
        where w operator(pg_catalog.~) '^[a-z]'
              -- not a subject word (the key's stems are not Snowball's:
              -- "plann" / "plan", "pric" / "price": either is a prefix)
              and not exists (
                  select 1
                  from pg_catalog.unnest(pg_catalog.string_to_array(
                      coalesce(p_subject, ''), ' ')) as sk
                  where sk = w
                        or (pg_catalog.length(sk) >= 3 and pg_catalog.length(w) >= 3
                            and (pg_catalog.starts_with(w, sk)
                                 or pg_catalog.starts_with(sk, w)))
                        or (pg_catalog.length(sk) >= 5 and pg_catalog.length(w) >= 5
                            and pg_catalog.left(sk, 5) = pg_catalog.left(w, 5)))
              and w <> all('{add,also,alway,never,answer,ask,clear,confirm,detail,everi,
                  each,exact,forward,futur,give,go,includ,inform,keep,like,list,make,
                  mention,need,note,pleas,prefer,provid,rather,realli,rememb,repli,
                  report,request,respond,show,specif,specifi,state,sure,tell,time,use,
                  want,whenev,would}'::text[])
    ), null);
$$;

comment on function donto._standing_words(text, text) is
'The directive words of a standing statement (its lexemes outside its subject key and the '
'words that say how to answer), which donto._standing_supersedes compares.';

create or replace function donto._standing_takes_over(p_later text[], p_earlier text[])
returns boolean
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* Whether a later standing statement takes over from an earlier one of the same kind and
   subject key, by their directive words (donto._standing_words): they share one, or
   either has none. */
    select pg_catalog.cardinality(p_later) = 0 or pg_catalog.cardinality(p_earlier) = 0
           or p_later operator(pg_catalog.&&) p_earlier;
$$;

comment on function donto._standing_takes_over(text[], text[]) is
'Whether later directive words take over from earlier ones (shared word, or either none).';

create or replace function donto._standing_supersedes(
    p_later text, p_earlier text, p_subject text
)
returns boolean
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/*
Does standing statement P_LATER take over from P_EARLIER, both of one kind and
subject key P_SUBJECT? Each asks for its directive words: its English
full-text lexemes (words, not numbers) outside the subject key (a lexeme and a
key stem match when either is a prefix of the other, 3 letters or more, or
when they share their first 5: "qualiti" / "quality") and
outside the words that say how
to answer without saying what ("always", "include", "specify", "exact",
"confirm", ...). Yes when they share one ("use metric units" / "use imperial
units" when I ask about recipes: "unit") or when either has none (a
statement that is all subject); no when they ask for different things about
one subject ("include ticket prices" / "include specific locations" when I
ask about social events): then both stay in force.
*/
    select donto._standing_takes_over(donto._standing_words(p_later, p_subject),
                                      donto._standing_words(p_earlier, p_subject));
$$;

comment on function donto._standing_supersedes(text, text, text) is
'Whether a later standing statement of the same kind and subject key takes over from an '
'earlier one: they ask for the same thing (shared directive words), or either asks nothing more.';

create or replace function donto._standing(p_context_id bigint, p_as_of timestamptz)
returns table (
    statement_id bigint, revision_id bigint, kind text, subject_key text,
    statement_text text, char_start integer, char_end integer, valid_time daterange,
    turn_id integer, superseded_by bigint
)
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* donto.standing for a context id (null: all); see there. */
    with vis as (
        select
            x.statement_id, x.revision_id, x.kind, x.subject_key, s.object_lit ->> 'v' as txt,
            x.char_start, x.char_end, s.valid_time, x.turn_id, x.detector, s.document_id,
            donto._standing_words(s.object_lit ->> 'v', x.subject_key) as words,
            coalesce(pg_catalog.lower(s.valid_time), '-infinity'::date) as said_on,
            -- between conversations: said no later than it was recorded (a text's own
            -- dates may lie in the future), and only among one login's documents
            least(coalesce(pg_catalog.lower(s.valid_time), '-infinity'::date),
                  s.tx_from::date) as said_by,
            (select case when not donto._owners_login(o.login) then o.login end
             from (select donto._document_login(s.document_id) as login) as o) as whose
        from donto.x_standing as x
        inner join donto.statement as s on x.statement_id = s.statement_id
        where x.revision_id = any(donto._standing_revisions(p_context_id))
              and (p_as_of is null or s.tx_from <= p_as_of)
              -- a revision extended by one with standing statements of its own is
              -- covered by it (the longer body holds the same sentences)
              and not exists (
                  select 1 from donto.revision_extension as re
                  inner join donto.x_standing as x2 on x2.revision_id = re.revision_id
                  inner join donto.statement as s2 on x2.statement_id = s2.statement_id
                  where re.extends_revision_id = x.revision_id
                        and (p_as_of is null or s2.tx_from <= p_as_of))
              and not exists (
                  select 1 from donto.retraction as rt
                  where rt.statement_id = x.statement_id
                        and (p_as_of is null or rt.tx_from <= p_as_of))
              -- an LLM standing statement falls with the claim it was made from
              and not exists (
                  select 1 from donto.retraction as rt
                  where rt.statement_id = (s.object_lit ->> 'claim')::bigint
                        and x.detector not like 'rules-%'
                        and (p_as_of is null or rt.tx_from <= p_as_of))
    )
    select
        v.statement_id, v.revision_id, v.kind, v.subject_key, v.txt, v.char_start, v.char_end,
        v.valid_time, v.turn_id,
        coalesce(
            (select l.statement_id from vis as l
             where l.kind = v.kind and l.subject_key = v.subject_key and v.subject_key <> ''
                   -- later: in one conversation, said later in it (its revisions are
                   -- prefixes of one another, the others retracted), whatever dates its
                   -- text gives (the projection's valid times end there too); across
                   -- conversations of one login (the owner's count as one), by date, no
                   -- later than recorded: another login's text supersedes nothing
                   and case when l.document_id = v.document_id
                            then (l.char_start, l.revision_id) > (v.char_start, v.revision_id)
                            else l.whose is not distinct from v.whose
                                 and (l.said_by, l.revision_id, l.char_start)
                                     > (v.said_by, v.revision_id, v.char_start) end
                   -- donto._standing_supersedes, its words computed once per statement
                   and donto._standing_takes_over(l.words, v.words)
             order by l.document_id <> v.document_id,
                      case when l.document_id = v.document_id then l.char_start end,
                      l.said_by, l.revision_id, l.char_start
             limit 1),
            -- the same words found twice (the rules and an LLM run, or two runs): the
            -- rule detector's statement stands for them, else the first one recorded
            (select o.statement_id from vis as o
             where v.detector not like 'rules-%' and o.revision_id = v.revision_id
                   and o.statement_id <> v.statement_id
                   and o.char_start < v.char_end and v.char_start < o.char_end
                   and (o.detector like 'rules-%' or o.statement_id < v.statement_id)
             order by o.detector not like 'rules-%', o.statement_id
             limit 1)
        ) as superseded_by
    from vis as v
    order by v.said_on, v.revision_id, v.char_start;
$$;

comment on function donto._standing(bigint, timestamptz) is
'Standing statements of a context id as of a time, with the statement that supersedes each '
'(a later one of the same kind and subject key asking for the same thing; for an LLM '
'statement also one found earlier '
'for the same words).';

create or replace function donto.standing(context text default null, as_of timestamptz default null)
returns table (
    statement_id bigint, revision_id bigint, kind text, subject_key text,
    statement_text text, char_start integer, char_end integer, valid_time daterange,
    turn_id integer, superseded_by bigint
)
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The standing statements (instructions, preferences, constraints) of the
revisions projected into CONTEXT (a recall, extraction or standing context
IRI; null: every revision), found by the rule detector (donto.project_standing,
x_standing.detector rules-v1, rules-v2, ...) or by an LLM extraction run (standing claims,
donto._standing_from_claims, llm-v1), as the database knew them at AS_OF
(recorded by then, not retracted by then, nor the claim an LLM one was made
from), in the order they were said. SUPERSEDED_BY is the first later
statement (said later in the same conversation, whatever dates its text gives;
in another conversation, dated later) of the same kind and subject key among those that asks for the same
thing (the knowledge-update rule, donto._standing_supersedes: "use imperial
units" takes over from "use metric units" when I ask about recipes, "include
ticket prices" leaves "include locations" when I ask about social events in
force; for an LLM statement, else one found earlier for the same words), null
for a statement still in force:
    select statement_text from donto.standing('ctx:memory/episodic/beam/100K/1')
    where superseded_by is null;
*/
declare
    v_ctx bigint;
begin
    perform donto._check_as_of(as_of, 'donto.standing');
    if context is not null then
        select c.context_id into v_ctx from donto.context as c where c.iri = context;
        if not found then
            raise exception 'donto.standing: no context %', context using errcode = '22023';
        end if;
    end if;
    return query select * from donto._standing(v_ctx, as_of);
end;
$$;

comment on function donto.standing(text, timestamptz) is
'Standing statements of a context as of a time, in the order said, each with the later '
'statement that supersedes it (null: still in force).';

create or replace function donto._recall_standing(
    p_embedding vector, p_context_id bigint, p_as_of timestamptz, p_model_id integer,
    p_n integer, p_min_similarity double precision
)
returns table (
    statement_id bigint, revision_id bigint, char_start integer, char_end integer,
    statement_text text, valid_time daterange, similarity double precision
)
language sql
stable
set search_path to pg_catalog, public, pg_temp
as $$
/*
The standing block of donto.recall: at most P_N standing statements in force
(not superseded) in the context as of P_AS_OF, most similar to the query
vector first (similarity at least P_MIN_SIMILARITY; ties to the later
statement). The similarity is the cosine similarity of the statement's vector
for model P_MODEL_ID; for a statement that names its condition ("... when I ask
about X", donto._standing_condition) and has its vector, it is
(1 - W) x that + W x the cosine similarity of the condition's vector, W =
donto.recall_standing_condition_weight (default 0.5; 0: the statement alone).
*/
    select st.statement_id, st.revision_id, st.char_start, st.char_end, st.statement_text,
           st.valid_time, x.similarity
    from donto._standing(p_context_id, p_as_of) as st
    inner join donto.x_standing_vector as v
        on st.statement_id = v.statement_id and v.model_id = p_model_id
    left join donto.x_standing_condition_vector as cv
        on st.statement_id = cv.statement_id and cv.model_id = p_model_id
    cross join lateral (
        select donto._recall_number(
            'recall_standing_condition_weight', '0.5', 0, 1) as w
    ) as cw
    cross join lateral (
        select (case when cv.embedding is null then 1 - (v.embedding <=> p_embedding)
                     else (1 - cw.w) * (1 - (v.embedding <=> p_embedding))
                          + cw.w * (1 - (cv.embedding <=> p_embedding))
                end)::float8 as similarity
    ) as x
    where st.superseded_by is null
          and vector_dims(v.embedding) = vector_dims(p_embedding)
          and (cv.embedding is null or vector_dims(cv.embedding) = vector_dims(p_embedding))
          and x.similarity >= p_min_similarity
    order by x.similarity desc, st.statement_id desc
    limit p_n;
$$;

comment on function donto._recall_standing(vector, bigint, timestamptz, integer, integer, float8) is
'Standing slots of donto.recall: the in-force standing statements most similar to the query '
'(the statement and, when it names one, its condition).';

create or replace function donto._check_may_embed(
    p_fn text, p_ids bigint[], p_keys boolean default false
)
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Refuse (SQLSTATE 42501, in the name of P_FN) a vector of any of P_IDS that another login
filed, unless the session is the schema owner's (donto._may_embed): statements, or, with
P_KEYS, recall keys (donto.x_turn_key). The vector ingest definers ask it;
donto.embedding's own trigger asks donto._may_embed.
*/
declare
    v_bad bigint;
begin
    if p_keys then
        select x.key_id into v_bad from donto.x_turn_key as x
        where x.key_id = any(p_ids)
              and not donto._may_embed(x.login_role, (select r.document_id from donto.revision
                                       as r where r.revision_id = x.revision_id), null)
        limit 1;
    else
        select s.statement_id into v_bad from donto.statement as s
        where s.statement_id = any(p_ids)
              and not donto._may_embed(s.login_role, s.document_id, s.context_id)
        limit 1;
    end if;
    if v_bad is not null then
        raise exception '%: % % was filed by another login, or in a document % may no '
            'longer add to (the owner''s session stores any vector)', p_fn,
            case when p_keys then 'recall key' else 'statement' end, v_bad, session_user
            using errcode = '42501';
    end if;
end;
$$;

comment on function donto._check_may_embed(text, bigint[], boolean) is
'Refuse (42501) a vector of a statement (or recall key) another login filed, unless the '
'session is the owner''s (donto._may_embed). Stable, security invoker.';

create or replace function donto.ingest_standing_embeddings(
    p_model_id integer, p_ids bigint[], p_vectors text[]
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Store vectors (pgvector text, one per id) of standing statements P_IDS for
model P_MODEL_ID, as a client that embeds itself computed them (donto-pg
embed). Existing vectors are kept, a retracted statement gets none; an id that
is not a standing statement, a wrong dimension or unequal array lengths are
refused. Returns the rows added.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    v_dim := donto._vector_batch_dimension(
        'donto.ingest_standing_embeddings', p_model_id, p_ids, p_vectors);
    select u.id into v_bad
    from unnest(p_ids, p_vectors) as u (id, v)
    where u.v is null or vector_dims(u.v::vector) <> v_dim
          or not exists (select 1 from donto.x_standing as x where x.statement_id = u.id)
    limit 1;
    if v_bad is not null then
        raise exception 'donto.ingest_standing_embeddings: statement % is not a standing '
            'statement or its vector does not have % dimensions', v_bad, v_dim
            using errcode = '22023';
    end if;
    perform donto._check_may_embed('donto.ingest_standing_embeddings', p_ids);
    insert into donto.x_standing_vector (statement_id, model_id, embedding)
    select u.id, p_model_id, u.v::vector
    from unnest(p_ids, p_vectors) as u (id, v)
    -- retracted since the caller read it (forgotten while it encoded): no vector
    where not exists (select 1 from donto.retraction as rt where rt.statement_id = u.id)
    order by u.id
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_standing_embeddings(integer, bigint[], text[]) is
'Store client-computed vectors of standing statements for one model; skips existing ones.';

create or replace function donto.ingest_standing_condition_embeddings(
    p_model_id integer, p_ids bigint[], p_vectors text[]
)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, public, pg_temp
as $$
/*
Store vectors (pgvector text, one per id) of the conditions of standing
statements P_IDS (donto._standing_condition of their text) for model P_MODEL_ID,
as a client that embeds itself computed them (donto-pg embed). Existing vectors
are kept, a retracted statement gets none; an id that is not a standing statement
naming a condition, a wrong dimension or unequal array lengths are refused.
Returns the rows added.
*/
declare
    v_dim integer;
    v_n integer;
    v_bad bigint;
begin
    v_dim := donto._vector_batch_dimension(
        'donto.ingest_standing_condition_embeddings', p_model_id, p_ids, p_vectors);
    select u.id into v_bad
    from unnest(p_ids, p_vectors) as u (id, v)
    where u.id is null or u.v is null or vector_dims(u.v::vector) <> v_dim
          or not exists (
              select 1 from donto.x_standing as x
              inner join donto.statement as s on x.statement_id = s.statement_id
              where x.statement_id = u.id
                    and donto._standing_condition(s.object_lit ->> 'v') is not null)
    limit 1;
    if found then
        raise exception 'donto.ingest_standing_condition_embeddings: statement % is not a '
            'standing statement naming a condition, or its vector does not have % dimensions',
            coalesce(v_bad::text, 'null'), v_dim
            using errcode = '22023';
    end if;
    perform donto._check_may_embed('donto.ingest_standing_condition_embeddings', p_ids);
    insert into donto.x_standing_condition_vector (statement_id, model_id, embedding)
    select u.id, p_model_id, u.v::vector
    from unnest(p_ids, p_vectors) as u (id, v)
    -- retracted since the caller read it (forgotten while it encoded): no vector
    where not exists (select 1 from donto.retraction as rt where rt.statement_id = u.id)
    order by u.id
    on conflict (statement_id, model_id) do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end;
$$;

comment on function donto.ingest_standing_condition_embeddings(integer, bigint[], text[]) is
'Store client-computed vectors of the conditions of standing statements for one model; skips '
'existing ones.';

-- The columns of the standing-memory tables (migration 012) that the generic
-- names of sql/096-comments.sql do not explain.
comment on column donto.x_standing.ord is
'Order of the statement in its projection (0-based, in order of appearance in the revision).';
comment on column donto.x_standing.kind is
'instruction, preference or constraint (the statement''s predicate is mem:standing/<kind>).';
comment on column donto.x_standing.subject_key is
'What the statement is about (sorted stems); same kind and key: the later one supersedes.';
comment on column donto.x_standing.turn_seq is
'The turn (donto.turn.seq of the revision) the statement was said in.';
comment on column donto.x_standing.detector is
'What found the statement: rules-v<n> (the rule detector, donto_pg.core.standing, of that '
'version: donto.standing_rules()) or llm-v1 (a standing claim of an LLM extraction run, '
'donto._standing_from_claims).';
comment on column donto.x_standing_vector.embedding is
'The statement text''s vector under the model (for recall''s standing slots).';
comment on column donto.x_standing_condition_vector.embedding is
'The vector of the statement''s condition (donto._standing_condition) under the model.';
