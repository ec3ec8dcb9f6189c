-- 034: forgetting is about text. A recall chunk retracted by hand ("forget my PIN") hid the
-- chunk alone: the standing statement, the claims, the chunks of another projection over the
-- same words stayed current, and recall's turn blocks read the words back from the body.
-- From now on donto.retract retracts every statement over the chunk's words
-- (donto._forget_in), a trigger retracts what is filed over them later, and recall clips them
-- out of what it reads around a hit (sql/). This carries the retractions made before: each
-- recall chunk retracted by hand (by a login that may add to its document now) takes with
-- it the current statements of the revisions of its lineage (the same text at the same
-- place) that overlap it, in every context but the A/B measures, "carried over from
-- statement N: <reason>", in the name of whoever asked. (A changed conversation's revisions
-- are carried when the document is next retracted in or projected; recall clips their
-- turns already.) Nothing to do in a new database.

do $$
begin
    -- a release's retractions (032) are carried by sql/097-carry-forgetting.sql
    if exists (select 1 from donto.retraction as r where r.by_hand)
       and not exists (select 1 from donto.setting as s where s.key = 'carry_forgetting') then
        execute $q$
            insert into donto.retraction (statement_id, reason, by_hand, login_role)
            select distinct on (s.statement_id)
                s.statement_id,
                pg_catalog.format('carried over from statement %s: %s', o.statement_id,
                                  r.reason),
                true,
                r.login_role
            from donto.retraction as r
            inner join donto.statement as o on r.statement_id = o.statement_id
            cross join lateral donto.revision_lineage(o.derived_from_revision) as l (rev)
            inner join donto.statement as s
                on s.derived_from_revision = l.rev
                   and s.char_start < o.char_end and o.char_start < s.char_end
            inner join donto.context as c on s.context_id = c.context_id
            where r.by_hand and o.predicate = 'mem:episodic/chunk'
                  and o.char_start is not null
                  and r.reason not like 'carried over from statement %'
                  and donto._login_writes_document(r.login_role, o.document_id)
                  and c.iri not like 'ctx:measure/%'
                  and not exists (select 1 from donto.retraction as r2
                                  where r2.statement_id = s.statement_id)
            order by s.statement_id, o.statement_id
            on conflict do nothing
        $q$;
    end if;
end;
$$;
