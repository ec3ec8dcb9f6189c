-- Backup and restore of an extension database (CREATE EXTENSION donto).
--
-- pg_dump dumps the member tables of an extension EMPTY and leaves their
-- sequences at their start: the restore runs CREATE EXTENSION donto (which
-- makes the tables and seeds what the script seeds) and nothing else. So every
-- table and sequence of schema donto that holds user data is marked with
-- pg_extension_config_dump: pg_dump then dumps its rows and the sequence's
-- value. The rule enumerates the catalog, so a table added by a later
-- migration is covered without being named here. Rows the script itself seeds
-- are left out of the dump, or the restore stops at a duplicate key:
--   donto.migration        the ledger rows of the script: not dumped at all;
--   donto.writer_lock      locks taken, not data (migration 031): not dumped at all;
--   donto.prompt_template  the templates of donto._prompt_template_seed():
--                          dumped without them (others, if any, are dumped).
-- A database installed with `donto-pg migrate` has no extension: its tables are
-- ordinary tables that pg_dump dumps whole, and this file does nothing there.
-- tests/db/test_backup.py round-trips both kinds of database.

do $$
declare
    v_rel regclass;
    v_filter text;
begin
    -- pg_extension_config_dump works only inside CREATE/ALTER EXTENSION donto,
    -- which is the only way sql/ runs in a database that has the extension
    -- (donto-pg migrate refuses such a database).
    if not exists (select from pg_catalog.pg_extension where extname = 'donto') then
        return;
    end if;
    -- Release 0.2.0 marked every table, the ledger too: unmark it (leaving the
    -- extension removes a table's mark; it is a member again at once).
    if exists (
        select from pg_catalog.pg_extension
        where extname = 'donto' and 'donto.migration'::regclass = any(extconfig)
    ) then
        alter extension donto drop table donto.migration;
        alter extension donto add table donto.migration;
    end if;
    for v_rel in
        select c.oid::regclass
        from pg_catalog.pg_class as c
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        inner join pg_catalog.pg_depend as d
            on
                d.classid = 'pg_catalog.pg_class'::regclass
                and c.oid = d.objid
                and d.refclassid = 'pg_catalog.pg_extension'::regclass
                and d.deptype = 'e'
        where
            n.nspname = 'donto'
            and c.relkind in ('r', 'S')
            and c.oid <> 'donto.migration'::regclass
            and c.oid <> 'donto.writer_lock'::regclass
        order by c.relname
    loop
        v_filter := case v_rel
            when 'donto.prompt_template'::regclass then
                'where (family, version) not in '
                || '(select s.family, s.version from donto._prompt_template_seed() as s)'
            else ''
        end;
        perform pg_catalog.pg_extension_config_dump(v_rel, v_filter);
    end loop;
end;
$$;
