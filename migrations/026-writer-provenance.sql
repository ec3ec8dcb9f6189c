-- 026: every row a session files on anyone's data says who filed it, as a revision (025)
-- and a retraction (015) do: the login role, the role the session had SET and the backend
-- pid, filled by column defaults on the server, never from arguments. Statements (recall
-- chunks, claims, standing statements, session summaries, quality vectors), projections,
-- extraction runs and A/B gates and results. Documents are not owned per role: a writer
-- may add to anyone's conversation, and what it adds now names the writer, not the
-- login that registered the revision. Rows stored before 026 keep null.

-- Defaults set apart from ADD COLUMN, so that the rows stored before stay null.
do $$
declare
    v_table text;
begin
    foreach v_table in array array['statement', 'projection', 'extraction_run', 'ab_gate',
                                   'ab_result'] loop
        execute pg_catalog.format(
            'alter table donto.%I add column login_role text', v_table
        );
        execute pg_catalog.format(
            'alter table donto.%I alter column login_role set default session_user', v_table
        );
        execute pg_catalog.format(
            'alter table donto.%I add column session_role text', v_table
        );
        execute pg_catalog.format(
            'alter table donto.%I alter column session_role '
            'set default nullif(pg_catalog.current_setting(''role''), ''none'')', v_table
        );
        execute pg_catalog.format(
            'alter table donto.%I add column backend_pid integer', v_table
        );
        execute pg_catalog.format(
            'alter table donto.%I alter column backend_pid '
            'set default pg_catalog.pg_backend_pid()', v_table
        );
        execute pg_catalog.format(
            'comment on column donto.%I.login_role is %L', v_table,
            'The login role of the session that filed the row (session_user; null before '
            '026).'
        );
        execute pg_catalog.format(
            'comment on column donto.%I.session_role is %L', v_table,
            'The role that session had SET when it filed the row (null: none, or before '
            '026).'
        );
        execute pg_catalog.format(
            'comment on column donto.%I.backend_pid is %L', v_table,
            'The backend pid of the session that filed the row (null before 026).'
        );
    end loop;
end;
$$;

-- A session summary is this login's per (revision, session, summarizer), unless retracted
-- (donto.own_session_summary; donto.record_session_summary serializes per revision): a
-- writer's summary under the tool's own name no longer stops the owner's.
alter table donto.x_session_summary
drop constraint x_session_summary_revision_id_session_summarizer_key;
