-- 001: the core fact model. Documents, content-addressed revisions, turns,
-- contexts, bitemporal statements and their retractions.

create table donto.document (
    document_id bigint generated always as identity primary key,
    iri text not null unique check (btrim(iri) <> ''),
    meta jsonb not null default '{}',
    created_at timestamptz not null default now()
);

create table donto.revision (
    revision_id bigint generated always as identity primary key,
    document_id bigint not null references donto.document,
    sha256 bytea not null unique check (length(sha256) = 32),
    body text not null check (body <> ''),
    body_chars integer not null,
    supersedes bigint references donto.revision,
    meta jsonb not null default '{}',
    registered_at timestamptz not null default now()
);

-- Uncompressed out-of-line storage lets substring() read a slice of a large
-- body without detoasting all of it.
alter table donto.revision alter column body set storage external;

create index revision_document_idx on donto.revision (document_id, revision_id);

create table donto.turn (
    revision_id bigint not null references donto.revision,
    seq integer not null check (seq >= 0),
    turn_id integer,
    role text not null check (btrim(role) <> ''),
    session integer,
    exchange integer,
    time_anchor date,
    header_start integer not null,
    char_start integer not null,
    char_end integer not null,
    meta jsonb not null default '{}',
    primary key (revision_id, seq),
    check (0 <= header_start and header_start <= char_start and char_start <= char_end)
);

create index turn_turn_id_idx on donto.turn (revision_id, turn_id);

create table donto.context (
    context_id bigint generated always as identity primary key,
    iri text not null unique check (btrim(iri) <> ''),
    kind text,
    meta jsonb not null default '{}',
    created_at timestamptz not null default now()
);

create table donto.statement (
    statement_id bigint generated always as identity primary key,
    subject text not null,
    predicate text not null,
    object_iri text,
    object_lit jsonb,
    context_id bigint not null references donto.context,
    valid_time daterange not null default '(,)',
    tx_from timestamptz not null default now(),
    document_id bigint references donto.document,
    derived_from_revision bigint references donto.revision,
    char_start integer,
    char_end integer,
    is_hypothesis boolean not null default false,
    check ((object_iri is null) <> (object_lit is null)),
    check ((char_start is null) = (char_end is null)),
    check (char_start is null or (0 <= char_start and char_start <= char_end))
);

create index statement_context_idx on donto.statement (context_id, predicate);
create index statement_revision_span_idx on donto.statement (derived_from_revision, char_start);
create index statement_subject_idx on donto.statement (subject);

create table donto.retraction (
    retraction_id bigint generated always as identity primary key,
    statement_id bigint not null unique references donto.statement,
    reason text not null check (btrim(reason) <> ''),
    tx_from timestamptz not null default now()
);

create table donto.projection (
    projection_id bigint generated always as identity primary key,
    revision_id bigint not null references donto.revision,
    kind text not null check (kind in ('recall', 'extraction')),
    strategy text not null,
    params jsonb not null default '{}',
    context_id bigint not null references donto.context,
    created_at timestamptz not null default now(),
    unique (revision_id, kind, strategy, params, context_id)
);

comment on table donto.document is
'One row per source (e.g. a BEAM conversation), named by IRI such as beam:100K/1.';
comment on table donto.revision is
'Immutable canonical text of a document, content-addressed by SHA-256 of its body (unique).';
comment on table donto.turn is
'Per-message structure of a revision: turn id, role, session, exchange, date and char spans '
'(header_start = start of the line prefix; [char_start, char_end) = the message content).';
comment on table donto.context is
'Named graphs by IRI: ctx:memory/episodic/beam/<conv> (recall), ctx:claims/beam/<conv>, ...';
comment on table donto.statement is
'The fact table: subject, predicate, object (IRI or jsonb literal) in a context, with valid time, '
'transaction time (tx_from), the revision it derives from and its char span.';
comment on table donto.retraction is
'Retractions of statements (append-only: a retraction is a new row, never a delete).';
comment on table donto.projection is
'One projection of a revision (recall or extraction) under a strategy and parameters.';
