-- What a release's users forgot, carried once (migration 032). In a database that came
-- from release 0.1.0 or 0.2.0 every retraction was asked for (donto.retract was the only
-- way), and 032 marked them by hand and left the setting carry_forgetting: migrations 034
-- and 035 could not carry them to the statements over their words, since the functions
-- that do it come with sql/, after the migrations. They are carried here, as donto.retract
-- carries a forgetting: every revision of a document with a recall chunk retracted by hand
-- loses what overlaps its forgotten words (donto._forget_in: other projections' chunks,
-- standing statements, the claims of the blocks that held them). Then the setting goes.
-- Nothing to do anywhere else.

do $$
declare
    v_rev bigint;
begin
    if not exists (select 1 from donto.setting as s where s.key = 'carry_forgetting') then
        return;
    end if;
    for v_rev in
        select r.revision_id from donto.revision as r
        where
            r.document_id in (
                select o.document_id from donto.retraction as h
                inner join donto.statement as o on h.statement_id = o.statement_id
                where h.by_hand and o.predicate = 'mem:episodic/chunk'
            )
            and exists (select 1 from donto.statement as s
                        where s.derived_from_revision = r.revision_id)
        order by r.revision_id
    loop
        perform donto._forget_in(v_rev, null);
    end loop;
    delete from donto.setting where key = 'carry_forgetting';
end;
$$;
