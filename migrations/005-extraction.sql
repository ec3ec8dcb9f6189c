-- 005: projection B (extraction): blocks, prompt templates, runs and their
-- events, raw responses, claims with their evidence links.
-- Everything is append-only (I3): a run's status is the latest of its events,
-- a block's quality is a statement, nothing is ever updated.

create table donto.extraction_block (
    block_id bigint generated always as identity primary key,
    projection_id bigint not null references donto.projection,
    revision_id bigint not null references donto.revision,
    seq integer not null check (seq >= 0),
    kind text not null check (kind in ('dialogue', 'code', 'system', 'mixed')),
    char_start integer not null,
    char_end integer not null,
    turns jsonb not null check (pg_catalog.jsonb_typeof(turns) = 'array'),
    prefix_start integer,
    prefix_end integer,
    prefix_turn_seq integer,
    split boolean not null default false,
    valid_time daterange not null default '(,)',
    unique (projection_id, seq),
    check (0 <= char_start and char_start < char_end),
    check ((prefix_start is null) = (prefix_end is null)),
    check (
        prefix_start is null
        or (0 <= prefix_start and prefix_start <= prefix_end and prefix_end <= char_start)
    )
);

create index extraction_block_revision_idx on donto.extraction_block (revision_id, char_start);

create table donto.prompt_template (
    template_id integer generated always as identity primary key,
    family text not null check (btrim(family) <> ''),
    version text not null check (btrim(version) <> ''),
    kinds text[] not null check (pg_catalog.cardinality(kinds) > 0),
    system text not null,
    preamble text not null,
    reminder text not null,
    schema_text text not null,
    schema jsonb not null,
    created_at timestamptz not null default now(),
    unique (family, version)
);

create table donto.extraction_run (
    run_id bigint generated always as identity primary key,
    run_key text not null unique,
    label text not null check (btrim(label) <> ''),
    is_baseline boolean not null,
    providers jsonb not null check (pg_catalog.jsonb_typeof(providers) = 'array'),
    model text not null,
    templates jsonb not null check (pg_catalog.jsonb_typeof(templates) = 'object'),
    params jsonb not null default '{}',
    started_at timestamptz not null default now()
);

create table donto.extraction_run_event (
    event_id bigint generated always as identity primary key,
    run_id bigint not null references donto.extraction_run,
    event text not null check (event in (
        'started', 'resumed', 'paused', 'finished', 'alarm', 'failed', 'interrupted'
    )),
    detail jsonb not null default '{}',
    at timestamptz not null default clock_timestamp()
);

create index extraction_run_event_run_idx on donto.extraction_run_event (run_id, event_id);

create table donto.extraction_response (
    response_id bigint generated always as identity primary key,
    block_id bigint not null references donto.extraction_block,
    run_id bigint not null references donto.extraction_run,
    template_id integer not null references donto.prompt_template,
    response text not null,
    provider text,
    model text,
    parse_status text not null check (parse_status in ('ok', 'empty', 'broken')),
    parse_error text,
    rejected integer not null default 0,
    quality_statement_id bigint not null references donto.statement,
    summary jsonb not null,
    meta jsonb not null default '{}',
    received_at timestamptz not null default now(),
    unique (block_id, run_id)
);

create index extraction_response_run_idx on donto.extraction_response (run_id, response_id);

create table donto.x_claim (
    statement_id bigint primary key references donto.statement,
    response_id bigint not null references donto.extraction_response,
    block_id bigint not null references donto.extraction_block,
    run_id bigint not null references donto.extraction_run,
    claim_index integer not null check (claim_index >= 0),
    quote text,
    turn_id integer,
    src_chunk bigint[] not null default '{}',
    unique (response_id, claim_index)
);

create index x_claim_block_idx on donto.x_claim (block_id, run_id);

create table donto.evidence_link (
    link_id bigint generated always as identity primary key,
    statement_id bigint not null unique references donto.statement,
    revision_id bigint not null references donto.revision,
    char_start integer not null,
    char_end integer not null,
    quote text not null,
    method text not null check (method in ('exact', 'normalized', 'fuzzy')),
    score double precision not null check (score >= 0 and score <= 1),
    created_at timestamptz not null default now(),
    check (0 <= char_start and char_start < char_end)
);

create index evidence_link_revision_idx on donto.evidence_link (revision_id, char_start);

comment on table donto.extraction_block is
'Projection B: coherence-bounded, modality-pure extraction blocks of a revision. turns = the '
'message parts covered (seq, turn_id, role, session, date, char span, split) as metadata; '
'[prefix_start, prefix_end) = the inert prefix (previous block''s last turn), context only.';
comment on table donto.prompt_template is
'Versioned extraction prompt templates (seeded from donto_pg.render.TEMPLATES); kinds = the '
'block kinds routed to the family. A released (family, version) is never edited.';
comment on table donto.extraction_run is
'One extraction run (an arm): providers (no keys), model, pinned template versions and the '
'projection B parameters; run_key makes it resumable. Status = its latest event.';
comment on table donto.extraction_run_event is
'Status events of extraction runs (started, resumed, paused, finished, alarm, failed, '
'interrupted) with details: a status change is a new row.';
comment on table donto.extraction_response is
'Raw LLM responses, verbatim, one per (block, run), with the parse outcome, the template used '
'and the block''s quality statement (mem:chunkqual/v1).';
comment on table donto.x_claim is
'Claim overlay: one row per extracted claim statement (block, run, response, quote as given, '
'turn id) with src_chunk = the recall chunks (projection A) overlapping its evidence span.';
comment on table donto.evidence_link is
'Where a claim''s quote lies in the full revision body: char span, the quote, the anchoring '
'method (exact, normalized, fuzzy) and its score.';
