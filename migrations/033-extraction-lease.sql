-- 033: which session is extracting which block of a run. Two `donto-pg extract` sessions of
-- one run (or two API callers) each took the pending list and asked the provider for every
-- block: the answers were stored once (ingest_extraction is idempotent per block and run),
-- the LLM calls were paid twice. A worker now takes a block's lease before it asks
-- (donto.take_extraction_block) and skips a block another live session of the run holds.
-- A lease is a row, not a lock held across the provider call: a transaction left open for
-- a call would hold the as_of horizon back, and an advisory lock any connected role can
-- take (migration 031). It counts while the backend that took it is connected (its pid and
-- start time, as donto.extraction_run_live looks for a run's session): a crashed session
-- leaves nothing held. Rows are only inserted: a lease given back is a new row (I3).

create table donto.extraction_lease (
    lease_id bigint generated always as identity primary key,
    run_id bigint not null references donto.extraction_run,
    block_id bigint not null references donto.extraction_block,
    lease_key bigint not null,
    taken boolean not null,
    backend_pid integer not null,
    backend_start timestamptz,
    login_role text default session_user,
    at timestamptz not null default clock_timestamp()
);

create index extraction_lease_key_idx on donto.extraction_lease (run_id, lease_key, lease_id);

comment on table donto.extraction_lease is
'Which session is extracting a block of a run (donto.take_extraction_block): the latest row '
'of a (run, lease_key) holds the block while it is taken and its backend is connected.';
comment on column donto.extraction_lease.lease_id is 'Order of the rows (the latest counts).';
comment on column donto.extraction_lease.run_id is 'The extraction run.';
comment on column donto.extraction_lease.block_id is 'The block the session took.';
comment on column donto.extraction_lease.lease_key is
'The block as the run extracts it: a hash of the run and the block''s span in the first '
'revision of its lineage (a span copied into a longer revision is the same block).';
comment on column donto.extraction_lease.taken is
'True: taken (the session asks the provider); false: given back (every provider failed).';
comment on column donto.extraction_lease.backend_pid is 'The backend of the session that took it.';
comment on column donto.extraction_lease.backend_start is
'That backend''s start time (null when the server did not show it: then its pid and login '
'decide whether it is connected).';
comment on column donto.extraction_lease.login_role is
'The login role of the session that filed the row (session_user).';
comment on column donto.extraction_lease.at is 'When the row was filed.';

-- A session that ends with nothing left but blocks another live session of the run holds
-- records 'handed_over' (not 'paused': nothing failed, and not 'finished': the other session
-- is still at work and records the run's end).
alter table donto.extraction_run_event
drop constraint extraction_run_event_event_check,
add constraint extraction_run_event_event_check check (event in (
    'started', 'resumed', 'paused', 'finished', 'alarm', 'failed', 'interrupted', 'handed_over'
));
