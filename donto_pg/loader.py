"""Load BEAM conversations: one transaction per conversation.

For each conversation: its canonical text (``beam.format_chat``) becomes a
revision (``donto.register_revision``), its messages the turn table
(``donto.record_turns``), its probing questions ``donto.record_questions``,
and projection A is cut in the database (``donto.project_recall``). A longer
version of a loaded conversation (its latest revision is a prefix of the new
text) is appended instead (``donto.extend_revision``): only the new text is
cut again and embedded. A failing
conversation rolls back alone and leaves nothing behind; loading twice
creates nothing new.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import psycopg

from donto_pg import beam
from donto_pg.errors import DontoError, InputError, from_database


@dataclass
class LoadResult:
    conversation: str
    ok: bool
    revision_id: int | None = None
    new_revision: bool = False
    appended: bool = False  # a longer version of a loaded conversation: appended
    chars: int = 0
    turns: int = 0
    chunks: int = 0
    questions: int = 0
    standing: int = 0
    answering_revision: int | None = None  # recall answers from it (revision_id, but for
    # an earlier text loaded again)
    warnings: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def document_iri(conv: beam.Conversation | str) -> str:
    """The document IRI of a BEAM conversation, or of a name: a BEAM id (``100K/1``), or
    a document IRI as given to ``donto-pg add`` (``chat:alice/1``, kept as it is)."""
    if isinstance(conv, str):
        return conv if ":" in conv else f"beam:{conv}"
    return f"beam:{conv.conversation_id}"


def recall_context(conn: psycopg.Connection, conversation: beam.Conversation | str) -> str:
    """The recall context of a BEAM conversation, as the database names it
    (``donto.recall_context_iri``)."""
    return conn.execute("select donto.recall_context_iri(%s)",
                        (document_iri(conversation),)).fetchone()[0]


def check_body(body: str, where: str) -> None:
    """Refuse text PostgreSQL cannot store, with the place named."""
    nul = body.find("\x00")
    if nul >= 0:
        raise InputError(f"{where}: NUL byte at character {nul}",
                         fix="PostgreSQL text cannot hold NUL: remove it from the input")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{where}: invalid text at character {exc.start} ({exc.reason})",
                         fix="give valid Unicode (no lone surrogates)") from exc


def turn_rows(spans: Iterable[beam.TurnSpan]) -> list[dict[str, object]]:
    return [
        {"seq": s.seq, "turn_id": s.turn_id, "role": s.role, "session": s.session,
         "exchange": s.exchange, "date": s.date.isoformat() if s.date else None,
         "header_start": s.header_start, "char_start": s.char_start, "char_end": s.char_end}
        for s in spans
    ]


def question_rows(questions: Iterable[beam.Question]) -> list[dict[str, object]]:
    return [
        {"ability": q.ability, "index": q.index, "question": q.question, "answer": q.answer,
         "gold": q.gold, "stale": q.stale, "skipped": q.skipped, "raw": q.raw}
        for q in questions
    ]


def extends_latest(conn: psycopg.Connection, iri: str, body: str,
                   turns: list[dict[str, object]]) -> bool:
    """Whether BODY with its turn table TURNS is a longer version of the latest revision
    of document IRI: that body is its prefix, its turns are the first TURNS unchanged and
    the other TURNS start after it. Then it is appended (``extend_revision``) rather than
    loaded anew (``donto._extension_fault``, the test ``extend_revision`` applies). A last
    message that grew (a streamed reply saved early, a "P.S.") keeps the old body as a
    prefix but changes a turn: that is a changed conversation."""
    row = conn.execute(
        "select donto._extension_fault(donto._latest_revision(d.document_id), %s, %s::jsonb) "
        "is null from donto.document as d where d.iri = %s",
        (body, json.dumps(turns), iri)).fetchone()
    return bool(row and row[0])


# The NOTICEs of the database that a load passes on as warnings: a turn table with turns
# dated before a turn before them in their session (donto.record_turns; an append's too).
WARNED_BY = ("donto.record_turns:", "donto.append_turns:")


@contextmanager
def notices(conn: psycopg.Connection) -> Iterator[list[str]]:
    """The NOTICEs (of :data:`WARNED_BY`) that the database sends CONN inside the block,
    gathered into the list it yields, in order, to be said as warnings."""
    heard: list[str] = []

    def hear(d: psycopg.errors.Diagnostic) -> None:
        msg = d.message_primary or ""
        if d.severity_nonlocalized == "NOTICE" and msg.startswith(WARNED_BY):
            heard.append(msg)

    conn.add_notice_handler(hear)
    try:
        yield heard
    finally:
        conn.remove_notice_handler(hear)


def last_retraction(conn: psycopg.Connection) -> int:
    """The id of the latest retraction (0: none), to tell a later call's from earlier ones."""
    return conn.execute("select coalesce(max(retraction_id), 0) from donto.retraction"
                        ).fetchone()[0]


def supersession(conn: psycopg.Connection, revision_id: int, after: int = 0
                 ) -> dict[str, object]:
    """What registering REVISION_ID superseded as a changed conversation
    (``donto._retract_superseded``), counting retractions after id AFTER: the revisions
    and the number of statements retracted; and the document's revision that answers
    now (``donto._latest_revision``: not REVISION_ID when it is an older text loaded
    again, which supersedes nothing and answers nothing)."""
    rows = conn.execute(
        "select s.derived_from_revision, count(*) from donto.retraction as r "
        "join donto.statement as s using (statement_id) "
        "where r.retraction_id > %s and r.reason like %s group by 1 order by 1",
        (after, f"superseded: the conversation changed (revision {int(revision_id)}, the "
                "latest,%")).fetchall()
    (latest,) = conn.execute(
        "select donto._latest_revision(r.document_id) from donto.revision as r "
        "where r.revision_id = %s", (revision_id,)).fetchone()
    conn.commit()
    return {"revisions": [r for r, _ in rows], "statements": sum(n for _, n in rows),
            "answering_revision": latest}


def extend_revision(conn: psycopg.Connection, iri: str, body: str,
                    turns: list[dict[str, object]], meta: str = "{}") -> int:
    """``donto.extend_revision``: register BODY (whose prefix is the latest revision of IRI)
    with its whole turn table, linked to the revision it extends and projected
    incrementally wherever that one was. Returns the revision id."""
    return conn.execute("select donto.extend_revision(%s, %s, %s, %s)",
                        (iri, body, json.dumps(turns), meta)).fetchone()[0]


def append_turns(conn: psycopg.Connection, iri: str, messages: list[dict[str, object]],
                 meta: dict[str, object] | None = None) -> int:
    """``donto.append_turns``: append MESSAGES ({role, content, turn_id?, session?, date?,
    exchange?}) to the conversation IRI; returns the new (or, appended already, the same)
    revision id. The caller commits."""
    return conn.execute("select donto.append_turns(%s, %s, %s)",
                        (iri, json.dumps(messages, ensure_ascii=False),
                         json.dumps(meta or {}))).fetchone()[0]


def _extend_if_still_latest(conn: psycopg.Connection, iri: str, body: str,
                            turns: list[dict[str, object]], meta: dict[str, object]
                            ) -> int | None:
    """:func:`extend_revision`, or None when the document's latest revision changed since
    :func:`extends_latest` said BODY extends it (a concurrent load of another text of IRI
    committed in between: ``extend_revision`` refuses, 22023, hinting at a changed
    conversation), and BODY is then a changed conversation. The refusal is undone by a
    savepoint; the caller's transaction goes on."""
    try:
        with conn.transaction():
            return extend_revision(conn, iri, body, turns, json.dumps(meta))
    except psycopg.errors.InvalidParameterValue as exc:
        if "changed conversation" not in (exc.diag.message_hint or ""):
            raise
        return None


@dataclass
class Recorded:
    """What :func:`record_conversation` stored (or found already stored)."""

    revision_id: int
    new_revision: bool
    chars: int
    turns: int
    questions: int
    chunks: int
    appended: bool = False
    standing: int = 0
    registered_by_another: str | None = None  # a warning: the revision is another login's
    answering_revision: int | None = None  # the document's revision recall answers from
    notices: list[str] = field(default_factory=list)  # the database's (:func:`notices`)


def record_conversation(conn: psycopg.Connection, conv: beam.Conversation, iri: str,
                        meta: dict[str, object], *, window_chars: int = 1200,
                        lexical: bool = True) -> Recorded:
    """Store one conversation in one transaction: its canonical text
    (``beam.format_chat``) as a revision of document IRI, its turn table, its probing
    questions and projection A. Idempotent; raises on bad input (nothing is left behind)."""
    if not conv.messages:
        raise ValueError(f"{conv.source or iri}: the conversation has no messages")
    body, spans = beam.format_chat(conv)
    check_body(body, conv.source or iri)
    rows = turn_rows(spans)
    with notices(conn) as heard, conn.transaction():
        existed = conn.execute(
            "select 1 from donto.revision as r join donto.document as d using (document_id) "
            "where d.iri = %s and r.sha256 = sha256(convert_to(%s, 'UTF8'))",
            (iri, body)).fetchone()
        # A longer version of a known conversation is appended (incremental projections).
        rev = (_extend_if_still_latest(conn, iri, body, rows, meta)
               if existed is None and extends_latest(conn, iri, body, rows) else None)
        appended = rev is not None
        if not appended:
            rev = conn.execute("select donto.register_revision(%s, %s, %s::jsonb)",
                               (iri, body, json.dumps(meta))).fetchone()[0]
        turns = conn.execute("select donto.record_turns(%s::bigint, %s::jsonb)",
                             (rev, json.dumps(rows))).fetchone()[0]
        questions = conn.execute(
            "select donto.record_questions(%s::bigint, %s::jsonb)",
            (rev, json.dumps(question_rows(conv.questions), ensure_ascii=False))).fetchone()[0]
        chunks = conn.execute(
            "select donto.project_recall(%s::bigint, %s::integer, lexical => %s::boolean)",
            (rev, window_chars, lexical)).fetchone()[0]
        standing = conn.execute("select donto.project_standing(%s::bigint)", (rev,)).fetchone()[0]
        # new: registered by this transaction, not by a concurrent load of the same text
        # that this one waited for (registered_at is the registering transaction's start)
        new = existed is None and conn.execute(
            "select registered_at = now() from donto.revision where revision_id = %s",
            (rev,)).fetchone()[0]
        other = registered_by_another(conn, rev)
        answering = conn.execute(
            "select donto._latest_revision(document_id) from donto.revision "
            "where revision_id = %s", (rev,)).fetchone()[0]
    return Recorded(rev, new, len(body), turns, questions, chunks, appended,
                    standing, other, answering, list(heard))


def load_conversation(conn: psycopg.Connection, conv: beam.Conversation,
                      window_chars: int = 1200, lexical: bool = True) -> LoadResult:
    """Load one conversation in one transaction (committed on success, rolled back on error).

    LEXICAL=False leaves the full-text vectors for a later ``donto.index_lexical``.
    """
    res = LoadResult(conv.conversation_id, ok=False, warnings=list(conv.warnings))
    res.skipped = [f"{q.ability}[{q.index}]: {note}" for q in conv.questions for note in q.skipped]
    try:
        rec = record_conversation(conn, conv, document_iri(conv),
                                  {"source": "beam", "scale": conv.scale},
                                  window_chars=window_chars, lexical=lexical)
        res.revision_id, res.new_revision, res.chars = rec.revision_id, rec.new_revision, rec.chars
        res.turns, res.questions, res.chunks = rec.turns, rec.questions, rec.chunks
        res.appended, res.standing = rec.appended, rec.standing
        res.warnings.extend(rec.notices)
        if rec.registered_by_another:
            res.warnings.append(rec.registered_by_another)
        res.answering_revision = rec.answering_revision
        if rec.answering_revision != rec.revision_id:
            res.warnings.append(
                f"revision {rec.revision_id}, this text, was loaded before revision "
                f"{rec.answering_revision}, a later text of the document, which recall "
                "answers from: a text loaded again does not supersede a later one (README, "
                "Conversations that grow)")
        res.ok = True
    except psycopg.Error as exc:
        res.error = f"{conv.conversation_id}: {from_database(exc)}"
    except (DontoError, ValueError, RecursionError) as exc:
        res.error = f"{conv.conversation_id}: {str(exc).strip()}"
    return res


def registered_by_another(conn: psycopg.Connection, revision_id: int) -> str | None:
    """A warning when REVISION_ID (the text just loaded) or its document is another
    login's (only the owner's session gets this far on another's document): the revision's
    turn table and questions are its registrant's, and a document another login registered
    first stays that login's unless this load registered a new text of it, which takes it
    (``donto.register_revision``, in the transaction that registered it; rows that login
    filed before stay its own)."""
    row = conn.execute(
        "select case when r.login_role <> session_user then r.login_role end, d.iri, "
        "exists (select 1 from donto.document_grant as g where g.document_id = d.document_id "
        "and g.login_role = session_user and g.granted_at = r.registered_at), "
        "case when not donto._owners_login(o.login) and o.login <> session_user "
        "then o.login end "
        "from donto.revision as r join donto.document as d using (document_id) "
        "cross join lateral (select donto._document_login(d.document_id) as login) as o "
        "where r.revision_id = %s", (revision_id,)).fetchone()
    if row is None:
        return None
    registrant, iri, taken, owner = row
    said = []
    if registrant is not None:
        said.append(f"revision {revision_id}, this text, was registered by {registrant}, not by "
                    "this login: its turn table and questions are theirs")
    if taken:
        said.append(f"this load took document {iri} from the login that registered it first "
                    "(donto.document_grant); the rows that login filed in it stay its own")
    elif owner is not None:
        said.append(f"document {iri} is {owner}'s: select donto.give_document('{iri}', "
                    "session_user) takes it")
    return "; ".join(said) + " (README, Security model)" if said else None


def load_beam(conn: psycopg.Connection, path: str, *, scale: str | None = None,
              conversations: list[str] | None = None, window_chars: int = 1200,
              on_result: Callable[[LoadResult], None] | None = None,
              jobs: int = 1, connect: Callable[[], psycopg.Connection] | None = None,
              lexical: bool = True) -> list[LoadResult]:
    """Load every conversation found at PATH; failures are reported, not raised.

    With JOBS > 1 (and CONNECT, a factory of new connections) conversations load
    concurrently, one connection per worker; results keep the input order.
    """
    items = beam.iter_beam(path, scale=scale, conversations=conversations or None)

    def one(item, c: psycopg.Connection) -> LoadResult:
        if isinstance(item, beam.BeamFormatError):
            return LoadResult(item.conversation_id or "?", ok=False, error=str(item))
        return load_conversation(c, item, window_chars, lexical)

    if jobs <= 1 or connect is None:
        results = []
        for item in items:
            results.append(one(item, conn))
            if on_result:
                on_result(results[-1])
        return results

    import threading
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()
    opened: list[psycopg.Connection] = []

    def work(item) -> LoadResult:
        if not hasattr(local, "conn"):
            local.conn = connect()
            opened.append(local.conn)
        return one(item, local.conn)

    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = []
            for res in pool.map(work, items):
                results.append(res)
                if on_result:
                    on_result(res)
    finally:
        for c in opened:
            c.close()
    return results
