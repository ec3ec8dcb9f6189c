-- 022: a recall row names its place. donto.recall returns k places; a place is one
-- chunk row, the standing block (several statements, one place) or a block of user
-- turns (a question about what the user brought up: several of the user's own turns,
-- one place). Until now a reader told the standing block from chunk rows by its null
-- ranks; a turn block has ranks, so each row now says which place (1 .. k) it fills.
-- The functions returning donto.recall_hit (sql/050) fill it.

alter type donto.recall_hit add attribute place integer;

comment on type donto.recall_hit is
'A recall result: the statement (a chunk, or a standing statement), its revision and char '
'span [char_start, char_end), its text and valid time, the fused score, each arm''s rank '
'(null: not ranked by it) and the place (1 .. k) the row fills: a chunk row fills one, '
'the rows of the standing block or of a block of user turns share one.';
