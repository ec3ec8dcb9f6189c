-- 012: standing memory. A projection of a revision into standing statements
-- (instructions, preferences, constraints of the user), each a statement
-- (predicate mem:standing/<kind>) anchored to its turn by character offsets,
-- with an overlay row saying what it is about (the subject key that decides
-- superseding) and, per embedding model, a vector for recall's standing slots.

alter table donto.projection drop constraint projection_kind_check;
alter table donto.projection add constraint projection_kind_check
check (kind in ('recall', 'extraction', 'standing'));

create table donto.x_standing (
    statement_id bigint primary key references donto.statement,
    projection_id bigint not null references donto.projection,
    revision_id bigint not null references donto.revision,
    ord integer not null check (ord >= 0),
    kind text not null check (kind in ('instruction', 'preference', 'constraint')),
    subject_key text not null,
    turn_seq integer not null,
    turn_id integer,
    char_start integer not null,
    char_end integer not null,
    detector text not null check (btrim(detector) <> ''),
    unique (projection_id, ord),
    foreign key (revision_id, turn_seq) references donto.turn (revision_id, seq),
    check (0 <= char_start and char_start < char_end)
);

create index x_standing_revision_idx on donto.x_standing (revision_id, kind, subject_key);

create table donto.x_standing_vector (
    statement_id bigint not null references donto.x_standing,
    model_id integer not null references donto.embedding_model,
    embedding vector not null,
    primary key (statement_id, model_id)
);

comment on table donto.x_standing is
'Standing-memory overlay: one row per standing statement (mem:standing/<kind>): its projection, '
'revision, order, kind, subject key (same kind and key: the later one supersedes), the turn '
'it was said in and its char span there, and the detector that found it.';
comment on table donto.x_standing_vector is
'Vectors of standing statements per embedding model (for the standing slots of donto.recall).';
