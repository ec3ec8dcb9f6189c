-- Head: runs first, on every install and upgrade, before the migrations.
-- It creates only what the migration ledger itself needs.

create schema if not exists donto;

comment on schema donto is
'donto-pg: an append-only, bitemporal memory substrate for long conversations.';

create table if not exists donto.migration (
    name text primary key,
    sha256 text not null,
    applied_at timestamptz not null default now()
);

comment on table donto.migration is
'Ledger of run-once migrations (migrations/NNN-topic.sql) '
'with the SHA-256 of each file as applied.';

create table if not exists donto.setting (
    key text primary key,
    value jsonb not null,
    set_at timestamptz not null default now()
);

comment on table donto.setting is
'Installation settings written by donto-pg migrate / extension install (e.g. python_path). '
'The only mutable table: it holds configuration, not facts.';
