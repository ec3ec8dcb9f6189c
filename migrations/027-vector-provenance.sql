-- 027: vectors, recall keys and A/B arms say who filed them (the login role, the role the
-- session had SET, the backend pid: column defaults, as 025 and 026), so that a writer
-- can be held to its own. A session that is not the schema owner's stores a vector only
-- for a statement or recall key its own login filed (donto._may_embed), and an A/B arm
-- a writer registers is its own, under its name followed by @ and the login
-- (donto._arm_key): a writer who registers the owner's arm names (fixed1200,
-- projection-a) no longer stops the owner's gate, nor files the first vectors of the
-- owner's units. Rows stored before 027 keep null: the owner's.

-- Defaults set apart from ADD COLUMN, so that the rows stored before stay null.
do $$
declare
    v_table text;
begin
    foreach v_table in array array['embedding', 'x_standing_vector',
                                   'x_standing_condition_vector', 'x_turn_key',
                                   'x_turn_key_vector', 'ab_arm'] loop
        execute pg_catalog.format(
            'alter table donto.%1$I add column login_role text, add column session_role text, '
            'add column backend_pid integer; '
            'alter table donto.%1$I alter column login_role set default session_user, '
            'alter column session_role set default '
            'nullif(pg_catalog.current_setting(''role''), ''none''), '
            'alter column backend_pid set default pg_catalog.pg_backend_pid(); '
            'comment on column donto.%1$I.login_role is %2$L; '
            'comment on column donto.%1$I.session_role is %3$L; '
            'comment on column donto.%1$I.backend_pid is %4$L',
            v_table,
            'The login role of the session that filed the row (session_user; null before 027).',
            'The role that session had SET when it filed the row (null: none, or before 027).',
            'The backend pid of the session that filed the row (null before 027).'
        );
    end loop;
end;
$$;

-- A writer's arm is stored as <name>@<login>, the login with every character but a-z,
-- 0-9 and _ percent-encoded (donto._login_tag): one login's names never equal
-- another's, and the owner's names (no @) stay as they were.
alter table donto.ab_arm drop constraint ab_arm_name_check;
alter table donto.ab_arm add constraint ab_arm_name_check
check (name ~ '^[a-z0-9][a-z0-9_.-]*(@([a-z0-9_]|%[0-9A-F]{2})+)?$');
