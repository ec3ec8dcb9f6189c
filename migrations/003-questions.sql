-- 003: benchmark probing questions (BEAM) with their gold turns.

create table donto.probe_question (
    question_id bigint generated always as identity primary key,
    document_id bigint not null references donto.document,
    revision_id bigint not null references donto.revision,
    ability text not null,
    qindex integer not null,
    question text not null,
    answer text,
    gold jsonb not null default '[]',
    stale jsonb not null default '[]',
    skipped jsonb not null default '[]',
    raw jsonb not null default '{}',
    created_at timestamptz not null default now(),
    unique (revision_id, ability, qindex)
);

comment on table donto.probe_question is
'Probing questions of a benchmark conversation: gold = groups of turn ids (JSON array of arrays), '
'stale = superseded turn ids (knowledge_update), skipped = notes on ids that could not be used.';
