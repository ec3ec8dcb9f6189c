-- 028: a document belongs to a login. Until now any writer could register a new text of
-- anyone's conversation (superseding it in recall), project someone's revision again
-- into that conversation's contexts (rows, and so vectors, of its own filing that the
-- owner's recall then ranks), summarize it, extract from it and retract its statements.
-- From 028 a document is the login's that registered its first revision (025 records
-- it; a document registered before 025 is the owner's) unless the owner gave it to
-- another login (donto.give_document, a row here); only that login, its members, or the
-- schema owner's session add to it (donto._check_document_writer, 42501).

create table donto.document_grant (
    grant_id bigint generated always as identity primary key,
    document_id bigint not null references donto.document,
    login_role text not null check (pg_catalog.btrim(login_role) <> ''),
    granted_by text not null default session_user,
    granted_at timestamptz not null default pg_catalog.now()
);

create index document_grant_document_idx on donto.document_grant (document_id, grant_id);

comment on table donto.document_grant is
'Documents the schema owner gave to a login (donto.give_document): the latest row of a '
'document names the login it belongs to, instead of the login that registered its first '
'revision.';
comment on column donto.document_grant.grant_id is
'Identity; the latest grant of a document wins.';
comment on column donto.document_grant.document_id is 'The document given.';
comment on column donto.document_grant.login_role is
'The login the document belongs to from now on.';
comment on column donto.document_grant.granted_by is
'The login of the owner''s session that gave it.';
comment on column donto.document_grant.granted_at is 'When it was given (transaction time).';

-- donto._check_may_embed gained a third parameter (p_keys) after 027 first shipped it with
-- two: a database migrated in between keeps the old overload, and every two-argument call
-- is then ambiguous (42725). sql/086-standing.sql creates the current one.
drop function if exists donto._check_may_embed(text, bigint[]);

-- donto._may_embed now also asks whose the document is (sql/050-recall.sql): the one-argument
-- form of 027 goes.
drop function if exists donto._may_embed(text);
