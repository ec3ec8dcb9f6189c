-- 032: which retractions someone asked for. A statement is retracted by the database itself
-- (an append supersedes the old last window, a changed conversation its old text, newer
-- standing rules what older ones found, an unanchored claim is stored retracted) or by a
-- caller of donto.retract ("forget my password hint"). A conversation that grows is
-- projected anew where its text changed: the re-cut last window and the standing statements
-- of the longer revision are new statements, and a retraction asked for on the old ones
-- has to carry over to them (donto._carry_retractions), or the next message brings the
-- forgotten text back. Rows before this migration are all marked false (an UPDATE is
-- refused by I3).

alter table donto.retraction add column by_hand boolean not null default false;

comment on column donto.retraction.by_hand is
'True for a retraction asked for through donto.retract (and those carried over from one to '
'the same text of a longer revision); false for the database''s own (superseded, refused).';

create index retraction_by_hand_idx on donto.retraction (statement_id) where by_hand;
