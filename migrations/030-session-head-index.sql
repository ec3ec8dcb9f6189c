-- 030: where a session begins and ends, by index. donto.recall's session heads (sql/050)
-- ask, for an exchange among a summary question's candidates, where its session starts
-- (its first turn) and ends (its last): two probes of this index each, instead of a scan
-- of every turn of the revision.

create index turn_session_header_idx on donto.turn (revision_id, session, header_start);
