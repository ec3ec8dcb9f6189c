-- 018: recall's exchange folding (donto.recall_by_vector) probes two indexes per
-- candidate chunk; both answer from the index alone. The latest user turn of a
-- revision that starts before a chunk ends (user turns only: one entry, no heap
-- row read), and the chunk of a projection holding a position, with its id in
-- the index (the order by position and id is the index's: no sort per probe).

create index turn_user_header_idx on donto.turn (revision_id, header_start)
where role = 'user';

comment on index donto.turn_user_header_idx is
'The user turns of a revision by header position: recall''s exchange folding (index-only).';

create index x_memory_record_projection_span_id_idx
on donto.x_memory_record (projection_id, char_start, statement_id);

comment on index donto.x_memory_record_projection_span_id_idx is
'A projection''s chunks by position, with their ids: the chunk holding a position '
'(recall''s exchange folding, donto.revision_chunks), index-only.';

-- The index of 014 on (projection_id, char_start) is a prefix of the new one.
drop index donto.x_memory_record_projection_span_idx;
