-- 013: row shapes that several functions return get a name of their own, so that
-- they are declared once: donto.recall_hit (donto.recall, donto.recall_by_vector)
-- and donto.extraction_block_row (donto._extraction_blocks, donto._ab_fixed_blocks).
-- A function's return type cannot change in place, so the four functions returning
-- the old anonymous tables are dropped here; sql/ creates them again over the types.

create type donto.recall_hit as (
    statement_id bigint,
    revision_id bigint,
    char_start integer,
    char_end integer,
    chunk_text text,
    valid_time daterange,
    score double precision,
    vector_rank integer,
    lexical_rank integer
);

comment on type donto.recall_hit is
'A recall result: the chunk statement, its revision and char span [char_start, char_end), '
'its text and valid time, the fused score and each arm''s rank (null: not ranked by it).';

create type donto.extraction_block_row as (
    seq integer,
    kind text,
    char_start integer,
    char_end integer,
    turns jsonb,
    prefix_start integer,
    prefix_end integer,
    prefix_turn_seq integer,
    split boolean,
    min_date date,
    max_date date
);

comment on type donto.extraction_block_row is
'An extraction block as cut from a revision, before it is stored in donto.extraction_block: '
'order, kind, char span, message parts (turns), inert prefix span and turn, split, dates.';

drop function if exists donto.recall(text, integer, text, timestamptz, text, text, integer);
drop function if exists donto.recall_by_vector(
    vector, text, integer, text, timestamptz, text, text, integer
);
drop function if exists donto._extraction_blocks(bigint, jsonb);
drop function if exists donto._ab_fixed_blocks(bigint, integer);
