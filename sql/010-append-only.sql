-- Invariant I3: append-only (SQLSTATE DI003). No UPDATE, DELETE or TRUNCATE may change or
-- remove a fact, for any role, the owner included, also with session_replication_role =
-- replica (the triggers are ENABLE ALWAYS). Every table of schema
-- donto is a fact table except donto.setting (configuration).
-- A retraction is a new row (donto.retract); "current" and "as of" are
-- views and functions over the history.

create or replace function donto._refuse_mutation()
returns trigger
language plpgsql
set search_path to pg_catalog, pg_temp
as $$
/* Trigger body: refuses every UPDATE, DELETE and TRUNCATE on a fact table. */
begin
    raise exception 'donto invariant I3 (append-only): % on %.% is not allowed',
        tg_op, tg_table_schema, tg_table_name
        using errcode = 'DI003',
        hint = 'Facts are never changed or removed. Use donto.retract() to retract a statement.';
end;
$$;

comment on function donto._refuse_mutation() is
'Trigger function enforcing invariant I3: raises on UPDATE, DELETE and TRUNCATE.';

create or replace function donto._trigger_every_table(
    p_trigger text, p_events text, p_function text, p_except text[]
)
returns void
language plpgsql
volatile
set search_path to pg_catalog, pg_temp
as $$
/* (Re)create the statement-level trigger P_TRIGGER (BEFORE P_EVENTS, executing P_FUNCTION)
   on every table of schema donto but those named in P_EXCEPT, ENABLE ALWAYS: also under
   session_replication_role = replica (which skips ordinary triggers), so not even the
   owner with that setting gets past it. Install time; idempotent; a table added by a
   later migration is covered without being named. */
declare
    v_table regclass;
begin
    for v_table in
        select c.oid::regclass
        from pg_catalog.pg_class as c
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        where n.nspname = 'donto'
              and c.relkind in ('r', 'p')
              and c.relname <> all(p_except)
              and not c.relispartition
    loop
        execute pg_catalog.format('drop trigger if exists %I on %s', p_trigger, v_table);
        execute pg_catalog.format(
            'create trigger %I before %s on %s for each statement execute function %s()',
            p_trigger, p_events, v_table, p_function);
        execute pg_catalog.format('alter table %s enable always trigger %I', v_table, p_trigger);
    end loop;
end;
$$;

comment on function donto._trigger_every_table(text, text, text, text[]) is
'(Re)create a statement-level BEFORE trigger, ENABLE ALWAYS, on every donto table but the '
'ones named (install time).';

-- Statement-level, so even an UPDATE or DELETE that matches no row fails.
select donto._trigger_every_table(
    'i3_refuse', 'update or delete or truncate', 'donto._refuse_mutation', array['setting']
);
