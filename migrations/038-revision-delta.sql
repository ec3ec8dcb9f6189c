-- 038: a conversation that grows no longer stores its whole text again at every append.
-- A revision that donto.extend_revision registers as the next of a chain of extensions is
-- stored as a delta: BODY is null and BODY_TAIL is the text after BODY_BASE, an earlier
-- revision of the same chain whose full text is its prefix. The chain is a full-body root
-- (index 0) and its extensions in order (index 1, 2, ...); the revision at index i has as
-- base the one at index (i & (i - 1)) (skip-deltas, as Subversion does), so its text
-- is the root and at most log2(i) + 1 tails and the chain stores O(text x log n)
-- characters. An extension of a revision that is not its chain's latest (a fork), and
-- every text donto.register_revision registers, is stored whole (the root of a chain of
-- its own). The SHA-256 is of the full
-- text as before. Read a revision's text with donto.revision_body(revision_id) or a slice
-- with donto.span_text(revision_id, start, end). Rows stored before are untouched (full
-- bodies); the append-only trigger (I3) covers the new columns as every other.

alter table donto.revision alter column body drop not null;
alter table donto.revision add column body_base bigint references donto.revision;
alter table donto.revision add column body_tail text check (body_tail <> '');
alter table donto.revision add column body_chain_root bigint references donto.revision;
alter table donto.revision add column body_chain_index integer check (body_chain_index > 0);
-- As the body: substring() of a tail reads only the slice it needs.
alter table donto.revision alter column body_tail set storage external;

alter table donto.revision add constraint revision_body_stored check (
    (
        body is not null and body_base is null and body_tail is null
        and body_chain_root is null and body_chain_index is null
    )
    or (
        body is null and body_base is not null and body_tail is not null
        and body_chain_root is not null and body_chain_index is not null
    )
);

-- The revision at index i of a chain (a base), and the chain's latest (fork or not): one
-- revision per place.
create unique index revision_body_chain_idx
on donto.revision (body_chain_root, body_chain_index)
where body_chain_root is not null;
