"""donto.ingest_turn_key_embeddings (a SECURITY DEFINER) attacked by a real donto_writer
login (password authentication, member of donto_writer only).

- What is not a vector of a recall key of a registered model is refused with a clear
  error (SQLSTATE class 22, or 42501 for a missing privilege) and the database is left as
  it was: a model that does not exist, the wrong dimension, ids that are not keys (null
  included), null/empty/NaN/infinite/overflowing/malformed vectors, NUL bytes, unequal
  arrays, one bad vector among good ones, a direct INSERT, a reader's call.
- A vector already filed (by the owner's donto-pg embed) is never replaced by a writer's.
- A writer's vector for another document's key is filed under that key only: the key and
  its projection, context and context owner are unchanged (writers are not per-document
  tenants: see README "Security model"; chunk vectors take the same path).
- A legitimate call as the writer stores exactly what it was given; again it adds nothing.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import errors

DIM = 3
BODY = ("[user #0] I moved to Berlin in March.\n[assistant #1] Noted: Berlin.\n"
        "[user #2] My sister keeps a grey parrot.\n[assistant #3] Noted: a parrot.\n")


def _turns(body: str) -> str:
    out, pos, seq = [], 0, 0
    for line in body.splitlines(keepends=True):
        head = line.index("] ") + 2
        out.append({"seq": seq, "turn_id": seq, "role": "user" if "[user" in line else
                    "assistant", "header_start": pos, "char_start": pos + head,
                    "char_end": pos + len(line) - 1})
        pos += len(line)
        seq += 1
    return json.dumps(out)


def _document(db, iri: str) -> list[int]:
    """Register, record turns and project a document; its recall key ids (one per user
    turn)."""
    rev = db.execute("select donto.register_revision(%s, %s)", (iri, BODY)).fetchone()[0]
    db.execute("select donto.record_turns(%s, %s::jsonb)", (rev, _turns(BODY)))
    db.execute("select donto.project_recall(%s, 60)", (rev,))
    keys = [r[0] for r in db.execute(
        "select key_id from donto.x_turn_key where revision_id = %s order by turn_seq",
        (rev,)).fetchall()]
    db.commit()
    assert len(keys) == 2
    return keys


@pytest.fixture
def keyed(db, logins):
    """(model, the writer's keys, the owner's keys, the writer's connection): a writer
    login projected one document, the owner another."""
    model = db.execute("select donto.ensure_embedding_model('test-keys-3d', 'test', %s)",
                       (DIM,)).fetchone()[0]
    db.commit()
    w = logins()[1]()
    mine, theirs = _document(w, "test:tkey/mine"), _document(db, "test:tkey/theirs")
    # the owner's donto-pg embed already filed the first key of the owner's document
    assert db.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                      (model, [theirs[0]], ["[0.5,0.5,0.5]"])).fetchone()[0] == 1
    db.commit()
    return model, mine, theirs, w


STATE = """
select (select json_agg(json_build_array(v.key_id, v.model_id, v.embedding::text)
                        order by v.key_id, v.model_id) from donto.x_turn_key_vector as v),
       (select json_agg(json_build_array(k.key_id, k.projection_id, k.revision_id,
                                         k.key_text, p.context_id, o.document_id)
                        order by k.key_id)
        from donto.x_turn_key as k
        join donto.projection as p using (projection_id)
        join donto.context_owner as o on o.context_id = p.context_id),
       (select json_agg(json_build_array(m.model_id, m.name, m.dimension)
                        order by m.model_id) from donto.embedding_model as m),
       (select count(*) from donto.statement), (select count(*) from donto.embedding)
"""


def _state(db) -> tuple:
    row = db.execute(STATE).fetchone()
    db.commit()
    return row


def test_a_writer_cannot_file_what_is_not_a_vector_of_a_key(db, keyed, logins):
    model, mine, theirs, w = keyed
    # a chunk's statement id that is no key's id (both count from 1)
    chunk = db.execute("select min(statement_id) from donto.x_memory_record where "
                       "statement_id not in (select key_id from donto.x_turn_key)"
                       ).fetchone()[0]
    nomodel = db.execute("select coalesce(max(model_id), 0) + 1000 from donto.embedding_model"
                         ).fetchone()[0]
    db.commit()
    good = "[1,0,0]"
    k = mine[0]
    attacks = [
        # (what, model, ids, vectors, SQLSTATE, message)
        ("a model that does not exist", nomodel, [k], [good], "22023", f"no model {nomodel}"),
        ("a null model", None, [k], [good], "22023", "no model"),
        ("too few dimensions", model, [k], ["[1,0]"], "22023", "does not have 3 dimensions"),
        ("too many dimensions", model, [k], ["[1,0,0,0]"], "22023",
         "does not have 3 dimensions"),
        ("one bad vector among good ones", model, [mine[0], mine[1]], [good, "[1,0]"],
         "22023", "does not have 3 dimensions"),
        ("a chunk, not a key", model, [chunk], [good], "22023", "not a recall key"),
        ("an id that is nothing", model, [-1], [good], "22023", "not a recall key"),
        ("a null id", model, [None], [good], "22023", "not a recall key"),
        ("a null id after a good one", model, [k, None], [good, good], "22023",
         "not a recall key"),
        ("a null vector", model, [k], [None], "22023", "not a recall key or its vector"),
        ("unequal arrays", model, [k, mine[1]], [good], "22023", "2 ids but 1 vectors"),
        ("ids and no vectors", model, [k], None, "22023", "1 ids but"),
        ("an empty vector", model, [k], ["[]"], "22000", "at least 1 dimension"),
        ("NaN", model, [k], ["[NaN,0,0]"], "22000", "NaN not allowed"),
        ("infinity", model, [k], ["[1,-Infinity,0]"], "22000", "infinite value not allowed"),
        ("a float4 overflow", model, [k], ["[1e39,0,0]"], "22003", "out of range"),
        ("SQL in the vector", model, [k], ["[1,0,0]'); alter role current_user superuser; --"],
         "22P02", "invalid input syntax for type vector"),
        ("a vector of text", model, [k], ["hello"], "22P02", "invalid input syntax"),
    ]
    before = _state(db)
    for what, m, ids, vecs, code, message in attacks:
        with pytest.raises(psycopg.Error, match=message) as info:
            w.execute("select donto.ingest_turn_key_embeddings(%s::integer, %s::bigint[], "
                      "%s::text[])", (m, ids, vecs))
        assert info.value.sqlstate == code, (what, info.value.sqlstate, str(info.value))
        w.rollback()
        assert _state(db) == before, what
    # NUL: psycopg will not send it, and the server will not make one
    with pytest.raises(psycopg.DataError, match="NUL"):
        w.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                  (model, [k], ["[1,0,0]\x00"]))
    w.rollback()
    with pytest.raises(errors.ProgramLimitExceeded, match="null character not permitted"):
        w.execute("select donto.ingest_turn_key_embeddings(%s, %s, array['[1,0,0]' || chr(0)])",
                  (model, [k]))
    w.rollback()
    # no way around the function: the table is not writable, the definer is not a reader's
    with pytest.raises(errors.InsufficientPrivilege):
        w.execute("insert into donto.x_turn_key_vector (key_id, model_id, embedding) "
                  "values (%s, %s, '[1,0,0]')", (k, model))
    w.rollback()
    r = logins("donto_reader")[1]()
    with pytest.raises(errors.InsufficientPrivilege):
        r.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)", (model, [k], [good]))
    r.rollback()
    assert _state(db) == before
    # the writer stayed an ordinary role
    assert not w.execute("select rolsuper from pg_roles where rolname = session_user"
                         ).fetchone()[0]


def test_a_writer_cannot_replace_a_vector_nor_move_a_key(db, keyed, logins):
    model, mine, theirs, w = keyed
    before = _state(db)
    # the owner's keys are the owner's to embed (027): the one with a vector and the one
    # without are both refused, and nothing moves
    for key in theirs:
        with pytest.raises(errors.InsufficientPrivilege, match="filed by another login"):
            w.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                      (model, [key], ["[-1,0,0]"]))
        w.rollback()
    assert _state(db) == before
    # the writer's own key: filed under that key only, and named as the writer's
    assert w.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                     (model, [mine[1]], ["[0,1,0]"])).fetchone()[0] == 1
    w.commit()
    after = _state(db)
    assert after[1:] == before[1:]  # keys, projections, contexts, owners, models, statements
    added = [v for v in after[0] if v not in before[0]]
    assert added == [[mine[1], model, "[0,1,0]"]]
    assert db.execute("select login_role from donto.x_turn_key_vector where key_id = %s",
                      (mine[1],)).fetchone()[0] == w.info.user
    db.commit()


def test_a_writer_files_the_vectors_of_keys(db, keyed, logins):
    model, mine, theirs, w = keyed
    before = _state(db)
    vecs = ["[0.25,-1,3]", "[1,2,3.5]"]
    assert w.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                     (model, mine, vecs)).fetchone()[0] == 2
    w.commit()
    after = _state(db)
    assert [v for v in after[0] if v not in before[0]] == [
        [mine[0], model, "[0.25,-1,3]"], [mine[1], model, "[1,2,3.5]"]]
    assert after[1:] == before[1:]
    # again: nothing added, nothing changed (resumable)
    assert w.execute("select donto.ingest_turn_key_embeddings(%s, %s, %s)",
                     (model, mine, vecs)).fetchone()[0] == 0
    w.commit()
    assert _state(db) == after
    # empty and null arrays add nothing
    assert w.execute("select donto.ingest_turn_key_embeddings(%s, %s::bigint[], %s::text[])",
                     (model, [], [])).fetchone()[0] == 0
    assert w.execute("select donto.ingest_turn_key_embeddings(%s, null, null)",
                     (model,)).fetchone()[0] == 0
    w.commit()
    assert _state(db) == after
