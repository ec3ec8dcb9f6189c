-- Revisions loaded before a projection existed: a database upgraded from an earlier
-- donto-pg keeps its conversations, but the projections added since (recall keys per
-- user turn, migration 017; standing memory, 012, and each newer version of its rules)
-- are cut at load time only. Until they are cut, recall on those conversations is the
-- older, weaker recall.

create or replace function donto.stale_revisions()
returns table (revision_id bigint, document text, missing text[])
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The revisions that answer for their documents (donto._latest_revision, projected for
recall in the document's own recall context) and lack a projection a load makes now:
'recall keys' (a user turn with text not keyed in that context, donto.project_turn_keys)
and 'standing memory (rules-vN)' (a conversation, with user turns, that has no standing
projection by the current rules, donto.project_standing). donto.reproject cuts them;
`donto-pg migrate` counts them.
*/
    with latest as (
        select d.iri, donto._latest_revision(d.document_id) as rev
        from donto.document as d
    ),
    answering as (
        select l.iri, l.rev, p.projection_id
        from latest as l
        inner join donto.context as c on c.iri = donto.recall_context_iri(l.iri)
        inner join lateral (
            select p0.projection_id from donto.projection as p0
            where p0.kind = 'recall' and p0.context_id = c.context_id
                  and (p0.revision_id = l.rev
                       or exists (select 1 from donto.projection_extension as pe
                                  where pe.projection_id = p0.projection_id
                                        and pe.revision_id = l.rev))
            order by p0.projection_id
            limit 1
        ) as p on true
    )
    select a.rev, a.iri, m.missing
    from answering as a
    cross join lateral (
        select pg_catalog.array_remove(array[
            case when exists (
                    select 1 from donto.turn as t
                    where t.revision_id = a.rev and t.role = 'user'
                          and t.char_end > t.char_start
                          and not exists (select 1 from donto.x_turn_key as k
                                          where k.projection_id = a.projection_id
                                                and k.header_start = t.header_start))
                 then 'recall keys' end,
            case when not exists (  -- a text (no user turns) has no standing memory
                    select 1 from donto.projection as s
                    where s.revision_id = a.rev and s.kind = 'standing'
                          and s.strategy = donto.standing_rules())
                      and exists (select 1 from donto.turn as t
                                  where t.revision_id = a.rev and t.role = 'user')
                 then pg_catalog.format('standing memory (%s)', donto.standing_rules()) end
        ], null) as missing
    ) as m
    where pg_catalog.cardinality(m.missing) > 0
    order by a.rev;
$$;

comment on function donto.stale_revisions() is
'Answering revisions that lack a projection a load cuts now (recall keys, standing memory by '
'the current rules): a database upgraded from an earlier donto-pg. donto.reproject cuts them.';

create or replace function donto.reproject(rev_id bigint default null)
returns table (revision_id bigint, document text, keys integer, standing integer)
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Cut what a load cuts now and revision REV_ID lacks (null: every revision of
donto.stale_revisions whose document this session may add to, donto._writes_document:
another login's are left to it): its recall keys (donto.project_turn_keys) and its
standing statements by the current rules (donto.project_standing, which also retracts
what older rules found). Both are idempotent: a second call adds nothing. Returns what
was added per revision; their vectors come with the next `donto-pg embed`. Only a
session that may add to a revision's document cuts it (42501, as the two functions
check, for a REV_ID given).
*/
declare
    r record;
begin
    for r in
        select s.revision_id, s.document from donto.stale_revisions() as s
        inner join donto.revision as x on s.revision_id = x.revision_id
        where rev_id is null and donto._writes_document(x.document_id)
        union all
        select x.revision_id, d.iri from donto.revision as x
        inner join donto.document as d on x.document_id = d.document_id
        where x.revision_id = rev_id
        order by 1
    loop
        revision_id := r.revision_id;
        document := r.document;
        keys := donto.project_turn_keys(r.revision_id);
        standing := donto.project_standing(r.revision_id);
        return next;
    end loop;
end;
$$;

comment on function donto.reproject(bigint) is
'Cut the recall keys and standing statements a revision lacks (null: every stale revision); '
'idempotent; then embed.';
