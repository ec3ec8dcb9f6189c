-- 006: the A/B gate of chunking strategies (donto-pg ab) and the session-summary
-- recall arm. Append-only like every fact table (I3): an arm's units, a gate's
-- baseline and every measured result are new rows, never updates.

create table donto.ab_arm (
    arm_id bigint generated always as identity primary key,
    name text not null unique check (name ~ '^[a-z0-9][a-z0-9_.-]*$'),
    strategy text not null check (strategy in ('fixed', 'semantic')),
    params jsonb not null check (pg_catalog.jsonb_typeof(params) = 'object'),
    spec text not null,
    created_at timestamptz not null default now()
);

create table donto.ab_unit (
    statement_id bigint primary key references donto.statement,
    arm_id bigint not null references donto.ab_arm,
    block_id bigint not null unique references donto.extraction_block,
    revision_id bigint not null references donto.revision,
    char_start integer not null,
    char_end integer not null,
    tsv tsvector not null,
    check (0 <= char_start and char_start < char_end)
);

create index ab_unit_arm_idx on donto.ab_unit (arm_id, revision_id);
create index ab_unit_tsv_idx on donto.ab_unit using gin (tsv);

create table donto.ab_gate (
    gate_id bigint generated always as identity primary key,
    gate_key text not null unique,
    revisions bigint[] not null check (pg_catalog.cardinality(revisions) > 0),
    holdout jsonb not null check (pg_catalog.jsonb_typeof(holdout) = 'array'),
    k integer not null check (k >= 1),
    model_id integer not null references donto.embedding_model,
    recall_arm text not null check (recall_arm in ('vector', 'lexical', 'hybrid')),
    questions integer not null check (questions >= 0),
    created_at timestamptz not null default now()
);

create table donto.ab_baseline (
    baseline_id bigint generated always as identity primary key,
    gate_id bigint not null unique references donto.ab_gate,
    hit double precision not null check (hit >= 0 and hit <= 1),
    measure jsonb not null check (pg_catalog.jsonb_typeof(measure) = 'object'),
    created_at timestamptz not null default now()
);

create table donto.ab_result (
    result_id bigint generated always as identity primary key,
    result_key text not null unique,
    gate_id bigint not null references donto.ab_gate,
    arm_id bigint not null references donto.ab_arm,
    run_id bigint not null references donto.extraction_run,
    stage text not null check (stage in ('measured', 'rejected', 'incomplete')),
    units integer not null check (units >= 0),
    quality jsonb not null check (pg_catalog.jsonb_typeof(quality) = 'object'),
    stop_reason text,
    recall jsonb,
    created_at timestamptz not null default now(),
    check ((stage = 'measured') = (recall is not null)),
    check (stage = 'measured' or stop_reason is not null)
);

create index ab_result_gate_arm_idx on donto.ab_result (gate_id, arm_id, result_id);

create table donto.x_session_summary (
    statement_id bigint primary key references donto.statement,
    revision_id bigint not null references donto.revision,
    session integer not null,
    method text not null check (method in ('extractive', 'abstractive')),
    summarizer text not null check (btrim(summarizer) <> ''),
    seq_first integer not null,
    seq_last integer not null,
    turn_first integer,
    turn_last integer,
    char_start integer not null,
    char_end integer not null,
    tsv tsvector not null,
    unique (revision_id, session, summarizer),
    check (seq_first <= seq_last),
    check (0 <= char_start and char_start < char_end)
);

create index x_session_summary_revision_idx on donto.x_session_summary (revision_id, session);
create index x_session_summary_tsv_idx on donto.x_session_summary using gin (tsv);

comment on table donto.ab_arm is
'A/B arms: a chunking strategy (fixed windows or the turn-coherent segmenter) with its '
'effective parameters under a unique name; its units live in contexts ctx:measure/<name>/...';
comment on table donto.ab_unit is
'The units of an A/B arm: one extraction block (projection of strategy ab/...) and the '
'mem:measure/unit statement that is its recall key, with the span and its full-text vector.';
comment on table donto.ab_gate is
'One A/B holdout: its revisions and why each was chosen, k, the embedding model, the recall '
'arm and the number of gold questions.';
comment on table donto.ab_baseline is
'The fixed-1,200 recall baseline of a gate (projection A, live, through donto.recall): hit@k '
'and its measure per ability; measured once, when the first arm survives to a recall pass.';
comment on table donto.ab_result is
'The measurement of one arm on one gate (holdout) with one extraction run: metrics 1-4 '
'(quality), stage (measured, rejected before the recall pass, incomplete), why it stopped, '
'and recall hit@k when measured. Verdicts: donto.ab_verdict.';
comment on table donto.x_session_summary is
'Session-summary recall keys: one mem:summary/session statement per (revision, session, '
'summarizer), extractive or abstractive, spanning the session''s turns.';
