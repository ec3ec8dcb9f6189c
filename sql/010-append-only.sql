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

do $$
declare
    v_table regclass;
begin
    for v_table in
        select c.oid::regclass
        from pg_catalog.pg_class as c
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        where n.nspname = 'donto'
              and c.relkind in ('r', 'p')
              and c.relname <> 'setting'
              and not c.relispartition
    loop
        -- Statement-level, so even an UPDATE or DELETE that matches no row fails.
        execute format('drop trigger if exists i3_refuse on %s', v_table);
        execute format(
            'create trigger i3_refuse before update or delete or truncate on %s '
            'for each statement execute function donto._refuse_mutation()', v_table);
        -- ALWAYS: also under session_replication_role = replica (which skips ordinary
        -- triggers), so not even the owner with that setting can change a fact.
        execute format('alter table %s enable always trigger i3_refuse', v_table);
    end loop;
end;
$$;
