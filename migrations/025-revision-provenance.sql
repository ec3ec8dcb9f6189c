-- 025: a revision records who registered it, as a retraction does (015): the login role,
-- the role the session had SET and the backend pid, filled by column defaults on the
-- server, never from arguments. Documents are not owned per role, so a writer may register
-- a changed text of anyone's conversation or append turns to it; what those turns then
-- become (chunks, standing statements, claims: each derived_from_revision) names who added
-- them. Revisions registered before 025 keep null (nobody knows who registered them).

-- Defaults set apart from ADD COLUMN, so that the rows stored before stay null.
alter table donto.revision add column login_role text;
alter table donto.revision alter column login_role set default session_user;
alter table donto.revision add column session_role text;
alter table donto.revision alter column session_role
set default nullif(pg_catalog.current_setting('role'), 'none');
alter table donto.revision add column backend_pid integer;
alter table donto.revision alter column backend_pid set default pg_catalog.pg_backend_pid();

comment on column donto.revision.login_role is
'The login role of the session that registered the revision (session_user; null before 025).';
comment on column donto.revision.session_role is
'The role that session had SET when it registered the revision (null: none, or before 025).';
comment on column donto.revision.backend_pid is
'The backend pid of the session that registered the revision (null before 025).';
