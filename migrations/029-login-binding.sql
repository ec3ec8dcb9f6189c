-- 029: a login name is bound to the role that first filed under it. Since 025-028 every row
-- names the login that filed it, and a document belongs to a login, by name; PostgreSQL
-- knows a role by its OID. A writer dropped and made again under the same name (another
-- person, or the same one) inherited every document, run, gate and arm of the old one.
-- From 029 a login's first row here binds its name to its role's OID (a row of this
-- table); a later role of that name files nothing and adds to nothing of the old one's
-- (42501) until the schema owner adopts it (donto.adopt_logins): after a restore onto
-- another server, say, where the same people log in under the same names with new OIDs.
-- Every insert into a donto table checks the session's login first (a statement-level
-- trigger, sql/020-revision.sql).

create table donto.login_binding (
    binding_id bigint generated always as identity primary key,
    login_role text not null check (pg_catalog.btrim(login_role) <> ''),
    role_oid oid not null,
    server_id bigint not null,
    owner boolean,
    reason text not null check (reason in ('first row', 'given', 'adopted', 'upgrade', 'owner')),
    bound_by text not null default session_user,
    bound_at timestamptz not null default pg_catalog.now()
);

create index login_binding_login_idx on donto.login_binding (login_role, binding_id);
-- A name is bound on first use once: two first inserts at once bind once (the second waits
-- for the first's transaction, then does nothing), and no lock another role could hold.
create unique index login_binding_first_row_idx on donto.login_binding (login_role)
where reason = 'first row';

comment on table donto.login_binding is
'Which role a login name stands for here: the latest row of a name wins. A login''s first '
'row binds it (reason ''first row''; the owner''s login too), as does the owner''s '
'donto.give_document to a login '
'never seen (''given''); donto.adopt_logins binds a name to the role that has it now '
'(''adopted''). Append-only.';
comment on column donto.login_binding.binding_id is 'Identity; the latest row of a name wins.';
comment on column donto.login_binding.login_role is 'The login name.';
comment on column donto.login_binding.role_oid is
'The OID of the role the name stands for (pg_roles.oid when it was bound; 0: no role had the '
'name when 029 bound it).';
comment on column donto.login_binding.server_id is
'The server (cluster) the OID is of: pg_control_system().system_identifier when it was bound. '
'Role OIDs are counted per cluster, and two clusters set up alike give the same OIDs: a binding '
'of another server is not this one''s.';
comment on column donto.login_binding.owner is
'Whether the role was a member of the schema''s owner when it was bound (null: unknown, a name '
'no role had at the upgrade); a role that became one since is bound again (reason owner). After '
'a restore onto another server the old owner''s name may be a writer''s there: '
'donto.adopt_logins() adopts only names whose standing is unchanged.';
comment on column donto.login_binding.reason is
'first row (the login filed its first row), given (donto.give_document to a login that had '
'filed nothing), adopted (donto.adopt_logins), upgrade (a login that had filed rows '
'before 029, bound by the migration to the role of that name then, or to OID 0 when none) or '
'owner (the bound role became a member of the schema''s owner).';
comment on column donto.login_binding.bound_by is 'The login of the session that bound it.';
comment on column donto.login_binding.bound_at is 'When (transaction time).';

-- The logins that filed rows before 029 are bound to the roles of those names now (the
-- owner's too: its session is never refused, but a writer later given its name inherits
-- nothing), so that a name made again after the upgrade is caught. A name that is no role
-- now (a dropped login) is bound to OID 0, which no role has: a role made under it later
-- inherits nothing of the old one's until the owner adopts it.
do $$
declare
    v_table regclass;
    v_names text[] := '{}';
    v_found text[];
begin
    for v_table in
        select a.attrelid::regclass
        from pg_catalog.pg_attribute as a
        inner join pg_catalog.pg_class as c on a.attrelid = c.oid
        inner join pg_catalog.pg_namespace as n on c.relnamespace = n.oid
        where n.nspname = 'donto' and c.relkind = 'r' and a.attname = 'login_role'
              and not a.attisdropped and c.relname <> 'login_binding'
    loop
        execute pg_catalog.format(
            'select coalesce(array_agg(distinct login_role), ''{}'') from %s '
            'where login_role is not null', v_table) into v_found;
        v_names := v_names || v_found;
    end loop;
    insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
    select l.name, coalesce(r.oid, 0), (pg_catalog.pg_control_system()).system_identifier,
           pg_catalog.pg_has_role(
               r.oid,
               (select ns.nspowner from pg_catalog.pg_namespace as ns where ns.nspname = 'donto'),
               'MEMBER'),
           'upgrade'
    from (select distinct pg_catalog.unnest(v_names) as name) as l
    left join pg_catalog.pg_roles as r on l.name = r.rolname
    order by l.name;
end;
$$;
