-- 035: forgetting reaches what was said from the words. A recall chunk retracted by hand
-- (034) took the statements whose own span overlaps it, but not the claims of a block that
-- held the words (an unquoted hypothesis, an object repeating them beside a quote from
-- elsewhere in the block: the prompt had shown them to the model), nor the LLM's standing
-- statements made of those claims; and a retraction stopped counting once the document was
-- given to another login (donto.give_document), so words forgotten then came back. From now
-- on a block that holds forgotten words is done with: donto._forget_in retracts every claim
-- of an extraction block whose text overlaps them, whenever it was extracted (its prompt
-- held them, or a worker may have rendered it while the forgetting waited), with the LLM's
-- standing statements made of those claims, and donto.pending_extraction_blocks lists it no
-- more; a retraction by the document's writer then keeps counting for the revisions of that
-- time, and for later ones unless the owner took the document since (sql/), and
-- donto.retract records that its login was the writer (writer_then), so a membership revoked
-- later does not bring the words back. This carries the retractions made before: each recall
-- chunk retracted by hand by the writer of its document (now, or when it asked) takes the
-- current claims, and the standing statements made of them, of the blocks of its lineage
-- (the same text at the same place) whose text overlaps it, and the current statements over
-- it that a given-away document filed since, "carried over from statement N: <reason>", in
-- the name of whoever asked. Nothing to do in a new database.
--
-- A statement so retracted (carried over) that someone then retracts by hand ("forget where
-- I live", of a claim its block's forgetting took) kept only the carried retraction (one per
-- statement): the request was lost, and a changed text's claim of it came back. Such a
-- request is now a row of donto.retraction_request, carried onto later texts like a
-- retraction by hand (donto._forgotten_spans).

create table donto.retraction_request (
    request_id bigint generated always as identity primary key,
    statement_id bigint not null unique references donto.statement,
    retraction_id bigint not null references donto.retraction,
    reason text not null check (pg_catalog.btrim(reason) <> ''),
    login_role text default session_user,
    session_role text default nullif(pg_catalog.current_setting('role'), 'none'),
    backend_pid integer default pg_catalog.pg_backend_pid(),
    tx_from timestamptz not null default pg_catalog.now()
);

comment on table donto.retraction_request is
'A retraction asked for by hand (donto.retract) of a statement already retracted by one '
'carried over from another (forgotten words, or the block that held them): the request '
'stands on its own and is carried onto later texts like a retraction by hand.';
comment on column donto.retraction_request.request_id is 'Identity.';
comment on column donto.retraction_request.statement_id is
'The statement retracted by hand (the first request stands).';
comment on column donto.retraction_request.retraction_id is
'The carried retraction it already had.';
comment on column donto.retraction_request.reason is 'The reason given.';
comment on column donto.retraction_request.login_role is
'The login role of the session that asked (session_user).';
comment on column donto.retraction_request.session_role is
'The role that session had SET (null: none).';
comment on column donto.retraction_request.backend_pid is 'The backend pid of that session.';
comment on column donto.retraction_request.tx_from is 'When it was asked (transaction time).';

-- Whether the login that asked could write the document at that moment (donto.retract sets
-- it once its check passed, under the forgetting lock): a retraction so recorded keeps
-- counting when the login's membership is revoked later (donto._forgotten_spans). Null:
-- not recorded (before 035, or a measure statement retracted by its filer).
alter table donto.retraction add column writer_then boolean;
alter table donto.retraction_request add column writer_then boolean;

comment on column donto.retraction.writer_then is
'True when donto.retract found its login the document''s writer as it retracted (null: not '
'recorded).';
comment on column donto.retraction_request.writer_then is
'True when donto.retract found its login the document''s writer as it asked (null: not '
'recorded).';

do $$
begin
    -- a release's retractions (032) are carried by sql/097-carry-forgetting.sql
    if exists (select 1 from donto.retraction as r where r.by_hand)
       and not exists (select 1 from donto.setting as s where s.key = 'carry_forgetting') then
        execute $q$
            with forgot as materialized (
                select
                    o.statement_id, o.document_id, o.derived_from_revision as rev,
                    o.char_start, o.char_end, r.reason, r.login_role, r.tx_from
                from donto.retraction as r
                inner join donto.statement as o on r.statement_id = o.statement_id
                inner join donto.context as oc on o.context_id = oc.context_id
                where r.by_hand and o.predicate = 'mem:episodic/chunk'
                      and o.char_start is not null
                      and r.reason not like 'carried over from statement %'
                      and oc.iri not like 'ctx:measure/%'
            ),

            asked as materialized (  -- by the document's writer, now or when it asked
                select f.*, donto._login_writes_document(f.login_role, f.document_id) as now
                from forgot as f
                where donto._login_writes_document(f.login_role, f.document_id)
                      or f.login_role = coalesce(
                          (select g.login_role from donto.document_grant as g
                           where g.document_id = f.document_id and g.granted_at <= f.tx_from
                           order by g.grant_id desc limit 1),
                          (select v.login_role from donto.revision as v
                           where v.document_id = f.document_id
                           order by v.revision_id limit 1))
            ),

            target as materialized (  -- the lineage's revisions where the words still count
                select a.*, l.rev as trev
                from asked as a
                cross join lateral donto.revision_lineage(a.rev) as l (rev)
                inner join donto.revision as tv on l.rev = tv.revision_id
                where a.now or tv.registered_at <= a.tx_from
                      or not exists (
                          select 1 from donto.document_grant as g
                          where g.document_id = a.document_id
                                and g.granted_at >= a.tx_from
                                and g.granted_at <= tv.registered_at
                                and g.login_role is distinct from a.login_role
                                and donto._owners_login(g.login_role)
                      )
            ),

            answered as (
                select xc.statement_id as claim, t.trev, t.statement_id as source, t.reason,
                       t.login_role
                from target as t
                inner join donto.extraction_block as b
                    on b.revision_id = t.trev
                       and ((b.char_start < t.char_end and t.char_start < b.char_end)
                            or (b.prefix_start < t.char_end and t.char_start < b.prefix_end))
                inner join donto.projection as p on b.projection_id = p.projection_id
                inner join donto.extraction_response as x on b.block_id = x.block_id
                inner join donto.x_claim as xc on x.response_id = xc.response_id
                where p.strategy not like 'ab/%'
            ),

            over as (
                select s.statement_id, t.statement_id as source, t.reason, t.login_role
                from target as t
                inner join donto.statement as s
                    on s.derived_from_revision = t.trev
                       and s.char_start < t.char_end and t.char_start < s.char_end
                inner join donto.context as c on s.context_id = c.context_id
                where c.iri not like 'ctx:measure/%'
                union all
                select a.claim, a.source, a.reason, a.login_role from answered as a
                union all
                select xs.statement_id, a.source, a.reason, a.login_role
                from answered as a
                inner join donto.x_standing as xs
                    on xs.revision_id = a.trev and xs.detector = 'llm-v1'
                inner join donto.statement as ss
                    on xs.statement_id = ss.statement_id
                       and ss.object_lit ->> 'claim' = a.claim::text
            )

            insert into donto.retraction (statement_id, reason, by_hand, login_role)
            select distinct on (v.statement_id)
                v.statement_id,
                pg_catalog.format('carried over from statement %s: %s', v.source, v.reason),
                true,
                v.login_role
            from over as v
            where not exists (select 1 from donto.retraction as r2
                              where r2.statement_id = v.statement_id)
            order by v.statement_id, v.source
            on conflict do nothing
        $q$;
    end if;
end;
$$;
