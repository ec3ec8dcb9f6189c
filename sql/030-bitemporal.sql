-- Bitemporality: valid time (statement.valid_time) and transaction time
-- (statement.tx_from, retraction.tx_from). Retractions are new rows.

create or replace function donto.retract(statement_id bigint, reason text)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Append a retraction of a statement; retracting twice returns the first retraction. */
declare
    v_id bigint;
    v_sid bigint := statement_id;
begin
    if not exists (select 1 from donto.statement as s where s.statement_id = v_sid) then
        raise exception 'donto.retract: no statement %', v_sid using errcode = '22023';
    end if;
    if reason is null or btrim(reason) = '' then
        raise exception 'donto.retract: a reason is required' using errcode = '22023';
    end if;
    insert into donto.retraction (statement_id, reason) values (v_sid, reason)
    on conflict on constraint retraction_statement_id_key do nothing
    returning retraction_id into v_id;
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

create or replace function donto.statements_as_of(tx timestamptz, valid date default null)
returns setof donto.statement
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
What the database knew at transaction time TX: statements recorded by then and not
retracted by then; with VALID, only those whose valid time contains that date.
*/
    select s.*
    from donto.statement as s
    where s.tx_from <= tx
          and (valid is null or s.valid_time @> valid)
          and not exists (
              select 1 from donto.retraction as r
              where r.statement_id = s.statement_id and r.tx_from <= tx
          );
$$;

comment on function donto.statements_as_of(timestamptz, date) is
'Bitemporal query: statements known at transaction time TX (and valid at VALID, if given).';
