-- 004: recall finds the user turn before a chunk by position (exchange folding).

create index turn_revision_header_idx on donto.turn (revision_id, header_start);

comment on index donto.turn_revision_header_idx is
'Turns by position in their revision: donto.recall_by_vector looks up the user turn that opens '
'the exchange of a chunk.';
