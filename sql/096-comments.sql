-- Comments on every column of every table and view in schema donto (\d+ shows them).
-- Tables made by frozen migrations are commented here (idempotent: run on every
-- install and upgrade). Generic names (created_at, char_start, ...) get one meaning
-- everywhere unless a table names them below; a later migration or view comments its own
-- columns (tests/db/test_foundation.py fails on a column without a comment).
-- Offsets are characters of the revision body (not bytes), everywhere.

do $$
declare
    v record;
begin
    for v in
        select c.relname, a.attname, g.note
        from (values
            ('created_at',
            'When the row was inserted (transaction time; rows are never updated).'),
            ('char_start',
            'Start of the span in the revision body, in characters (0-based, inclusive); '
            'donto.span_text(revision_id, char_start, char_end) returns it.'),
            ('char_end',
            'End of the span in the revision body, in characters (exclusive).'),
            ('revision_id',
            'The revision (donto.revision) the row belongs to.'),
            ('projection_id',
            'The projection (donto.projection) that made the row.'),
            ('statement_id',
            'The statement (donto.statement) this row describes.'),
            ('block_id',
            'The extraction block (donto.extraction_block).'),
            ('run_id',
            'The extraction run (donto.extraction_run).'),
            ('response_id',
            'The raw extractor response (donto.extraction_response).'),
            ('model_id',
            'The embedding model (donto.embedding_model).'),
            ('gate_id',
            'The A/B gate (donto.ab_gate).'),
            ('arm_id',
            'The A/B arm (donto.ab_arm).'),
            ('document_id',
            'The document (donto.document).'),
            ('context_id',
            'The context, a named graph (donto.context).'),
            ('meta',
            'Free-form metadata (JSON object).'),
            ('tsv',
            'Full-text vector of the text (every word weight D, the user''s words once more with '
            'weight A).'),
            ('turn_id',
            'The message id given by the source (BEAM id); may repeat within a revision.'),
            ('session',
            'Session number (a BEAM batch) of the turn.'),
            ('params',
            'Parameters (JSON object) of the strategy, defaults filled in.'),
            ('is_baseline',
            'True for the offline rule-based baseline extractor (not a language model).'),
            ('run_label',
            'Label of the extraction run.'),
            ('provider',
            'The LLM provider that answered (null: the baseline extractor).'),
            ('model',
            'The model that produced the response (as the provider reported it).')
        ) as g (col, note)
        inner join pg_catalog.pg_attribute as a on g.col = a.attname
        inner join pg_catalog.pg_class as c on a.attrelid = c.oid
        where
            c.relnamespace = 'donto'::regnamespace
            and c.relkind in ('r', 'v', 'm', 'p')
            and a.attnum > 0
            and not a.attisdropped
    loop
        execute pg_catalog.format(
            'comment on column donto.%I.%I is %L', v.relname, v.attname, v.note
        );
    end loop;
end;
$$;

comment on column donto.migration.name is
'File name of the applied migration (migrations/NNN-topic.sql).';
comment on column donto.migration.sha256 is
'SHA-256 (hex) of the migration file as applied; a changed file stops migrate.';
comment on column donto.migration.applied_at is
'When the migration was applied.';

comment on column donto.setting.key is
'Setting name (python_path: the directories the server''s Python imports donto_pg from).';
comment on column donto.setting.value is
'Setting value (JSON).';
comment on column donto.setting.set_at is
'When the value was last written.';

comment on column donto.document.document_id is
'Identity of the document.';
comment on column donto.document.iri is
'The document''s name, e.g. beam:100K/1 (unique, never blank).';
comment on column donto.document.meta is
'Source metadata of the document (JSON object).';

comment on column donto.revision.revision_id is
'Identity of the revision.';
comment on column donto.revision.document_id is
'The document this is a revision of.';
comment on column donto.revision.sha256 is
'SHA-256 of the whole text (32 bytes, donto.revision_body): the revision''s content address, '
'unique.';
comment on column donto.revision.body is
'The canonical text, immutable, when the revision is stored whole; null for a revision '
'stored as a skip-delta (body_tail): read the text with donto.revision_body or '
'donto.span_text. Every offset in the schema counts characters of the whole text.';
comment on column donto.revision.body_chars is
'Length of the whole text in characters (not bytes), however it is stored.';
comment on column donto.revision.body_base is
'For a revision stored as a skip-delta (migration 038): the earlier revision of the same '
'chain of appends whose whole text is this text''s prefix (the one at index '
'body_chain_index & (body_chain_index - 1), the chain''s root for 0); null when stored '
'whole.';
comment on column donto.revision.body_tail is
'For a revision stored as a skip-delta: its text after that of body_base (the text is '
'donto.revision_body(body_base) || body_tail); null when stored whole.';
comment on column donto.revision.body_chain_root is
'For a revision stored as a skip-delta: the revision stored whole that starts its chain of '
'appends (index 0); null when stored whole (a root of its own chain).';
comment on column donto.revision.body_chain_index is
'For a revision stored as a skip-delta: its place i >= 1 in its chain of appends (the i-th '
'append on the root); its text is read from at most log2(i) + 1 tails and the root.';
comment on column donto.revision.supersedes is
'The earlier revision of the same document this one replaces, if any.';
comment on column donto.revision.meta is
'Metadata given when the revision was registered (JSON object).';
comment on column donto.revision.registered_at is
'When the revision was registered (transaction time).';

comment on column donto.turn.seq is
'Position of the message in the revision (0-based).';
comment on column donto.turn.role is
'Speaker: user, assistant or system.';
comment on column donto.turn.exchange is
'Exchange number: a user turn and the answers that follow it.';
comment on column donto.turn.time_anchor is
'Date the source gives for the message (its session), if any.';
comment on column donto.turn.header_start is
'Start of the message''s line prefix ([user #0] ...) in the body, in characters.';
comment on column donto.turn.char_start is
'Start of the message content in the body, in characters (inclusive).';
comment on column donto.turn.char_end is
'End of the message content in the body, in characters (exclusive).';

comment on column donto.context.context_id is
'Identity of the context.';
comment on column donto.context.iri is
'The context''s name, e.g. ctx:memory/episodic/beam/<conv> (unique).';
comment on column donto.context.kind is
'Kind of context (recall, claims, ...), free text.';

comment on column donto.statement.statement_id is
'Identity of the statement.';
comment on column donto.statement.subject is
'Subject of the fact (IRI or name).';
comment on column donto.statement.predicate is
'Predicate of the fact (e.g. mem:chunk/v1, or a claim''s verb).';
comment on column donto.statement.object_iri is
'Object when it is an IRI (exactly one of object_iri, object_lit is set).';
comment on column donto.statement.object_lit is
'Object when it is a literal (JSON).';
comment on column donto.statement.context_id is
'The context (named graph) the statement belongs to.';
comment on column donto.statement.valid_time is
'When the fact holds in the world (date range; (,) = always).';
comment on column donto.statement.tx_from is
'Transaction time: when the database recorded the statement.';
comment on column donto.statement.document_id is
'The document the statement derives from, if any.';
comment on column donto.statement.derived_from_revision is
'The revision the statement derives from, if any.';
comment on column donto.statement.char_start is
'Start of the evidence span in that revision, in characters (inclusive).';
comment on column donto.statement.char_end is
'End of the evidence span, in characters (exclusive).';
comment on column donto.statement.is_hypothesis is
'True when the statement is a hypothesis, not an asserted fact.';

comment on column donto.retraction.retraction_id is
'Identity of the retraction.';
comment on column donto.retraction.statement_id is
'The retracted statement (at most one retraction each).';
comment on column donto.retraction.reason is
'Why it was retracted (never blank).';
comment on column donto.retraction.tx_from is
'Transaction time of the retraction.';
comment on column donto.retraction.login_role is
'Who retracted: the login role of the session (session_user), set by the server; null for '
'retractions stored before migration 015.';
comment on column donto.retraction.session_role is
'The role the retracting session had SET (SET ROLE: one the login is a member of), null when '
'it set none (or before migration 015).';
comment on column donto.retraction.backend_pid is
'The backend process id of the retracting session (null before migration 015).';

comment on column donto.context_owner.context_id is
'The context (donto.context) owned.';
comment on column donto.context_owner.document_id is
'The document whose rows alone may be filed under the context.';
comment on column donto.context_owner.created_at is
'When the document claimed the context (its first rows there, or migration 015).';

comment on column donto.retraction_log.retraction_id is
'Identity of the retraction.';
comment on column donto.retraction_log.statement_id is
'The retracted statement.';
comment on column donto.retraction_log.subject is
'Its subject.';
comment on column donto.retraction_log.predicate is
'Its predicate.';
comment on column donto.retraction_log.context is
'The IRI of its context.';
comment on column donto.retraction_log.document is
'The IRI of its document (null for a statement of no document).';
comment on column donto.retraction_log.reason is
'Why it was retracted.';
comment on column donto.retraction_log.retracted_at is
'Transaction time of the retraction.';
comment on column donto.retraction_log.retracted_by is
'The login role that retracted it (null before migration 015).';
comment on column donto.retraction_log.retracted_as is
'The role that session had SET, if any.';
comment on column donto.retraction_log.retracted_pid is
'The backend pid of that session.';

comment on column donto.projection.projection_id is
'Identity of the projection.';
comment on column donto.projection.revision_id is
'The revision projected.';
comment on column donto.projection.kind is
'recall (projection A) or extraction (projection B).';
comment on column donto.projection.strategy is
'How the revision was cut (e.g. window, segment).';
comment on column donto.projection.context_id is
'The context the projection''s statements go to.';

comment on column donto.x_memory_record.statement_id is
'The recall chunk statement (mem:chunk/v1).';
comment on column donto.x_memory_record.chunk_index is
'Position of the chunk in its projection (0-based).';

comment on column donto.x_memory_lexical.statement_id is
'The recall chunk (donto.x_memory_record).';

comment on column donto.embedding_model.model_id is
'Identity of the model.';
comment on column donto.embedding_model.name is
'Model name (e.g. all-MiniLM-L6-v2), unique.';
comment on column donto.embedding_model.source is
'Where the model was loaded from (hub name or path).';
comment on column donto.embedding_model.dimension is
'Vector dimension.';

comment on column donto.embedding.statement_id is
'The embedded recall chunk (or A/B unit, session summary).';
comment on column donto.embedding.embedding is
'The L2-normalised vector (pgvector).';

comment on column donto.probe_question.question_id is
'Identity of the question.';
comment on column donto.probe_question.document_id is
'The conversation''s document.';
comment on column donto.probe_question.revision_id is
'The revision the question is asked about.';
comment on column donto.probe_question.ability is
'BEAM ability probed (information_extraction, knowledge_update, ...).';
comment on column donto.probe_question.qindex is
'Position of the question within its ability (0-based).';
comment on column donto.probe_question.question is
'The question text.';
comment on column donto.probe_question.answer is
'The reference answer, if given.';
comment on column donto.probe_question.gold is
'Groups of turn ids that answer it (JSON array of arrays).';
comment on column donto.probe_question.stale is
'Superseded turn ids (knowledge_update), JSON array.';
comment on column donto.probe_question.skipped is
'Notes on ids that could not be used (JSON array).';
comment on column donto.probe_question.raw is
'The question as the benchmark gave it (JSON).';

comment on column donto.extraction_block.block_id is
'Identity of the block.';
comment on column donto.extraction_block.seq is
'Position of the block in its projection (0-based).';
comment on column donto.extraction_block.kind is
'dialogue, code, system or mixed (modality-pure blocks).';
comment on column donto.extraction_block.turns is
'The message parts the block covers (JSON array: seq, turn_id, role, session, date, char '
'span, split).';
comment on column donto.extraction_block.prefix_start is
'Start of the inert prefix (previous block''s last turn), in characters.';
comment on column donto.extraction_block.prefix_end is
'End of the inert prefix, in characters (exclusive).';
comment on column donto.extraction_block.prefix_turn_seq is
'Turn (seq) the prefix comes from.';
comment on column donto.extraction_block.split is
'True when the block cuts a message in parts.';
comment on column donto.extraction_block.valid_time is
'Dates of the block''s turns (date range).';

comment on column donto.prompt_template.template_id is
'Identity of the template.';
comment on column donto.prompt_template.family is
'Template family (e.g. stated_fact).';
comment on column donto.prompt_template.version is
'Template version within the family (a released one is never edited).';
comment on column donto.prompt_template.kinds is
'Block kinds routed to this family.';
comment on column donto.prompt_template.system is
'The system message.';
comment on column donto.prompt_template.preamble is
'Text before the block in the user message.';
comment on column donto.prompt_template.reminder is
'Text after the block in the user message.';
comment on column donto.prompt_template.schema_text is
'The output schema as shown to the model.';
comment on column donto.prompt_template.schema is
'The output schema (JSON Schema).';

comment on column donto.extraction_run.run_id is
'Identity of the run.';
comment on column donto.extraction_run.run_key is
'Key that makes the run resumable (unique).';
comment on column donto.extraction_run.label is
'Human label of the run (an arm).';
comment on column donto.extraction_run.providers is
'The providers used (JSON array, no keys).';
comment on column donto.extraction_run.model is
'Model requested.';
comment on column donto.extraction_run.templates is
'Pinned template versions per family (JSON object).';
comment on column donto.extraction_run.params is
'Projection B parameters of the run (JSON object).';
comment on column donto.extraction_run.started_at is
'When the run started.';

comment on column donto.extraction_run_event.event_id is
'Identity of the event.';
comment on column donto.extraction_run_event.event is
'started, resumed, paused, finished, alarm, failed, interrupted or handed_over (a session '
'ended leaving only blocks another live session of the run holds, migration 033).';
comment on column donto.extraction_run_event.detail is
'Details of the event (JSON object).';
comment on column donto.extraction_run_event.at is
'When it happened (clock time).';

comment on column donto.extraction_response.response_id is
'Identity of the response.';
comment on column donto.extraction_response.template_id is
'The prompt template used.';
comment on column donto.extraction_response.response is
'The raw response, verbatim.';
comment on column donto.extraction_response.parse_status is
'ok, empty or broken.';
comment on column donto.extraction_response.parse_error is
'Why parsing failed, if it did.';
comment on column donto.extraction_response.rejected is
'Claims rejected by validation.';
comment on column donto.extraction_response.quality_statement_id is
'The block''s quality statement (mem:chunkqual/v1).';
comment on column donto.extraction_response.summary is
'What ingesting the response did (JSON).';
comment on column donto.extraction_response.meta is
'Provider metadata (usage, finish reason; never keys).';
comment on column donto.extraction_response.received_at is
'When the response was ingested.';

comment on column donto.x_claim.statement_id is
'The claim statement.';
comment on column donto.x_claim.claim_index is
'Position of the claim in its response (0-based).';
comment on column donto.x_claim.quote is
'The evidence quote as the extractor gave it.';
comment on column donto.x_claim.turn_id is
'The turn id the extractor named, if any.';
comment on column donto.x_claim.src_chunk is
'Recall chunks (statement ids, projection A) overlapping the evidence span.';

comment on column donto.evidence_link.link_id is
'Identity of the link.';
comment on column donto.evidence_link.statement_id is
'The claim statement anchored.';
comment on column donto.evidence_link.revision_id is
'The revision the quote was found in.';
comment on column donto.evidence_link.quote is
'The quote as given.';
comment on column donto.evidence_link.method is
'How it was anchored: exact, normalized or fuzzy.';
comment on column donto.evidence_link.score is
'Anchoring score (0 to 1).';

comment on column donto.ab_arm.arm_id is
'Identity of the arm.';
comment on column donto.ab_arm.name is
'Arm name (unique).';
comment on column donto.ab_arm.strategy is
'fixed or semantic.';
comment on column donto.ab_arm.spec is
'The arm as written (e.g. fixed:window=800).';

comment on column donto.ab_unit.statement_id is
'The unit''s statement.';
comment on column donto.ab_unit.block_id is
'The extraction block of the unit (unique).';
comment on column donto.ab_unit.revision_id is
'The revision cut.';

comment on column donto.ab_gate.gate_key is
'Key of the gate (unique).';
comment on column donto.ab_gate.revisions is
'Holdout revisions measured.';
comment on column donto.ab_gate.holdout is
'The holdout conversations (JSON array).';
comment on column donto.ab_gate.k is
'The k of hit@k.';
comment on column donto.ab_gate.model_id is
'Embedding model of the recall pass.';
comment on column donto.ab_gate.recall_arm is
'Recall arm measured: vector, lexical or hybrid.';
comment on column donto.ab_gate.questions is
'Number of gold questions.';

comment on column donto.ab_baseline.baseline_id is
'Identity of the baseline.';
comment on column donto.ab_baseline.gate_id is
'The gate (one baseline each).';
comment on column donto.ab_baseline.hit is
'Baseline hit@k (0 to 1).';
comment on column donto.ab_baseline.measure is
'The measure per ability (JSON object).';

comment on column donto.ab_result.result_id is
'Identity of the result.';
comment on column donto.ab_result.result_key is
'Key of the result (unique).';
comment on column donto.ab_result.run_id is
'The extraction run of the arm.';
comment on column donto.ab_result.stage is
'measured, rejected (before the recall pass) or incomplete.';
comment on column donto.ab_result.units is
'Units the arm produced.';
comment on column donto.ab_result.quality is
'Metrics 1-4 (JSON object).';
comment on column donto.ab_result.stop_reason is
'Why it stopped, unless measured.';
comment on column donto.ab_result.recall is
'Recall hit@k when measured (JSON object).';

comment on column donto.x_session_summary.statement_id is
'The summary statement (mem:summary/session).';
comment on column donto.x_session_summary.method is
'extractive or abstractive.';
comment on column donto.x_session_summary.summarizer is
'Who summarized (a model or extractive/v1).';
comment on column donto.x_session_summary.seq_first is
'First turn (seq) of the session.';
comment on column donto.x_session_summary.seq_last is
'Last turn (seq) of the session.';
comment on column donto.x_session_summary.turn_first is
'First turn id of the session.';
comment on column donto.x_session_summary.turn_last is
'Last turn id of the session.';
comment on column donto.x_session_summary.char_start is
'Start of the session in the body (first turn''s header), in characters.';
comment on column donto.x_session_summary.char_end is
'End of the session''s last turn, in characters (exclusive).';

comment on column donto.statement_current.statement_id is
'Identity of the statement.';
comment on column donto.statement_current.subject is
'Subject of the fact.';
comment on column donto.statement_current.predicate is
'Predicate of the fact.';
comment on column donto.statement_current.object_iri is
'Object when it is an IRI.';
comment on column donto.statement_current.object_lit is
'Object when it is a literal (JSON).';
comment on column donto.statement_current.context_id is
'Context (named graph).';
comment on column donto.statement_current.valid_time is
'When the fact holds (date range).';
comment on column donto.statement_current.tx_from is
'When it was recorded.';
comment on column donto.statement_current.document_id is
'Document it derives from.';
comment on column donto.statement_current.derived_from_revision is
'Revision it derives from.';
comment on column donto.statement_current.char_start is
'Start of the evidence span, in characters.';
comment on column donto.statement_current.char_end is
'End of the evidence span, in characters (exclusive).';
comment on column donto.statement_current.is_hypothesis is
'True for a hypothesis.';

comment on column donto.question_gold_span.question_id is
'The probing question.';
comment on column donto.question_gold_span.ability is
'BEAM ability probed.';
comment on column donto.question_gold_span.turn_id is
'A gold turn id.';
comment on column donto.question_gold_span.seq is
'That turn''s position (seq).';
comment on column donto.question_gold_span.header_start is
'Start of the gold turn''s line prefix, in characters.';
comment on column donto.question_gold_span.char_start is
'Start of the gold turn''s content, in characters.';
comment on column donto.question_gold_span.char_end is
'End of the gold turn''s content, in characters (exclusive).';
comment on column donto.question_gold_span.gold_group is
'Which group of gold turns (0-based) this turn is in.';

comment on column donto.chunk_quality.document is
'The document''s IRI.';
comment on column donto.chunk_quality.seq is
'Position of the block.';
comment on column donto.chunk_quality.kind is
'Block kind.';
comment on column donto.chunk_quality.char_start is
'Start of the block, in characters.';
comment on column donto.chunk_quality.char_end is
'End of the block, in characters (exclusive).';
comment on column donto.chunk_quality.split is
'True when the block cuts a message.';
comment on column donto.chunk_quality.facts_per_chunk is
'Claims extracted from the block.';
comment on column donto.chunk_quality.anchor_rate is
'Share of its claims whose quote anchored.';
comment on column donto.chunk_quality.hypothesis_rate is
'Share of hypotheses.';
comment on column donto.chunk_quality.injection is
'1 when the response showed prompt-injection signals.';
comment on column donto.chunk_quality.fate is
'healthy, degraded or broken.';
comment on column donto.chunk_quality.parse_status is
'ok, empty or broken.';
comment on column donto.chunk_quality.quality_statement_id is
'The quality statement.';
comment on column donto.chunk_quality.quality is
'The quality vector (JSON).';
comment on column donto.chunk_quality.received_at is
'When the response was ingested.';

comment on column donto.extraction_run_status.label is
'Label of the run.';
comment on column donto.extraction_run_status.started_at is
'When the run started.';
comment on column donto.extraction_run_status.providers is
'Providers (no keys).';
comment on column donto.extraction_run_status.templates is
'Pinned template versions.';
comment on column donto.extraction_run_status.status is
'The latest event of the run.';
comment on column donto.extraction_run_status.status_detail is
'Its details.';
comment on column donto.extraction_run_status.status_at is
'When it happened.';
comment on column donto.extraction_run_status.blocks_ingested is
'Responses ingested so far.';
comment on column donto.extraction_run_status.model is
'Model requested.';

comment on column donto.claim_provenance.claim_id is
'The claim statement.';
comment on column donto.claim_provenance.subject is
'Subject of the claim.';
comment on column donto.claim_provenance.predicate is
'Predicate of the claim.';
comment on column donto.claim_provenance.object is
'Object of the claim (text).';
comment on column donto.claim_provenance.is_hypothesis is
'True for a hypothesis.';
comment on column donto.claim_provenance.valid_time is
'When the claim holds.';
comment on column donto.claim_provenance.transaction_time is
'When it was recorded.';
comment on column donto.claim_provenance.retracted is
'True when it is retracted (not a current fact).';
comment on column donto.claim_provenance.quote is
'The quote as the extractor gave it.';
comment on column donto.claim_provenance.turn_id is
'Turn id the extractor named.';
comment on column donto.claim_provenance.char_start is
'Start of the anchored evidence, in characters.';
comment on column donto.claim_provenance.char_end is
'End of the anchored evidence, in characters (exclusive).';
comment on column donto.claim_provenance.anchor_method is
'exact, normalized or fuzzy.';
comment on column donto.claim_provenance.anchor_score is
'Anchoring score (0 to 1).';
comment on column donto.claim_provenance.evidence_text is
'The evidence text taken from the revision by its character offsets.';
comment on column donto.claim_provenance.block_seq is
'Position of the block.';
comment on column donto.claim_provenance.block_kind is
'Kind of the block.';
comment on column donto.claim_provenance.document is
'The document''s IRI.';
comment on column donto.claim_provenance.context is
'The context''s IRI.';
comment on column donto.claim_provenance.prompt_family is
'Prompt template family.';
comment on column donto.claim_provenance.prompt_version is
'Prompt template version.';
comment on column donto.claim_provenance.recall_chunks is
'Recall chunks overlapping the evidence.';
comment on column donto.claim_provenance.retraction_reason is
'Why it is retracted.';
comment on column donto.claim_provenance.retracted_at is
'Transaction time of its retraction.';
comment on column donto.claim_provenance.retracted_by is
'The login role that retracted it (donto.retraction.login_role).';
comment on column donto.claim_provenance.retracted_as is
'The role the retracting session had SET (donto.retraction.session_role).';
comment on column donto.claim_provenance.retracted_pid is
'The backend pid of the retracting session.';

comment on column donto.claim_provenance.filed_by is
'The login role of the session that filed the claim (its extraction run''s login; null '
'before migration 026).';

comment on column donto.claim_provenance.filed_as is
'The role that session had SET (null: none, or before 026).';

comment on column donto.claim_provenance.filed_pid is
'The backend pid of the session that filed the claim (null before 026).';

comment on column donto.statement_current.login_role is
'The login role of the session that filed the statement (null before migration 026).';

comment on column donto.statement_current.session_role is
'The role that session had SET (null: none, or before 026).';

comment on column donto.statement_current.backend_pid is
'The backend pid of the session that filed the statement (null before 026).';

comment on column donto.ab_report.revisions is
'Holdout revisions.';
comment on column donto.ab_report.k is
'The k of hit@k.';
comment on column donto.ab_report.recall_arm is
'Recall arm measured.';
comment on column donto.ab_report.arm is
'Arm name.';
comment on column donto.ab_report.strategy is
'fixed or semantic.';
comment on column donto.ab_report.spec is
'The arm as written.';
comment on column donto.ab_report.result_id is
'The latest result.';
comment on column donto.ab_report.stage is
'measured, rejected or incomplete.';
comment on column donto.ab_report.units is
'Units produced.';
comment on column donto.ab_report.stop_reason is
'Why it stopped.';
comment on column donto.ab_report.facts_per_chunk is
'Metric 1: facts per chunk.';
comment on column donto.ab_report.median_anchor_rate is
'Metric 2: median anchor rate.';
comment on column donto.ab_report.hypothesis_rate is
'Metric 3: hypothesis rate.';
comment on column donto.ab_report.injection_rate is
'Metric 4: injection rate.';
comment on column donto.ab_report.zero_fact_rate is
'Share of units without facts.';
comment on column donto.ab_report.recall_hit is
'Recall hit@k of the arm.';
comment on column donto.ab_report.baseline_hit is
'Recall hit@k of the fixed-1,200 baseline.';
comment on column donto.ab_report.verdict is
'commit, re-prompt, re-chunk or reject (default thresholds).';
comment on column donto.ab_report.reasons is
'Why.';
comment on column donto.ab_report.quality is
'Metrics 1-4 (JSON).';
comment on column donto.ab_report.recall is
'Recall measure (JSON).';
comment on column donto.ab_report.baseline is
'Baseline measure (JSON).';

comment on column donto.session_span.seq_first is
'First turn (seq).';
comment on column donto.session_span.seq_last is
'Last turn (seq).';
comment on column donto.session_span.turn_first is
'First turn id.';
comment on column donto.session_span.turn_last is
'Last turn id.';
comment on column donto.session_span.turns is
'Number of turns.';
comment on column donto.session_span.char_start is
'Start of the session (first turn''s header), in characters.';
comment on column donto.session_span.char_end is
'End of its last turn, in characters (exclusive).';
comment on column donto.session_span.first_date is
'Earliest date of its turns.';
comment on column donto.session_span.last_date is
'Latest date of its turns.';

-- conversations that grow (migration 014)
comment on column donto.revision_extension.extends_revision_id is
'The revision this one extends: its body is a prefix of this revision''s body.';
comment on column donto.revision_extension.prefix_chars is
'Length of the shared prefix (the extended body), in characters.';
comment on column donto.projection_extension.extends_revision_id is
'The revision whose projection this one grew from.';
comment on column donto.projection_extension.from_char is
'Character offset from which the windows were cut again (the old last window''s start).';
comment on column donto.projection_extension.first_chunk_index is
'Chunk index of the first window cut again.';
comment on column donto.projection_extension.reused_chunks is
'Chunks kept from the extended revision (statement, vector and full-text vector).';
comment on column donto.projection_extension.new_chunks is
'Chunks cut for the new revision (the old last window again, and the new tail).';
comment on column donto.projection_extension.superseded_statement_id is
'The old last window''s chunk statement, retracted as superseded (null if none).';
comment on column donto.embedding_cache.sha256 is
'SHA-256 of the embedded text (a recall chunk''s text, an A/B unit''s span text).';
comment on column donto.embedding_cache.embedding is
'The vector the model gave that text: identical text is never embedded twice.';
comment on column donto.embedding_cache.trusted is
'Whether the entry is handed out (donto.cached_embeddings): true for vectors a session of the '
'schema''s owner stored (migration 023 on), false for entries cached before 023, whose '
'inserter was not recorded.';

-- internal helpers
comment on function donto._session_owns_schema() is
'Whether the session''s login role (session_user) is a member of the owner of schema donto: '
'the owner''s own session settings count as they are, a writer''s may only raise a bound.';

comment on function donto._acts_for(text) is
'Whether this session may add to a run, gate, summary or turn table of login P_LOGIN: it is '
'that login, or both are members of the schema''s owner (null counts as the owner''s, a login '
'that is no role here as nobody''s); never null; 42501 when the session''s login name stands '
'here for another role (029).';

comment on function donto._owners_login(text) is
'Whether a row login P_LOGIN filed counts as the schema owner''s: null (filed before logins '
'were recorded) or a role here that is a member of the owner; never null.';

comment on function donto._may_embed(text, bigint, bigint) is
'Whether this session may store a vector of a row login P_LOGIN filed in a document and '
'context: the owner''s session any, another only its own login''s, while it may add to the '
'document or in a measure context (027, 028); never null.';

comment on function donto._scoped_key(text) is
'An idempotency key as this session''s login files it: unchanged for the schema''s owner, '
'else behind the login (quoted).';
