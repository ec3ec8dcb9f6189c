-- 020: the projections of one context, by index. Recall looks up the searched
-- context's recall projections several times per call (its size, the lexical and
-- key arms, whether it grew); without an index each lookup read every projection
-- row, so recall's cost grew with the number of conversations stored (0.45 ms per
-- lookup at 2,005 contexts), not with the searched one's size.

create index projection_context_idx on donto.projection (context_id, kind);

comment on index donto.projection_context_idx is
'The projections of one context (recall''s per-call lookups of the searched context).';
