-- 021: the condition of a standing instruction, embedded on its own. "Always format
-- dates as MM/DD/YYYY when I ask about scheduling details" applies to questions about
-- scheduling details; its whole text is mostly about dates and formats, so a question
-- ("When is my meeting at the studio?") resembles the condition more than the
-- statement. Recall's standing slots rank a statement by both (donto._recall_standing).
-- One row per statement that names a condition (donto._standing_condition) and model.

create table donto.x_standing_condition_vector (
    statement_id bigint not null references donto.x_standing,
    model_id integer not null references donto.embedding_model,
    embedding vector not null,
    primary key (statement_id, model_id)
);

comment on table donto.x_standing_condition_vector is
'Vectors of the conditions of standing statements ("when I ask about X": X, '
'donto._standing_condition) per embedding model, for the standing slots of donto.recall.';
