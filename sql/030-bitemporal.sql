-- Bitemporality: valid time (statement.valid_time) and transaction time
-- (statement.tx_from, retraction.tx_from). Retractions are new rows.

create or replace function donto.retract(statement_id bigint, reason text)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Append a retraction of a statement; retracting twice returns the first retraction.
   The row records who retracted (column defaults, filled by the server, never from
   arguments): the login role (session_user), the role the session SET (current_user is
   the owner here), the backend pid and the transaction time (tx_from). A session
   retracts a statement of a document it may add to (donto._check_document_writer,
   42501), or one it filed in an A/B arm's measure context. The row is marked by_hand:
   when the conversation grows, the same text in the longer revision is retracted too
   (donto._carry_retractions). Retracting a recall chunk (mem:episodic/chunk) forgets its
   words: every current statement of the document over them, in every revision where they
   stand and every context but the A/B measures (standing statements, claims, the chunks of
   other projections, session summaries), is retracted with it, "carried over from
   statement N: <reason>" (donto._forget_in; what is filed over them later is retracted by
   the trigger donto._forget_new_statements), and recall clips them out of what it reads
   around a hit (donto._forgotten_text). A statement already retracted, carried over from
   forgotten words, that is retracted by hand keeps that retraction; the request is recorded
   (donto.retraction_request, the first one) and carried like a retraction by hand. A
   recall chunk's retraction checks the writer again once it holds the forgetting lock
   (donto._lock_forgetting), and the row records that it was the writer then (writer_then):
   a membership revoked later does not bring the words back. */
declare
    v_id bigint;
    v_sid bigint := statement_id;
    v_doc bigint;
    v_filer text;
    v_measure boolean;
    v_chunk boolean;
    v_rev bigint;
    v_asked boolean;
    v_writer boolean;
begin
    select s.document_id, s.login_role, c.iri like 'ctx:measure/%',
           s.predicate = 'mem:episodic/chunk' and s.char_start is not null
    into v_doc, v_filer, v_measure, v_chunk
    from donto.statement as s inner join donto.context as c using (context_id)
    where s.statement_id = v_sid;
    if not found then
        raise exception 'donto.retract: no statement %', v_sid using errcode = '22023';
    end if;
    -- what a session filed in a measure context (an A/B arm's) stays its own to retract;
    -- anything else only while it may add to the document (not after the owner took it)
    if not (coalesce(v_filer = session_user, false) and v_measure) then
        perform donto._check_document_writer(v_doc, 'donto.retract');
    else
        perform donto._session_login();
    end if;
    if reason is null or btrim(reason) = '' then
        raise exception 'donto.retract: a reason is required' using errcode = '22023';
    end if;
    if v_chunk and not v_measure then
        -- wait for the filings in progress in the document, and make later ones wait; then
        -- check the writer again: a give_document that committed meanwhile is seen
        perform donto._lock_forgetting(v_doc);
        perform donto._check_document_writer(v_doc, 'donto.retract');
    end if;
    -- the login was the document's writer as it retracted (recorded: a membership revoked
    -- later does not undo it, donto._forgotten_spans); null on the measure path
    v_writer := case when not (coalesce(v_filer = session_user, false) and v_measure)
                     then true end;
    insert into donto.retraction (statement_id, reason, by_hand, writer_then)
    values (v_sid, reason, true, v_writer)
    on conflict on constraint retraction_statement_id_key do nothing
    returning retraction_id into v_id;
    v_asked := v_id is not null;
    if not v_asked then
        -- already retracted, carried over from forgotten words: the request stands on its
        -- own (carried onto later texts like a retraction by hand, donto._forgotten_spans)
        insert into donto.retraction_request (statement_id, retraction_id, reason, writer_then)
        select r.statement_id, r.retraction_id, retract.reason, v_writer
        from donto.retraction as r
        where r.statement_id = v_sid and r.by_hand
              and r.reason like 'carried over from statement %'
        on conflict on constraint retraction_request_statement_id_key do nothing;
        v_asked := found;
    end if;
    if v_asked and v_chunk and not v_measure then
        -- Forgetting is about text: the words of this chunk, wherever they stand in the
        -- document's revisions (donto._forgotten_spans maps them), leave every statement.
        for v_rev in
            select r.revision_id from donto.revision as r
            where r.document_id = v_doc
                  and exists (select 1 from donto.statement as s
                              where s.derived_from_revision = r.revision_id)
            order by r.revision_id
        loop
            perform donto._forget_in(v_rev, null);
        end loop;
    end if;
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

create or replace view donto.retraction_log as
select
    r.retraction_id,
    r.statement_id,
    s.subject,
    s.predicate,
    ctx.iri as context,
    d.iri as document,
    r.reason,
    r.tx_from as retracted_at,
    r.login_role as retracted_by,
    r.session_role as retracted_as,
    r.backend_pid as retracted_pid
from donto.retraction as r
inner join donto.statement as s on r.statement_id = s.statement_id
inner join donto.context as ctx on s.context_id = ctx.context_id
left join donto.document as d on s.document_id = d.document_id;

comment on view donto.retraction_log is
'Every retraction with its statement, context and document, the reason, and who made it: '
'login role, the role the session had SET, backend pid, transaction time (null for '
'retractions stored before migration 015).';

create or replace function donto.as_of_horizon()
returns timestamptz
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The as_of horizon: the earliest transaction time that some running transaction could
still write into history. A row's tx_from (and a retraction's) is its transaction's start,
so a transaction that began at S and has not committed can still add facts or retractions
stamped S; what was known at any T >= S is not settled until it ends. The horizon is the
start of the oldest transaction still open in another session of this database whose
login can write donto rows (the owner, a superuser or a donto_writer; a donto_reader's
open transaction holds nothing back), or the present (clock_timestamp()) when there is
none; the caller's own transaction is the caller's to see. Security definer: pg_stat_activity shows another role's transaction
start only to a superuser or a member of pg_read_all_stats.
A prepared transaction (PREPARE TRANSACTION, when max_prepared_transactions > 0) of such a
login that holds a lock to write a donto table is not in pg_stat_activity and its start
time is known nowhere: while one is pending in this database the horizon is -infinity
(nothing past is settled until it is committed or rolled back).
*/
declare
    v_now timestamptz := pg_catalog.clock_timestamp();
    v_oldest timestamptz;
    v_owner oid := (select n.nspowner from pg_catalog.pg_namespace as n
                    where n.nspname = 'donto');
    v_schema oid := (select n.oid from pg_catalog.pg_namespace as n where n.nspname = 'donto');
begin
    -- A fresh view of the backends (the statistics snapshot is cached per transaction).
    perform pg_catalog.pg_stat_clear_snapshot();
    select pg_catalog.min(a.xact_start) into v_oldest
    from pg_catalog.pg_stat_activity as a
    where a.datname = pg_catalog.current_database()
          and a.pid <> pg_catalog.pg_backend_pid()
          and a.backend_type = 'client backend'
          and a.xact_start is not null
          -- only a session that can write donto rows: its login is the owner (or a
          -- superuser, a member of every role) or a donto_writer (SET ROLE reaches no
          -- role its login is not a member of)
          and (pg_catalog.pg_has_role(a.usesysid, 'donto_writer', 'MEMBER')
               or pg_catalog.pg_has_role(a.usesysid, v_owner, 'MEMBER'));
    if exists (
        select from pg_catalog.pg_prepared_xacts as x
        inner join pg_catalog.pg_roles as r on x.owner = r.rolname
        where x.database = pg_catalog.current_database()
              and (pg_catalog.pg_has_role(r.oid, 'donto_writer', 'MEMBER')
                   or pg_catalog.pg_has_role(r.oid, v_owner, 'MEMBER'))
              -- and it wrote (or may write) donto rows: it holds a lock to write a donto
              -- relation (an empty prepared transaction holds nothing back)
              -- (a prepared transaction's locks are its dummy backend's, pid null: the one
              -- holding the lock on its transaction id)
              and exists (
                  select from pg_catalog.pg_locks as t
                  inner join pg_catalog.pg_locks as l
                      on l.virtualtransaction = t.virtualtransaction and l.pid is null
                  inner join pg_catalog.pg_class as c on l.relation = c.oid
                  where t.locktype = 'transactionid' and t.transactionid = x.transaction
                        and t.pid is null
                        and l.locktype = 'relation' and c.relnamespace = v_schema
                        and l.mode not in ('AccessShareLock', 'RowShareLock'))
    ) then
        return '-infinity';
    end if;
    return least(v_now, v_oldest);
end;
$$;

comment on function donto.as_of_horizon() is
'The earliest transaction time a running transaction of another session could still change '
'(the start of the oldest open one, else now): as_of answers only for times before it.';

create or replace function donto._check_as_of(p_tx timestamptz, p_function text)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* Refuse (55000) an as_of time at or after donto.as_of_horizon(): a transaction still
   running could change what was known then, so no answer is given that could move. */
declare
    v_horizon timestamptz;
begin
    if p_tx is null then
        return;
    end if;
    if p_tx >= pg_catalog.clock_timestamp() then
        raise exception '%: transaction time % is in the future: it is not settled yet',
            p_function, p_tx
            using errcode = '55000',
                  hint = 'Ask for a past time before donto.as_of_horizon(), or for the '
                         'present without as_of.';
    end if;
    v_horizon := donto.as_of_horizon();
    if v_horizon = '-infinity' then
        raise exception '%: transaction time % is not settled yet: a prepared transaction of '
            'a login that can write donto rows is pending, and its start is not known',
            p_function, p_tx
            using errcode = '55000',
                  hint = 'COMMIT PREPARED or ROLLBACK PREPARED it (pg_prepared_xacts), then '
                         'ask again; or ask for the present without as_of.';
    end if;
    if p_tx >= v_horizon then
        raise exception '%: transaction time % is not settled yet: a transaction that began '
            'at % is still running and may still add or retract facts stamped then',
            p_function, p_tx, v_horizon
            using errcode = '55000',
                  hint = pg_catalog.format(
                      'Ask for a time before %s (donto.as_of_horizon()), or for the present '
                      'without as_of; or wait until that transaction ends (pg_stat_activity, '
                      'xact_start = %s).', v_horizon, v_horizon);
    end if;
end;
$$;

comment on function donto._check_as_of(timestamptz, text) is
'Refuse (55000) an as_of time at or after donto.as_of_horizon(), so no as_of answer moves.';

create or replace function donto.statements_as_of(tx timestamptz, valid date default null)
returns setof donto.statement
language plpgsql
volatile
set search_path to pg_catalog, pg_temp
as $$
/*
What the database knew at transaction time TX: statements recorded by then and not
retracted by then; with VALID, only those whose valid time contains that date.
TX must lie before donto.as_of_horizon() (else 55000): an answer never changes later.
*/
begin
    perform donto._check_as_of(tx, 'donto.statements_as_of');
    return query
    select s.*
    from donto.statement as s
    where s.tx_from <= tx
          and (valid is null or s.valid_time @> valid)
          and not exists (
              select 1 from donto.retraction as r
              where r.statement_id = s.statement_id and r.tx_from <= tx
          );
end;
$$;

comment on function donto.statements_as_of(timestamptz, date) is
'Bitemporal query: statements known at transaction time TX (and valid at VALID, if given); '
'TX before donto.as_of_horizon(), so the answer never moves.';
