-- Benchmark probing questions and where their gold turns lie.

create or replace function donto.record_questions(p_revision_id bigint, p_questions jsonb)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record the probing questions of a revision from a JSON array of
{ability, index, question, answer, gold, stale, skipped, raw}. Idempotent:
questions already recorded (same revision, ability, index) are kept as they are.
Returns the number of questions the revision has. Only the login that registered the
revision, or the schema's owner, records a question it does not have yet (42501).
*/
declare
    v_doc bigint;
    v_login text;
    v_n integer;
begin
    select r.document_id, r.login_role into v_doc, v_login
    from donto.revision as r where r.revision_id = p_revision_id;
    if not found then
        raise exception 'donto.record_questions: no revision %', p_revision_id
            using errcode = '22023';
    end if;
    if not (donto._acts_for(v_login) or donto._session_owns_schema()) and exists (
        select 1
        from pg_catalog.jsonb_to_recordset(p_questions) as q (ability text, index integer)
        where not exists (select 1 from donto.probe_question as p
                          where p.revision_id = p_revision_id and p.ability = q.ability
                                and p.qindex = q.index)
    ) then
        raise exception 'donto.record_questions: revision % was registered by %, not by this '
            'login (%): its questions are theirs to record', p_revision_id,
            coalesce(v_login, 'the schema''s owner'), session_user using errcode = '42501';
    end if;
    insert into donto.probe_question (
        document_id, revision_id, ability, qindex, question, answer, gold, stale, skipped, raw
    )
    select v_doc, p_revision_id, q.ability, q.index, q.question, q.answer,
           coalesce(q.gold, '[]'), coalesce(q.stale, '[]'), coalesce(q.skipped, '[]'),
           coalesce(q.raw, '{}')
    from pg_catalog.jsonb_to_recordset(p_questions) as q (
        ability text, index integer, question text, answer text, gold jsonb, stale jsonb,
        skipped jsonb, raw jsonb
    )
    on conflict (revision_id, ability, qindex) do nothing;
    select pg_catalog.count(*)::integer into v_n
    from donto.probe_question as q where q.revision_id = p_revision_id;
    return v_n;
end;
$$;

comment on function donto.record_questions(bigint, jsonb) is
'Record benchmark probing questions of a revision (idempotent).';

create or replace view donto.question_gold_span as
select
    q.question_id,
    q.revision_id,
    q.ability,
    t.turn_id,
    t.seq,
    t.header_start,
    t.char_start,
    t.char_end,
    g.grp::integer - 1 as gold_group
from donto.probe_question as q
cross join lateral pg_catalog.jsonb_array_elements(q.gold) with ordinality as g (ids, grp)
cross join lateral pg_catalog.jsonb_array_elements_text(g.ids) as i (turn_id)
inner join donto.turn as t
    on q.revision_id = t.revision_id and i.turn_id::integer = t.turn_id;

comment on view donto.question_gold_span is
'Gold turns of each probing question with their char spans (a repeated turn id maps to every '
'turn that carries it).';
