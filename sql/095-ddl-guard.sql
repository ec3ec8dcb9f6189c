-- The DDL guard (runs last). Outside `donto-pg migrate` and CREATE/ALTER EXTENSION, an
-- event trigger refuses to drop, alter or replace the objects of schema donto (its
-- tables, triggers, functions, views, the schema itself) unless the session opts in:
--     set donto.allow_ddl = 'on';   -- or set_config('donto.allow_ddl', 'on', true)
-- Creating a NEW table, index, sequence or type, COMMENT, GRANT and REVOKE stay
-- free. An event trigger needs a superuser: a migrate run by a non-superuser owner
-- leaves the guard out and says so in a NOTICE.
-- The event trigger function lives in a schema of its own, donto_guard: a function in
-- donto would be dropped, with its event triggers, by the very DROP SCHEMA donto CASCADE
-- it must refuse.

create schema if not exists donto_guard;

comment on schema donto_guard is
'donto-pg: the DDL guard''s event trigger function (see donto_guard.refuse_ddl).';

revoke all on schema donto_guard from public;

create or replace function donto_guard.refuse_ddl()
returns event_trigger
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Event trigger function (ddl_command_end and sql_drop): raise 42501 when a command
changes or drops an object of schema donto (or the schema itself, also under another
name), unless donto.allow_ddl is 'on' (set by donto-pg migrate and the extension
scripts for their own transaction) or the command runs inside an extension script.
Objects of other schemas, temporary objects included, are never refused.
*/
declare
    v_nsp oid := pg_catalog.to_regnamespace('donto');
    v_what text;
begin
    if coalesce(pg_catalog.current_setting('donto.allow_ddl', true), '') = 'on' then
        return;
    end if;
    if tg_event = 'sql_drop' then
        select d.object_type || ' ' || d.object_identity into v_what
        from pg_catalog.pg_event_trigger_dropped_objects() as d
        where not d.is_temporary
              and (d.schema_name = 'donto'
                   or (d.object_type = 'schema' and d.object_identity = 'donto'))
        limit 1;
    elsif tg_tag not in ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'CREATE INDEX',
                         'CREATE SEQUENCE', 'CREATE TYPE', 'COMMENT', 'GRANT', 'REVOKE') then
        select c.object_type || ' ' || c.object_identity into v_what
        from pg_catalog.pg_event_trigger_ddl_commands() as c
        where not c.in_extension
              and (c.object_type = 'schema' and exists (
                       -- the donto schema, renamed: it holds the I3 trigger function
                       select 1 from pg_catalog.pg_proc as p
                       where p.pronamespace = c.objid and p.proname = '_refuse_mutation')
                   or case c.object_type
                  when 'schema' then c.objid
                  when 'trigger' then (
                      select r.relnamespace from pg_catalog.pg_trigger as t
                      inner join pg_catalog.pg_class as r on t.tgrelid = r.oid
                      where t.oid = c.objid)
                  when 'rule' then (
                      select r.relnamespace from pg_catalog.pg_rewrite as w
                      inner join pg_catalog.pg_class as r on w.ev_class = r.oid
                      where w.oid = c.objid)
                  when 'policy' then (
                      select r.relnamespace from pg_catalog.pg_policy as y
                      inner join pg_catalog.pg_class as r on y.polrelid = r.oid
                      where y.oid = c.objid)
                  else (select n.oid from pg_catalog.pg_namespace as n
                        where n.nspname = c.schema_name)
                  end = v_nsp)
        limit 1;
    end if;
    if v_what is not null then
        raise exception 'donto: % of % is refused outside donto-pg migrate', tg_tag, v_what
            using errcode = '42501',
            hint = 'Schema changes go through donto-pg migrate or ALTER EXTENSION donto '
                   'UPDATE. To change it by hand, first: set donto.allow_ddl = ''on''.';
    end if;
end;
$$;

comment on function donto_guard.refuse_ddl() is
'Event trigger function: refuses DROP/ALTER/CREATE OR REPLACE of schema donto''s objects '
'outside donto-pg migrate and the extension scripts unless donto.allow_ddl = ''on''.';

do $$
declare
    v_owner text;
begin
    if not (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = current_user) then
        raise notice 'donto: % is not a superuser: the DDL guard (event trigger '
            'donto_guard_ddl, see donto.allow_ddl) is not installed', current_user;
        return;
    end if;
    if not exists (select 1 from pg_catalog.pg_event_trigger as e
                   where e.evtname = 'donto_guard_ddl_end') then
        create event trigger donto_guard_ddl_end on ddl_command_end
        execute function donto_guard.refuse_ddl();
    end if;
    if not exists (select 1 from pg_catalog.pg_event_trigger as e
                   where e.evtname = 'donto_guard_ddl') then
        create event trigger donto_guard_ddl on sql_drop
        execute function donto_guard.refuse_ddl();
    end if;
    -- Also under session_replication_role = replica.
    alter event trigger donto_guard_ddl_end enable always;
    alter event trigger donto_guard_ddl enable always;
    -- One owner, the schema donto's (sql/090-roles.sql), while a superuser: an upgrade run
    -- by another superuser made the guard that role's.
    select pg_catalog.quote_ident(r.rolname) into v_owner
    from pg_catalog.pg_namespace as n
    inner join pg_catalog.pg_roles as r on n.nspowner = r.oid
    where n.nspname = 'donto' and r.rolsuper;
    if v_owner is not null then
        execute pg_catalog.format('alter schema donto_guard owner to %s', v_owner);
        execute pg_catalog.format('alter function donto_guard.refuse_ddl() owner to %s',
                                  v_owner);
        execute pg_catalog.format('alter event trigger donto_guard_ddl_end owner to %s',
                                  v_owner);
        execute pg_catalog.format('alter event trigger donto_guard_ddl owner to %s', v_owner);
    end if;
end;
$$;
