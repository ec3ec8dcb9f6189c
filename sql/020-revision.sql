-- Documents, content-addressed revisions and their turn tables.

create or replace function donto._lock(p_class text, p_key bigint)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* Take the writers' lock P_CLASS / P_KEY for the rest of this transaction: its row of
   donto.writer_lock (made the first time), locked FOR UPDATE. A second transaction taking
   the same lock waits until the first ends. Called by the donto functions that write,
   after their checks, as the owner (they are security definers): the row lock needs
   UPDATE on donto.writer_lock, which only the owner has, so no other role can take or hold
   these locks (advisory locks, used before 031, any connected role could). A write
   needs a READ COMMITTED transaction (25000 otherwise): under REPEATABLE READ or
   SERIALIZABLE the snapshot, taken before the wait, would not see the writer it waited
   for (two revisions could then supersede the same one). */
begin
    if pg_catalog.current_setting('transaction_isolation') <> 'read committed' then
        raise exception 'donto: writing needs a READ COMMITTED transaction, not %',
            pg_catalog.current_setting('transaction_isolation')
            using errcode = '25000',
                  hint = 'A snapshot taken before the wait for another writer would not see '
                         'what it wrote: call the donto functions that write in a READ '
                         'COMMITTED transaction (PostgreSQL''s default; check '
                         'default_transaction_isolation of the role, the database or '
                         'PGOPTIONS).';
    end if;
    insert into donto.writer_lock (lock_class, lock_key) values (p_class, p_key)
    on conflict do nothing;
    perform from donto.writer_lock as l
    where l.lock_class = p_class and l.lock_key = p_key
    for update;
end;
$$;

comment on function donto._lock(text, bigint) is
'Take a writers'' lock (a row of donto.writer_lock, FOR UPDATE) for this transaction; the owner '
'only (called by the donto functions that write, after their checks).';

create or replace function donto._lock_document(p_document_id bigint)
returns void
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* One writer per document at a time (the writers' lock of class document, this transaction):
   taken by donto.register_revision and the append path, so "supersedes" is well defined. */
    select donto._lock('document', p_document_id);
$$;

comment on function donto._lock_document(bigint) is
'Take the document''s writer lock (donto._lock(''document'', id)) for this transaction.';

create or replace function donto._document_iri_fault(p_iri text)
returns text
language sql
immutable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/*
Why P_IRI is not a document IRI, or null when it is: it starts with a scheme (RFC 3986:
a letter, then letters, digits, + - .), so that the contexts named after it
(<scheme>/<rest>, the first ':' made '/') are its own ('beam/100K/1' or 'beam/100K:1'
would name those of beam:100K/1), and names something after it; it has no control
characters, and at most 2,000 characters (an index entry). The one rule:
donto.register_revision applies it to a new document, donto_pg.add_* before anything.
*/
    select case
        when p_iri !~ '^[A-Za-z][A-Za-z0-9+.-]*:[^[:space:]\x01-\x1f\x7f-\x9f]'
             or p_iri ~ '[\x01-\x1f\x7f-\x9f]' or pg_catalog.char_length(p_iri) > 2000
            then 'it must start with a scheme such as chat: or file: and name something '
                 'after it (no control characters, at most 2,000 characters)'
    end;
$$;

comment on function donto._document_iri_fault(text) is
'Why a text is not a document IRI (a scheme, then what it names; no control characters; at '
'most 2,000 characters), or null.';

create or replace function donto._document_login(p_document_id bigint)
returns text
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* The login document P_DOCUMENT_ID belongs to: the latest donto.give_document grant, else
   the login that registered its first revision (null: registered before 025, the
   owner's). */
    select coalesce(
        (select g.login_role from donto.document_grant as g
         where g.document_id = p_document_id order by g.grant_id desc limit 1),
        (select r.login_role from donto.revision as r
         where r.document_id = p_document_id order by r.revision_id limit 1));
$$;

comment on function donto._document_login(bigint) is
'The login a document belongs to: the latest donto.give_document grant, else the login that '
'registered its first revision (null before 025: the owner''s). Stable.';

create or replace function donto._server_id()
returns bigint
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* This server's (cluster's) identity: pg_control_system().system_identifier, set by initdb
   and shared by its physical replicas. Role OIDs mean something only within it. */
    select (pg_catalog.pg_control_system()).system_identifier;
$$;

comment on function donto._server_id() is
'This cluster''s system identifier (role OIDs are counted per cluster). Stable.';

create or replace function donto._login_oid(p_login text)
returns oid
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* The OID of the role login name P_LOGIN is bound to here (the latest donto.login_binding
   row of the name, whichever server bound it), or null: never bound. */
    select b.role_oid from donto.login_binding as b
    where b.login_role = p_login order by b.binding_id desc limit 1;
$$;

comment on function donto._login_oid(text) is
'The OID of the role a login name is bound to (the latest donto.login_binding row), or null. '
'Stable.';

create or replace function donto._login_bound(p_login text)
returns boolean
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/* Whether the role named P_LOGIN on this server now is the role the name stands for here:
   the name is a role, and unbound, or bound on this server (donto._server_id) to that
   role's OID (donto.login_binding). False for a role of that name made after the bound one
   was dropped, or a database restored onto another server, until the owner adopts it
   (donto.adopt_logins). Never null. */
    select coalesce(
        (select coalesce(
                    (select b.role_oid = r.oid and b.server_id = donto._server_id()
                     from donto.login_binding as b where b.login_role = r.rolname
                     order by b.binding_id desc limit 1),
                    true)
         from pg_catalog.pg_roles as r where r.rolname = p_login),
        false);
$$;

comment on function donto._login_bound(text) is
'Whether the role of a login name is the one the name is bound to here, on this server (or '
'the name is unbound). Never null. Stable.';

create or replace function donto._check_session_login()
returns void
language plpgsql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Refuse (SQLSTATE 42501) a session whose login name stands here for another role: one that
filed rows under that name, was dropped, and a new role of the name made (another person,
who would inherit its documents, runs, gates and arms), or a database restored onto
another server, whose roles are other roles whatever their OIDs. The schema owner's
session is never refused. The owner adopts a name for the role that has it now:
donto.adopt_logins.
*/
declare
    v_renamed text;
begin
    if donto._session_owns_schema() or donto._login_bound(session_user) then
        return;
    end if;
    select s.renamed_to into v_renamed from donto.stale_logins() as s
    where s.login_role = session_user;
    raise exception 'login % stands here for another role (%), not for the role of this '
        'session', session_user,
        coalesce('now named ' || v_renamed, 'one dropped and made again, or of the server '
                 'this database was restored from, or a cluster upgraded by pg_upgrade')
        using errcode = '42501',
              hint = case when v_renamed is null
                  then pg_catalog.format('If it is the same login, the schema owner runs '
                                         'select * from donto.adopt_logins(array[%L]); a new '
                                         'person logs in under a new name.', session_user)
                  else pg_catalog.format('What %s filed is %s''s now: log in under a name of '
                                         'your own.', session_user, v_renamed) end;
end;
$$;

comment on function donto._check_session_login() is
'Refuse (42501) a session whose login name is bound here to another role (a name made '
'again, or a restore onto another server) until the owner adopts it. Stable.';

create or replace function donto._session_login()
returns text
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
The login of this session, checked and bound: refuse (donto._check_session_login, 42501) a
login name that stands here for another role, and bind a name never seen to this
session's role (donto.login_binding, 'first row'), the owner's too (its session is never
refused, but a writer later given its name inherits nothing of it). The owner's session
takes its own name back when the name stood for an owner's role before (after a restore
onto another cluster), and records a login that became a member of the owner. Called before every
insert of a writer's session into a donto table (donto._login_guard) and when any session
adds to a document (donto._check_document_writer, donto.register_revision).
*/
declare
    v_oid oid;
    v_owner boolean;
    v_bound boolean;
begin
    perform donto._check_session_login();
    if donto._login_oid(session_user) is null then
        select r.oid into strict v_oid from pg_catalog.pg_roles as r
        where r.rolname = session_user;
        -- Two first inserts at once bind once (login_binding_first_row_idx).
        insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
        values (session_user, v_oid, donto._server_id(), donto._session_owns_schema(),
                'first row')
        on conflict (login_role) where reason = 'first row' do nothing;
    elsif donto._session_owns_schema() then
        select b.owner into v_owner from donto.login_binding as b
        where b.login_role = session_user order by b.binding_id desc limit 1;
        v_bound := donto._login_bound(session_user);
        if not v_bound and coalesce(v_owner, false) then
            -- The owner's login name stood for an owner's role before (a restore onto
            -- another cluster): the owner's session takes it back, as adopt_logins would.
            insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
            select session_user, r.oid, donto._server_id(), true, 'adopted'
            from pg_catalog.pg_roles as r where r.rolname = session_user;
        elsif v_bound and not coalesce(v_owner, false) then
            -- A login that became a member of the owner since it was bound: on the
            -- record, so that after a restore its name is not adopted for a writer
            -- without being named.
            insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
            select session_user, r.oid, donto._server_id(), true, 'owner'
            from pg_catalog.pg_roles as r where r.rolname = session_user;
        end if;
    end if;
    return session_user;
end;
$$;

comment on function donto._session_login() is
'The session''s login, checked (42501 for another role of a bound name, never for the '
'owner''s session) and bound on first use. Volatile, security definer.';

create or replace function donto._login_guard()
returns trigger
language plpgsql
set search_path to pg_catalog, pg_temp
as $$
/* Statement-level BEFORE INSERT trigger of every donto table but the binding record, the
   migration ledger and the settings: a session that is not the owner's inserts nothing
   while its login name stands here for another role, and its first insert binds its name
   (donto._session_login). The owner's session passes as it is (its login is bound where
   it adds to a document), so that a restore's COPY writes nothing but the dump. */
begin
    if not donto._session_owns_schema() then
        perform donto._session_login();
    end if;
    return null;
end;
$$;

comment on function donto._login_guard() is
'Trigger: before a session that is not the owner''s inserts into a donto table, check and bind '
'its login (donto._session_login).';

create or replace function donto._writes_document(p_document_id bigint)
returns boolean
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/* Whether this session may add to document P_DOCUMENT_ID: the schema owner's session may
   add to any, another login to the documents of a role it is a member of (its own login,
   or a login granted to it: GRANT alice TO bob lets bob add to alice's documents), while
   the role of the document's login name is the one the name stands for here
   (donto._login_bound). Never null. (PL/pgSQL: donto._session_owns_schema comes later, in sql/050.) */
begin
    return donto._session_owns_schema()
           or coalesce((select pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER')
                               and donto._login_bound(r.rolname)
                        from pg_catalog.pg_roles as r
                        where r.rolname = donto._document_login(p_document_id)), false);
end;
$$;

comment on function donto._writes_document(bigint) is
'Whether this session may add to a document: the owner''s session any, another login those of '
'a role it is a member of (its own). Never null. Stable.';

create or replace function donto._login_writes_document(p_login text, p_document_id bigint)
returns boolean
language plpgsql
stable
set search_path to pg_catalog, pg_temp
as $$
/* Whether login P_LOGIN (the name a row recorded) may add to document P_DOCUMENT_ID now, as
   donto._writes_document says of a session: a login that counts as the owner's
   (donto._owners_login) any, another the documents of a role it is a member of, while
   both names stand for their roles here (donto._login_bound). Never null. */
begin
    return donto._owners_login(p_login)
           or coalesce((select pg_catalog.pg_has_role(l.oid, r.oid, 'MEMBER')
                               and donto._login_bound(l.rolname)
                               and donto._login_bound(r.rolname)
                        from pg_catalog.pg_roles as l
                        cross join pg_catalog.pg_roles as r
                        where l.rolname = p_login
                              and r.rolname = donto._document_login(p_document_id)), false);
end;
$$;

comment on function donto._login_writes_document(text, bigint) is
'Whether a login (by name) may add to a document now: the owner''s any, another those of a '
'role it is a member of. Never null. Stable.';

create or replace function donto._check_document_writer(p_document_id bigint, p_function text)
returns void
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
Refuse (SQLSTATE 42501, in the name of P_FUNCTION) to add to document P_DOCUMENT_ID unless
this session may (donto._writes_document): registering its texts, projecting them into its
contexts (recall, standing, extraction, summaries), extracting claims, retracting its
statements. An A/B arm's measure contexts are not the document's memory: any writer
measures there. The session's login is checked and bound first (donto._session_login).
*/
declare
    v_login text;
    v_iri text;
    v_renamed text;
begin
    perform donto._session_login();
    if not donto._writes_document(p_document_id) then
        v_login := donto._document_login(p_document_id);
        select s.renamed_to into v_renamed from donto.stale_logins() as s
        where s.login_role = v_login;
        select d.iri into v_iri from donto.document as d where d.document_id = p_document_id;
        raise exception '%: document % belongs to %, not to %', p_function, v_iri,
            coalesce(v_login, 'the owner'), session_user
            using errcode = '42501',
                  hint = case
                      when v_login is not null and not donto._login_bound(v_login)
                           and exists (select 1 from pg_catalog.pg_roles as r
                                       where r.rolname = v_login)
                      then pg_catalog.format('Login %s stands here for another role (%s): '
                               'the owner %s.', v_login,
                               coalesce('now named ' || v_renamed, 'one dropped and made again, '
                                        'or of the server this database was restored from'),
                               case when v_renamed is null
                                    then 'adopts it (donto.adopt_logins) or gives the document '
                                         'away (donto.give_document)'
                                    else pg_catalog.format('gives the document to %s '
                                         '(donto.give_document)', v_renamed) end)
                      else 'A writer adds only to its own documents: load your text under a '
                           'document IRI of your own, or ask the owner for '
                           'donto.give_document(iri, login) or a DBA for GRANT <its login> TO '
                           '<yours>.' end;
    end if;
end;
$$;

comment on function donto._check_document_writer(bigint, text) is
'Check and bind the session''s login; refuse (42501) to add to a document this session may not '
'add to (donto._writes_document). Volatile, security invoker.';

create or replace function donto.give_document(p_document_iri text, p_login text)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Give document P_DOCUMENT_IRI to login P_LOGIN (a role of this server): from now on it
belongs to that login (donto._document_login), who registers its later texts, projects,
summarizes, extracts and retracts there. Only the schema owner's session gives (42501);
an unknown document or role is 22023; a login name that stands here for another role
(donto.login_binding) is 55000 until the owner adopts it (donto.adopt_logins), and a name
never seen is bound to the role that has it now. Returns the grant's id (donto.document_grant,
append-only: every grant stays on the record).
*/
declare
    v_doc bigint;
    v_id bigint;
    v_oid oid;
begin
    if not donto._session_owns_schema() then
        raise exception 'donto.give_document: only the schema owner gives a document away, '
            'not %', session_user using errcode = '42501';
    end if;
    select d.document_id into v_doc from donto.document as d where d.iri = p_document_iri;
    if not found then
        raise exception 'donto.give_document: no document %', p_document_iri
            using errcode = '22023';
    end if;
    select r.oid into v_oid from pg_catalog.pg_roles as r where r.rolname = p_login;
    if not found then
        raise exception 'donto.give_document: no role %', coalesce(p_login, 'null')
            using errcode = '22023';
    end if;
    -- The grant is to the role that has the name now: bind a name never seen to it, and
    -- refuse a name that stands here for another role (it is adopted first, or not at all).
    if not donto._login_bound(p_login) then
        raise exception 'donto.give_document: login % stands here for another role, not '
            'for the role of that name now (donto.stale_logins)', p_login
            using errcode = '55000',
            hint = pg_catalog.format('If it is the same login: select * from '
                                     'donto.adopt_logins(array[%L]) first.', p_login);
    end if;
    if donto._login_oid(p_login) is null then
        insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
        values (p_login, v_oid, donto._server_id(), donto._owners_login(p_login), 'given');
    end if;
    insert into donto.document_grant (document_id, login_role) values (v_doc, p_login)
    returning grant_id into v_id;
    return v_id;
end;
$$;

comment on function donto.give_document(text, text) is
'Give a document to a login (owner only; recorded in donto.document_grant); returns the '
'grant''s id. Volatile, security definer.';

create or replace function donto.stale_logins()
returns table (
    login_role text, bound_oid oid, role_oid oid, other_server boolean, renamed_to text,
    was_owner boolean, owner_now boolean, bound_at timestamptz
)
language sql
stable
set search_path to pg_catalog, pg_temp
as $$
/*
The login names that stand here for a role that no longer has them (donto.login_binding):
BOUND_OID is the role the name is bound to, ROLE_OID the role of that name on this server
now (null: none), OTHER_SERVER whether the binding is of another server (a restore: its
OIDs are not this server's, even where they are equal), RENAMED_TO the name the bound role
has now when it is still a role here (ALTER ROLE ... RENAME: adopting the old name gives
what it filed to the new role of that name, not to the renamed one), WAS_OWNER whether the
bound role was a member of the schema's owner, OWNER_NOW whether the role of the name now
is (null: none; after a restore onto another server, the old owner's name may be a
writer's). Such a login files nothing and adds to nothing here until the schema owner
adopts it (donto.adopt_logins).
*/
    select b.login_role, b.role_oid, r.oid, b.server_id <> donto._server_id(),
           (select r2.rolname::text from pg_catalog.pg_roles as r2
            where r2.oid = b.role_oid and b.server_id = donto._server_id()),
           b.owner,
           pg_catalog.pg_has_role(
               r.oid,
               (select n.nspowner from pg_catalog.pg_namespace as n where n.nspname = 'donto'),
               'MEMBER'),
           b.bound_at
    from (select distinct on (lb.login_role) lb.login_role, lb.role_oid, lb.server_id,
                 lb.owner, lb.bound_at
          from donto.login_binding as lb
          order by lb.login_role, lb.binding_id desc) as b
    left join pg_catalog.pg_roles as r on b.login_role = r.rolname
    where r.oid is distinct from b.role_oid or b.server_id <> donto._server_id()
    order by b.login_role;
$$;

comment on function donto.stale_logins() is
'Login names bound here to a role that no longer has them (role_oid: the role of that name '
'now, or null; other_server: bound on the server a dump came from; renamed_to: the bound '
'role''s name now; was_owner, owner_now: whether it was, and is, a member of the schema''s '
'owner); adopt with donto.adopt_logins. Stable.';

create or replace function donto.adopt_logins(p_logins text[] default null)
returns table (adopted_login text, old_oid oid, new_oid oid)
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Bind the login names P_LOGINS (null: every name donto.stale_logins lists that is a role
now, but not one whose bound role was renamed, nor one whose standing changed, the owner's
login name now a writer's, say, or unknown: name those once checked) to the roles that
have them on this server now: their documents, runs, gates, arms
and rows are then those roles' (donto.login_binding, 'adopted'; the earlier binding stays
on the record). For the same login after a restore onto another server, or a role dropped
and made again for the same person; a new person logs in under a new name instead. Only
the schema owner's session adopts (42501); a name that is no role here is 22023. Returns
the names adopted (none: nothing was stale).
*/
declare
    v_missing text;
begin
    if not donto._session_owns_schema() then
        raise exception 'donto.adopt_logins: only the schema owner adopts a login, not %',
            session_user using errcode = '42501';
    end if;
    select l.name into v_missing
    from pg_catalog.unnest(p_logins) as l (name)
    where not exists (select 1 from pg_catalog.pg_roles as r where r.rolname = l.name)
    limit 1;
    if found then
        raise exception 'donto.adopt_logins: no role %', coalesce(v_missing, 'null')
            using errcode = '22023';
    end if;
    return query
    with stale as (
        select s.login_role, s.bound_oid, s.role_oid, s.owner_now
        from donto.stale_logins() as s
        where s.role_oid is not null
              and (s.login_role = any(p_logins)
                   or (p_logins is null and s.renamed_to is null
                       and s.was_owner is not distinct from s.owner_now))
    ), adopted as (
        insert into donto.login_binding (login_role, role_oid, server_id, owner, reason)
        select st.login_role, st.role_oid, donto._server_id(), st.owner_now, 'adopted'
        from stale as st order by st.login_role
    )
    select st.login_role, st.bound_oid, st.role_oid from stale as st order by st.login_role;
end;
$$;

comment on function donto.adopt_logins(text[]) is
'Bind login names (null: every stale one) to the roles that have them now (owner only); '
'returns the names adopted. Volatile, security definer.';

create or replace function donto._register_revision(
    document_iri text, body text, meta jsonb, p_extends bigint
)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register BODY as a revision of the document DOCUMENT_IRI and return its id: the work of
donto.register_revision (P_EXTENDS null) and of donto.extend_revision, which passes as
P_EXTENDS the revision of the document that BODY extends, checked to be a prefix of BODY
(donto._extension_fault). A new revision that extends the latest revision of a chain of
extensions (index i - 1; a revision stored whole is the root of its own chain, index 0)
is stored as index i of that chain: BODY_TAIL, the text after the revision at index
(i & (i - 1)) of the chain (BODY_BASE), and no body (skip-deltas: donto.revision_body
reads the root and at most log2(i) + 1 tails). Any other new revision (P_EXTENDS null,
or a fork: a revision that extends one which is not its chain's latest) is stored
whole. Not granted to writers: a base that is not a prefix would change what a
revision reads.

Content addressing, superseding, who may register and the IRI's scheme: as
donto.register_revision says.
*/
declare
    v_doc bigint;
    v_sha bytea;
    v_rev bigint;
    v_prev bigint;
    v_fault text;
    v_root bigint;
    v_index integer;
    v_base bigint;
    v_base_chars integer;
begin
    if document_iri is null or btrim(document_iri) = '' then
        raise exception 'donto.register_revision: document_iri is empty' using errcode = '22023';
    end if;
    if body is null or body = '' then
        raise exception 'donto.register_revision: body of % is empty', document_iri
            using errcode = '22023';
    end if;
    v_sha := pg_catalog.sha256(pg_catalog.convert_to(body, 'UTF8'));

    select r.revision_id into v_rev
    from donto.revision as r inner join donto.document as d using (document_id)
    where d.iri = document_iri and r.sha256 = v_sha;
    if found then
        return v_rev;
    end if;

    -- A new document's IRI must be one (donto._document_iri_fault); documents registered
    -- before keep their IRIs.
    if not exists (select 1 from donto.document as d where d.iri = document_iri) then
        v_fault := donto._document_iri_fault(document_iri);
        if v_fault is not null then
            raise exception 'donto.register_revision: % is not a document IRI: %',
                pg_catalog.quote_literal(pg_catalog.left(document_iri, 200)), v_fault
                using errcode = '22023', hint = 'For example chat:alice/1.';
        end if;
    end if;
    insert into donto.document (iri) values (document_iri) on conflict (iri) do nothing;
    select d.document_id into strict v_doc from donto.document as d where d.iri = document_iri;
    -- One writer per document at a time, so "supersedes" is well defined.
    perform donto._lock_document(v_doc);

    select r.revision_id into v_prev from donto.revision as r
    where r.document_id = v_doc order by r.revision_id desc limit 1;
    if v_prev is null then
        perform donto._session_login();
    else
        perform donto._check_document_writer(v_doc, 'donto.register_revision');
        -- The owner's session that registers a new text of another login's document takes
        -- it (a row of donto.document_grant, on the record): a writer who registered the
        -- owner's IRI first, with any text, keeps nothing of it once the owner loads it.
        if donto._session_owns_schema()
           and donto._document_login(v_doc) is distinct from session_user
           and not donto._owners_login(donto._document_login(v_doc)) then
            insert into donto.document_grant (document_id, login_role)
            values (v_doc, session_user);
        end if;
    end if;

    if p_extends is not null then
        -- The chain P_EXTENDS is in, its place there, and whether it is the chain's latest.
        select coalesce(r.body_chain_root, r.revision_id), coalesce(r.body_chain_index, 0)
        into v_root, v_index
        from donto.revision as r
        where r.revision_id = p_extends and r.document_id = v_doc
              and r.body_chars < pg_catalog.char_length(_register_revision.body);
        if not found then
            raise exception 'donto._register_revision: revision % is no shorter revision of %',
                p_extends, document_iri using errcode = '22023';
        end if;
        if exists (select 1 from donto.revision as r
                   where r.body_chain_root = v_root and r.body_chain_index > v_index) then
            v_root := null;  -- a fork: stored whole
        else
            v_index := v_index + 1;
            if (v_index & (v_index - 1)) = 0 then
                v_base := v_root;
            else
                select r.revision_id into strict v_base from donto.revision as r
                where r.body_chain_root = v_root
                      and r.body_chain_index = (v_index & (v_index - 1));
            end if;
            select r.body_chars into strict v_base_chars from donto.revision as r
            where r.revision_id = v_base;
        end if;
    end if;
    if v_root is null then
        insert into donto.revision (document_id, sha256, body, body_chars, supersedes, meta)
        values (v_doc, v_sha, body, pg_catalog.char_length(body), v_prev, coalesce(meta, '{}'))
        on conflict (document_id, sha256) do nothing
        returning revision_id into v_rev;
    else
        insert into donto.revision (
            document_id, sha256, body, body_chars, supersedes, meta, body_base, body_tail,
            body_chain_root, body_chain_index
        )
        values (
            v_doc, v_sha, null, pg_catalog.char_length(body), v_prev, coalesce(meta, '{}'),
            v_base, pg_catalog.substr(_register_revision.body, v_base_chars + 1), v_root,
            v_index
        )
        on conflict (document_id, sha256) do nothing
        returning revision_id into v_rev;
    end if;
    if v_rev is null then
        -- Lost a race with an identical registration: return the winner.
        select r.revision_id into strict v_rev from donto.revision as r
        where r.document_id = v_doc and r.sha256 = v_sha;
    end if;
    return v_rev;
end;
$$;

comment on function donto._register_revision(text, text, jsonb, bigint) is
'Register a revision (donto.register_revision), stored as a skip-delta on an earlier '
'revision of its chain when it extends the chain''s latest (donto.extend_revision); owner '
'only.';

create or replace function donto.register_revision(
    document_iri text, body text, meta jsonb default '{}'
)
returns bigint
language sql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Register BODY as a revision of the document DOCUMENT_IRI and return its id.
Content-addressed within the document: the id is that of SHA-256(body) among the
document's revisions; registering the same body again (also concurrently) returns the
existing id. The same body under another document is that document's own revision (a
public text registered first by somebody else blocks nobody). A different body for the
same document is a new revision that supersedes the previous one, registered only by
a session that may add to the document (donto._check_document_writer, 42501: a document
is its first registrant's); the owner's session that does so for another login's
document takes it (donto.document_grant). A new document's IRI must start with a scheme (chat:, file:,
...; 22023 otherwise). A new text is stored whole (donto._register_revision).
*/
    select donto._register_revision(document_iri, body, meta, null);
$$;

comment on function donto.register_revision(text, text, jsonb) is
'Register a body as an immutable revision of a document, content-addressed (SHA-256) within '
'the document; idempotent: the same body returns the same revision id; the same body under '
'another document is that document''s own revision.';

create or replace function donto._turn_rows(p_turns jsonb)
returns table (
    seq integer, turn_id integer, role text, session integer, exchange integer,
    time_anchor date, header_start integer, char_start integer, char_end integer, meta jsonb
)
language sql
immutable
parallel safe
security invoker
set search_path to pg_catalog, pg_temp
as $$
/* The rows of a JSON turn table (see donto.record_turns), one per array element. */
    select x.seq, x.turn_id, x.role, x.session, x.exchange, x.date, x.header_start,
           x.char_start, x.char_end, coalesce(x.meta, '{}')
    from pg_catalog.jsonb_to_recordset(p_turns) as x (
        seq integer, turn_id integer, role text, session integer, exchange integer,
        date date, header_start integer, char_start integer, char_end integer, meta jsonb
    );
$$;

comment on function donto._turn_rows(jsonb) is
'The rows of a JSON turn table {seq, turn_id, role, session, exchange, date, header_start, '
'char_start, char_end, meta} (donto.record_turns reads its argument through it).';

create or replace function donto.record_turns(p_revision_id bigint, p_turns jsonb)
returns integer
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/*
Record the turn table of a revision from a JSON array of
{seq, turn_id, role, session, exchange, date, header_start, char_start, char_end, meta}.
Spans must lie inside the body, in order and without overlap; seq runs 0..n-1.
Idempotent: recording the same table again returns its size; a different one is refused.
A turn dated before a turn before it in its session is kept, with one NOTICE naming the
first few (donto._turns_dated_back; of an extended revision, only its new turns).
Only the login that registered the revision, or the schema's owner, records a new table
(42501).
*/
declare
    v_len integer;
    v_n integer;
    v_have integer;
    v_bad text;
    v_login text;
    v_may boolean;
    v_since integer;
    v_note text;
begin
    select r.body_chars, r.login_role into v_len, v_login
    from donto.revision as r where r.revision_id = p_revision_id;
    if not found then
        raise exception 'donto.record_turns: no revision %', p_revision_id using errcode = '22023';
    end if;
    if p_turns is null or pg_catalog.jsonb_typeof(p_turns) <> 'array' then
        raise exception 'donto.record_turns: turns must be a JSON array' using errcode = '22023';
    end if;
    -- A recorded turn table never changes, so only its first recording is serialized, and
    -- only by a session that may record it: another login's call that returns the size of
    -- the table recorded holds nothing the registrant's calls wait for.
    v_may := donto._acts_for(v_login) or donto._session_owns_schema();
    if v_may and not exists (select from donto.turn as t where t.revision_id = p_revision_id) then
        perform donto._lock('turns', p_revision_id);
    end if;

    -- The rows are read from the argument each time (donto._turn_rows), never staged in
    -- a temp table: a definer must touch nothing a caller can create or shadow.
    v_n := pg_catalog.jsonb_array_length(p_turns);

    select pg_catalog.format('turn seq %s: %s', t.seq, t.problem) into v_bad
    from (
        select
            s.seq,
            case
                when s.seq is null or s.role is null or s.header_start is null
                     or s.char_start is null or s.char_end is null
                    then 'seq, role, header_start, char_start and char_end are required'
                when s.seq <> s.rn then pg_catalog.format('expected seq %s', s.rn)
                when not (0 <= s.header_start and s.header_start <= s.char_start
                          and s.char_start <= s.char_end)
                    then 'span is not ordered (header_start <= char_start <= char_end)'
                when s.char_end > v_len
                    then pg_catalog.format('span ends at %s, past the body (%s chars)',
                                           s.char_end, v_len)
                when s.header_start < s.prev_end
                    then pg_catalog.format('span overlaps the previous turn (which ends at %s)',
                                           s.prev_end)
            end as problem
        from (
            select
                t.*,
                (pg_catalog.row_number() over (order by t.seq) - 1)::integer as rn,
                pg_catalog.lag(t.char_end) over (order by t.seq) as prev_end
            from donto._turn_rows(p_turns) as t
        ) as s
    ) as t
    where t.problem is not null
    order by t.seq nulls first
    limit 1;
    if v_bad is not null then
        raise exception 'donto.record_turns: revision %: %', p_revision_id, v_bad
            using errcode = '22023';
    end if;

    select pg_catalog.count(*) into v_have from donto.turn as t where t.revision_id = p_revision_id;
    if v_have > 0 then
        if v_have = v_n and not exists (
            select t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
                   t.header_start, t.char_start, t.char_end
            from donto._turn_rows(p_turns) as t
            except
            select t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
                   t.header_start, t.char_start, t.char_end
            from donto.turn as t where t.revision_id = p_revision_id
        ) then
            return v_n;
        end if;
        raise exception 'donto.record_turns: revision % already has a different turn table',
            p_revision_id using errcode = '23505';
    end if;
    -- Who said what is part of what a revision says: only the login that registered it,
    -- or the schema's owner, gives it its turn table. A writer who would say it otherwise
    -- registers a changed text, which names the writer.
    if not v_may then
        raise exception 'donto.record_turns: revision % was registered by %, not by this '
            'login (%): its turn table is theirs to record', p_revision_id,
            coalesce(v_login, 'the schema''s owner'), session_user using errcode = '42501';
    end if;

    insert into donto.turn (revision_id, seq, turn_id, role, session, exchange, time_anchor,
                            header_start, char_start, char_end, meta)
    select p_revision_id, t.seq, t.turn_id, t.role, t.session, t.exchange, t.time_anchor,
           t.header_start, t.char_start, t.char_end, t.meta
    from donto._turn_rows(p_turns) as t;
    -- Turns dated before a turn before them in their session are kept (the conversation's
    -- order decides what supersedes what), with one NOTICE per table: of its new turns,
    -- those after the turns of the revision it extends (donto.extend_revision links it
    -- first), which were noticed when they were stored.
    select pg_catalog.count(*)::integer into v_since
    from donto.revision_extension as x
    inner join donto.turn as t on x.extends_revision_id = t.revision_id
    where x.revision_id = p_revision_id;
    select donto._turns_dated_back(coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object(
               'turn_id', t.turn_id, 'session', t.session, 'date', t.time_anchor)
               order by t.seq), '[]'), v_since)
    into v_note
    from donto._turn_rows(p_turns) as t;
    if v_note is not null then
        raise notice 'donto.record_turns: revision %: %', p_revision_id, v_note;
    end if;
    return v_n;
end;
$$;

comment on function donto.record_turns(bigint, jsonb) is
'Record the per-message structure (turn id, role, session, date, char span) of a revision; '
'validates spans; idempotent.';

create or replace function donto.ensure_context(p_iri text, p_kind text default null)
returns bigint
language plpgsql
volatile
security definer
set search_path to pg_catalog, pg_temp
as $$
/* Return the id of the context named P_IRI, creating it if needed. */
declare
    v_id bigint;
begin
    select c.context_id into v_id from donto.context as c where c.iri = p_iri;
    if found then
        return v_id;
    end if;
    insert into donto.context (iri, kind) values (p_iri, p_kind) on conflict (iri) do nothing;
    select c.context_id into strict v_id from donto.context as c where c.iri = p_iri;
    return v_id;
end;
$$;

comment on function donto.ensure_context(text, text) is
'Return the id of a named context (graph) by IRI, creating it if needed.';

create or replace function donto._claim_context(
    p_iri text, p_kind text, p_document_id bigint, p_function text
)
returns bigint
language plpgsql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The id of context P_IRI, for rows of document P_DOCUMENT_ID (called by every path that
files rows under a context). Only a session that may add to the document files there
(donto._check_document_writer; a measure context, P_KIND 'measure', is anyone's). A
context belongs to the document that filled it first (donto.context_owner); any other
document is refused (42501). The session's login is checked and bound either way
(donto._session_login). The names the donto
functions give a document's contexts (ctx:memory/..., ctx:claims/..., ctx:measure/...)
belong to that document from the start: another document may not claim one first.
*/
declare
    v_iri text;
    v_ctx bigint;
    v_owner bigint;
    v_owner_iri text;
begin
    select d.iri into strict v_iri from donto.document as d where d.document_id = p_document_id;
    if p_iri is null or btrim(p_iri) = '' then
        raise exception '%: the context is empty', p_function using errcode = '22023';
    end if;
    if p_kind <> 'measure' then
        perform donto._check_document_writer(p_document_id, p_function);
    else
        perform donto._session_login();  -- measure rows name their login too (029)
    end if;
    if (p_iri like 'ctx:memory/%' or p_iri like 'ctx:claims/%' or p_iri like 'ctx:measure/%')
       and p_iri <> all(array[
           donto.recall_context_iri(v_iri), donto.summary_context_iri(v_iri),
           donto.standing_context_iri(v_iri), donto.claims_context_iri(v_iri),
           donto.chunkqual_context_iri(v_iri)])
       and not exists (select 1 from donto.ab_arm as a
                       where donto.measure_context_iri(a.name, v_iri) = p_iri) then
        raise exception '%: context % is not one of document %''s own contexts', p_function,
            p_iri, v_iri
            using errcode = '42501',
                  hint = pg_catalog.format(
                      'Names under ctx:memory/, ctx:claims/ and ctx:measure/ belong to the '
                      'document they are made from (%s for %s); pass another name, or none.',
                      donto.recall_context_iri(v_iri), v_iri);
    end if;
    v_ctx := donto.ensure_context(p_iri, p_kind);
    insert into donto.context_owner (context_id, document_id) values (v_ctx, p_document_id)
    on conflict (context_id) do nothing;
    select o.document_id, d.iri into strict v_owner, v_owner_iri
    from donto.context_owner as o inner join donto.document as d using (document_id)
    where o.context_id = v_ctx;
    if v_owner <> p_document_id then
        raise exception '%: context % belongs to document %, not to %', p_function, p_iri,
            v_owner_iri, v_iri
            using errcode = '42501',
                  hint = 'A context holds the rows of the document that filled it first; '
                         'project this revision into a context of its own.';
    end if;
    return v_ctx;
end;
$$;

comment on function donto._claim_context(text, text, bigint, text) is
'The id of a context for rows of a document, claiming it for the document if nobody owns it; '
'refuses (42501) a context of another document, or another document''s reserved name.';

create or replace function donto._revision_pieces(p_revision_id bigint)
returns table (revision_id bigint, lo integer, hi integer)
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The pieces a revision's text is stored in: the revision, its base, its base's base, ...
   down to the revision stored whole (donto.revision.body_base); each holds the characters
   [lo, hi) of the text (its tail, or the whole body from 0). Reads no text. */
    with recursive piece as (
        select r.revision_id, r.body_base, r.body_chars as hi
        from donto.revision as r
        where r.revision_id = p_revision_id
        union all
        select r.revision_id, r.body_base, r.body_chars
        from piece inner join donto.revision as r on piece.body_base = r.revision_id
    )
    select piece.revision_id, coalesce(b.body_chars, 0), piece.hi
    from piece left join donto.revision as b on piece.body_base = b.revision_id;
$$;

comment on function donto._revision_pieces(bigint) is
'The stored pieces of a revision''s text, [lo, hi) each: the root and at most log2(i) + 1 '
'tails for the i-th revision of a chain of appends; reads no text.';

create or replace function donto.revision_body(p_revision_id bigint)
returns text
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The full text of a revision (null for no revision): its body when it is stored whole,
   else its pieces joined (donto._revision_pieces: the root and at most log2(i) + 1
   tails for the i-th revision of a chain of appends). The one reader of revision text with donto.span_text:
   donto.revision.body is null for a revision stored as a delta. */
    select case
        when r.body is not null then r.body
        else (select pg_catalog.string_agg(
                  case when x.body is null then x.body_tail else x.body end, '' order by p.lo)
              from donto._revision_pieces(r.revision_id) as p
              inner join donto.revision as x on p.revision_id = x.revision_id)
    end
    from donto.revision as r
    where r.revision_id = p_revision_id;
$$;

comment on function donto.revision_body(bigint) is
'The full text of a revision, whether stored whole or as skip-deltas (donto.revision.body is '
'null then); SHA-256 of it is the revision''s sha256.';

create or replace function donto.span_text(p_revision_id bigint, p_start integer, p_end integer)
returns text
language sql
stable
parallel safe
set search_path to pg_catalog, pg_temp
as $$
/* The exact text of [p_start, p_end) in a revision's text (0-based offsets in characters,
   not bytes). A revision stored whole is sliced as it is; of one stored as a delta
   (donto.revision_body), only the pieces that overlap the span are read, and only the
   slice of each that it needs. */
    select case
        when r.body is not null then substring(r.body from p_start + 1 for p_end - p_start)
        else coalesce(
            (select pg_catalog.string_agg(
                substring(
                    case when x.body is null then x.body_tail else x.body end
                    from greatest(p_start, p.lo) - p.lo + 1
                    for least(p_end, p.hi) - greatest(p_start, p.lo)
                ), '' order by p.lo)
             from donto._revision_pieces(r.revision_id) as p
             inner join donto.revision as x on p.revision_id = x.revision_id
             where p.lo < p_end and p.hi > p_start),
            -- no piece: as substring() of a whole body ('' or the error of a negative span)
            substring('' from 1 for p_end - p_start)
        )
    end
    from donto.revision as r
    where r.revision_id = p_revision_id;
$$;

comment on function donto.span_text(bigint, integer, integer) is
'The exact text of a revision span [start, end); offsets count characters (0-based), not '
'bytes.';

create or replace function donto._latest_revision(p_document_id bigint)
returns bigint
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The revision of document P_DOCUMENT_ID that answers: the latest one projected into a
recall context (or that a recall projection grew to), else, when none is projected
yet, the latest registered. A revision registered but never projected answers
nothing and builds nothing: appending turns (donto.append_turns, donto.extend_revision),
the loaders and donto-pg extract start from this one, as recall does
(donto._retract_superseded).
*/
    select coalesce(
        (select pg_catalog.max(x.revision_id) from (
            select p.revision_id from donto.projection as p
            inner join donto.revision as r on p.revision_id = r.revision_id
            where r.document_id = p_document_id and p.kind = 'recall'
            union all
            select pe.revision_id from donto.projection_extension as pe
            inner join donto.revision as r on pe.revision_id = r.revision_id
            where r.document_id = p_document_id
        ) as x),
        (select pg_catalog.max(r.revision_id) from donto.revision as r
         where r.document_id = p_document_id)
    );
$$;

comment on function donto._latest_revision(bigint) is
'The revision of a document that answers: the latest projected for recall, else the latest '
'registered.';

create or replace function donto.revision_lineage(p_revision_id bigint)
returns setof bigint
language sql
stable
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The revision, the revisions it extends and the revisions that extend it
(transitively, donto.revision_extension): revisions whose bodies are prefixes
of one another, so that a span of one inside the shorter body is the same text
in all. A recalled chunk kept from an earlier revision answers a question about
a later one.
*/
    with recursive
    up as (
        select $1 as rev
        union
        select x.extends_revision_id from up
        inner join donto.revision_extension as x on x.revision_id = up.rev
    ),
    down as (
        select $1 as rev
        union
        select x.revision_id from down
        inner join donto.revision_extension as x on x.extends_revision_id = down.rev
    )
    select up.rev from up
    union
    select down.rev from down;
$$;

comment on function donto.revision_lineage(bigint) is
'A revision with those it extends and those extending it (bodies that are prefixes of one '
'another): spans in the shorter body are the same text in all.';
