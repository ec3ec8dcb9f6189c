-- 032: which retractions someone asked for. A statement is retracted by the database itself
-- (an append supersedes the old last window, a changed conversation its old text, newer
-- standing rules what older ones found, an unanchored claim is stored retracted) or by a
-- caller of donto.retract ("forget my password hint"). A conversation that grows is
-- projected anew where its text changed: the re-cut last window and the standing statements
-- of the longer revision are new statements, and a retraction asked for on the old ones
-- has to carry over to them (donto._carry_retractions), or the next message brings the
-- forgotten text back. The rows before this migration: in a database that comes from a
-- release (0.1.0, 0.2.0: every migration after 007 is applied in this transaction) each was
-- asked for, those releases retracting nothing of their own (donto.retract was the only
-- way): they are by hand (else what their users forgot came back with 034, 035 and
-- `donto-pg reproject`); in one made by an earlier build of this version they are marked
-- false. The column is added with that default and then given false (an UPDATE is refused
-- by I3). A release's retractions by hand are carried to the statements over their words
-- by sql/097-carry-forgetting.sql (setting carry_forgetting): the functions that do it
-- come with sql/, after the migrations.

do $$
declare
    v_release boolean := not exists (
        select 1 from donto.migration as m
        where m.name >= '008' and m.applied_at < pg_catalog.now()
    );
begin
    execute pg_catalog.format(
        'alter table donto.retraction add column by_hand boolean not null default %L',
        v_release);
    if v_release and exists (select 1 from donto.retraction) then
        insert into donto.setting (key, value) values ('carry_forgetting', 'true')
        on conflict (key) do nothing;
    end if;
end;
$$;

alter table donto.retraction alter column by_hand set default false;

comment on column donto.retraction.by_hand is
'True for a retraction asked for through donto.retract (and those carried over from one to '
'the same text of a longer revision); false for the database''s own (superseded, refused).';

create index retraction_by_hand_idx on donto.retraction (statement_id) where by_hand;
