-- Claims as of a transaction time, next to donto.statements_as_of (sql/030-bitemporal.sql).

create or replace function donto.claims_as_of(tx timestamptz, valid date default null)
returns setof donto.claim_provenance
language sql
volatile
security invoker
set search_path to pg_catalog, pg_temp
as $$
/*
The extracted claims the database knew at transaction time TX (and, with VALID, valid on
that date): donto.claim_provenance restricted to donto.statements_as_of(TX, VALID), so the
transaction-time rule is that function's (volatile like it: it may check TX against a
horizon). Every row was a current claim at TX: retracted
is false and retraction_reason and the retracted_* columns null (a later retraction does
not show).
    select subject, predicate, object, evidence_text
    from donto.claims_as_of(now() - interval '1 day');
*/
    select
        c.claim_id,
        c.subject,
        c.predicate,
        c.object,
        c.is_hypothesis,
        c.valid_time,
        c.transaction_time,
        false as retracted,
        c.quote,
        c.turn_id,
        c.char_start,
        c.char_end,
        c.anchor_method,
        c.anchor_score,
        c.evidence_text,
        c.block_id,
        c.block_seq,
        c.block_kind,
        c.revision_id,
        c.document,
        c.context,
        c.run_id,
        c.run_label,
        c.is_baseline,
        c.provider,
        c.model,
        c.prompt_family,
        c.prompt_version,
        c.recall_chunks,
        null::text as retraction_reason,
        null::timestamptz as retracted_at,
        null::text as retracted_by,
        null::text as retracted_as,
        null::integer as retracted_pid,
        c.filed_by,
        c.filed_as,
        c.filed_pid
    from donto.claim_provenance as c
    inner join donto.statements_as_of(tx, valid) as s on c.claim_id = s.statement_id;
$$;

comment on function donto.claims_as_of(timestamptz, date) is
'Bitemporal claims: donto.claim_provenance as known at transaction time TX (valid at VALID, '
'if given), over donto.statements_as_of.';
