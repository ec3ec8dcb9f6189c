-- 031: the writers' locks as rows only the schema's owner can lock. Until now the donto
-- functions serialized writers with advisory locks (pg_advisory_xact_lock(2056, document)
-- and sixteen more classes). Any role that can connect to the database may take any
-- advisory key, a reader or a role with no donto grant at all, and hold it for as long as
-- its session lasts: every load of that document then waited. A row of this table is
-- locked with SELECT ... FOR UPDATE, which needs UPDATE on the table, and only the owner has
-- it (sql/090): the donto functions lock as the owner (donto._lock), after their checks.
-- Rows are only ever inserted (one per class and key, the first time it is taken); an
-- UPDATE, DELETE or TRUNCATE is refused by I3's trigger like on every other table.

create table donto.writer_lock (
    lock_class text not null,
    lock_key bigint not null,
    primary key (lock_class, lock_key)
);

comment on table donto.writer_lock is
'The writers'' locks: a row per lock class and key, locked FOR UPDATE (donto._lock) for the '
'rest of the transaction by the donto function that writes (one writer per document, per '
'revision''s projection, per model''s index build, ...). Only the schema''s owner may lock '
'a row or read the table; rows are inserted the first time a key is taken and never change.';
comment on column donto.writer_lock.lock_class is
'What the lock serializes: document, turns, recall, lexical, extraction, standing, ... '
'(the callers of donto._lock).';
comment on column donto.writer_lock.lock_key is
'Which one: a document, revision, projection or model id, or a hash of a name.';
