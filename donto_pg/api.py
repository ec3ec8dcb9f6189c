"""The Python API: add conversations and documents, recall, read claims.

A small, typed layer over the SQL API (as pgmq's client is): every function is one
or a few calls of ``donto.*`` functions with explicit casts, and the database does
the work. Typical use::

    import donto_pg

    conn = donto_pg.connect()                  # the embedded cluster, or connect(dsn)
    donto_pg.ensure_schema(conn)               # donto-pg migrate, from Python
    rev = donto_pg.add_conversation(conn, [
        {"role": "user", "content": "I moved to Berlin in March.", "timestamp": "2024-03-02"},
        {"role": "assistant", "content": "How do you like Berlin?"},
    ], "chat:bob/1")                           # README's example is chat:alice/1
    for hit in donto_pg.recall(conn, "where do I live?", k=3):
        print(hit.score, hit.text)

Messages have the OpenAI shape: ``role`` and ``content`` (a string, or a list of
``{"type": "text", "text": ...}`` parts), optionally ``timestamp`` (ISO 8601 date or
date-time, a ``datetime``/``date``, or Unix seconds) and ``session`` (an integer).
They become the same canonical text as a BEAM conversation (README, "The canonical
text"): ``beam.format_chat`` renders it and ``loader.record_conversation`` stores it.

Transactions. The readers (:func:`recall`, :func:`recall_payload`, :func:`claims`) run
in ``conn.transaction()``: on an idle connection that is a transaction of their own,
committed; inside the caller's transaction (uncommitted work, or a ``with
conn.transaction():`` block) a savepoint of it, so the caller's commit or rollback
decides and an error undoes only the call. The writers (:func:`add_conversation`,
:func:`add_text`, :func:`ensure_schema`) commit as they go (embedding commits page by
page, so that a long run keeps what it did): they need an idle connection (no
transaction open, not even one that only read) and refuse another with a
:class:`~donto_pg.errors.DontoError` before touching it.
On an error a writer rolls back its own transaction before it raises, so the connection
stays usable. Bad input (a NUL character or a lone surrogate in a text, an IRI or
``meta``, a number out of range) is an :class:`~donto_pg.errors.InputError`.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import operator
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import psycopg

from donto_pg import beam, loader
from donto_pg import db as dbmod
from donto_pg.core import transcript
from donto_pg.errors import DontoError, InputError, NothingFound, from_database

__all__ = [
    "Claim", "Hit", "add_conversation", "add_text", "claims", "connect", "ensure_schema",
    "read_chat_file", "recall", "recall_payload",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _first(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The connection argument, given first or as conn=."""
    return args[0] if args else kwargs.get("conn")


def _connection(conn: Any, name: str) -> psycopg.Connection:
    """CONN, the first argument of donto_pg.NAME, if it is an open psycopg connection."""
    if not isinstance(conn, psycopg.Connection):
        raise InputError(f"donto_pg.{name}: the first argument must be a connection, not "
                         f"{type(conn).__name__}", fix="conn = donto_pg.connect(dsn)")
    if conn.closed:
        raise DontoError(f"donto_pg.{name}: the connection is closed",
                         fix="open another (donto_pg.connect())")
    return conn


# What a database without this version's donto schema answers a donto query with: an
# undefined function, table or column, or no schema donto.
_SCHEMA_STATES = {"42883", "42P01", "42703", "3F000"}


def _schema_fault(conn: psycopg.Connection, exc: psycopg.Error) -> None:
    """Raise the schema's own error (SchemaMissing, SchemaVersion, SchemaBehind: what to
    run) for EXC when the database lacks this version's schema, as every CLI command
    says first; else return. Costs nothing until a query fails."""
    if exc.sqlstate not in _SCHEMA_STATES or conn.closed or conn.broken:
        return
    try:
        with conn.transaction():
            dbmod.require_schema(conn, end=False)
    except DontoError as schema:
        raise schema from exc
    except psycopg.Error:
        return


# When each connection's database was last accepted by require_schema: a connection is
# checked before its first call, as every CLI command checks first, and again once
# SCHEMA_RECHECK_S seconds have passed (a pool's connection lives on while the database
# is migrated by a later donto-pg), so that such a database is refused before anything is
# read from it or written to it.
_SCHEMA_CHECKED: weakref.WeakKeyDictionary[psycopg.Connection, float] = \
    weakref.WeakKeyDictionary()
SCHEMA_RECHECK_S = 60.0


def _require_schema(conn: psycopg.Connection) -> None:
    """SchemaMissing, SchemaVersion or SchemaBehind unless CONN's database has this
    version's schema (in a transaction of its own on an idle connection, a savepoint in
    the caller's); at most once every SCHEMA_RECHECK_S seconds per connection."""
    if time.monotonic() - _SCHEMA_CHECKED.get(conn, -math.inf) < SCHEMA_RECHECK_S:
        return
    with conn.transaction():
        dbmod.require_schema(conn, end=False)
    _SCHEMA_CHECKED[conn] = time.monotonic()


def _reader(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """A function that reads: check the connection (the first argument), and make what
    the database refuses as a bad argument (SQLSTATE class 22: a k or a setting out of
    range, an empty query, an unknown context; 55000: an as_of past the horizon) an
    InputError, with the database's error as its cause."""
    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        conn = _connection(_first(args, kwargs), fn.__name__)
        try:
            _require_schema(conn)
            return fn(*args, **kwargs)
        except psycopg.Error as exc:
            _schema_fault(conn, exc)
            state = exc.sqlstate or ""
            if not (state.startswith("22") or state == "55000"):
                raise
            err = from_database(exc)
            raise InputError(f"donto_pg.{fn.__name__}: {err.why or err.what}",
                             fix=err.fix) from exc
    return call


def _count(value: Any, what: str, least: int) -> int:
    """VALUE as a whole number of at least LEAST: an int or any integer type (numpy's),
    not a bool, a float or a string."""
    try:
        if isinstance(value, bool):
            raise TypeError
        value = operator.index(value)
    except TypeError:
        raise InputError(f"{what} must be a whole number, got {type(value).__name__}") from None
    if value < least:
        raise InputError(f"{what} must be at least {least}, got {value}")
    return value


def _moment(value: Any, what: str) -> datetime.datetime | None:
    """VALUE (None, or a datetime with its time zone, or an ISO 8601 text of one) for an
    as_of. A date, or a datetime without a time zone, names no moment: the database would
    read it in its own time zone."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError as exc:
            raise InputError(f"{what} {value[:100]!r} is not an ISO 8601 date-time",
                             fix="e.g. 2024-03-02T10:00:00+00:00") from exc
    if not isinstance(value, datetime.datetime):
        raise InputError(f"{what} must be a datetime, got {type(value).__name__}",
                         fix="for the start of a day: datetime.datetime(2024, 3, 2, "
                             "tzinfo=datetime.UTC)")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InputError(f"{what} has no time zone ({value.isoformat()}): the database would "
                         "read it in its own", fix="give one: datetime.now(datetime.UTC), or "
                         "value.astimezone() for the local time")
    return value


def _writer(fn: Callable[_P, _R], *, schema: bool = True) -> Callable[_P, _R]:
    """A function that commits as it goes: refuse a connection (the first argument) with
    a transaction open, which it would commit or discard with whatever the caller has in
    it (writes, cursors, locks, a pending NOTIFY); with SCHEMA, refuse a database without
    this version's schema; roll back when FN raises, then raise."""
    @functools.wraps(fn)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        conn = _connection(_first(args, kwargs), fn.__name__)
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            raise DontoError(f"donto_pg.{fn.__name__}: the connection has a transaction open",
                             "it commits its own work as it goes, which would commit or "
                             "discard yours",
                             fix="commit or roll back first (conn.commit()), or give donto_pg "
                                 "a connection of its own (donto_pg.connect())")
        try:
            if schema:
                _require_schema(conn)
            return fn(*args, **kwargs)
        except BaseException as exc:
            if not conn.closed and not conn.broken:
                conn.rollback()
                if isinstance(exc, psycopg.Error):
                    _schema_fault(conn, exc)
            raise
    return call


def _text(value: Any, what: str) -> str:
    """VALUE as a text the database can store, or an InputError naming WHAT."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise InputError(f"{what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(f"{what} is not valid Unicode (a lone surrogate?)", str(exc)) from exc
    return value


def _iri(conn: psycopg.Connection, value: Any) -> str:
    """A document IRI as donto.register_revision takes a new one
    (``donto._document_iri_fault``: a scheme, ``chat:`` or ``file:``, which keeps the
    context names made from it one-to-one, then what it names)."""
    iri = _text(value, "the document IRI")
    with conn.transaction():
        fault = conn.execute("select donto._document_iri_fault(%s::text)",
                             (iri,)).fetchone()[0]
    if fault:
        raise InputError(f"{iri[:200]!r} is not a document IRI: {fault}",
                         fix="name the document like chat:alice/1 or file:/path/to/chat.json")
    return iri


def _meta(meta: Mapping[str, Any] | None, source: str) -> str:
    """META (with SOURCE) as JSON text the database can store, or an InputError."""
    if meta is not None and not isinstance(meta, Mapping):
        raise InputError(f"meta must be a JSON object (a mapping), got {type(meta).__name__}")
    value = {"source": source, **(meta or {})}
    stack: list[Any] = [value]
    while stack:  # every key and string in it
        v = stack.pop()
        if isinstance(v, str):
            _text(v, "a text in meta")
        elif isinstance(v, Mapping):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError("meta is not JSON", str(exc)) from exc


@dataclass(frozen=True)
class Hit:
    """One recall row (a chunk, a standing statement or a user turn; a row of
    ``donto.recall``). ``text`` is exactly
    ``donto.span_text(revision_id, char_start, char_end)``; offsets are characters."""

    statement_id: int
    revision_id: int
    char_start: int
    char_end: int
    text: str
    valid_from: datetime.date | None  # when what it says became true (None: unknown)
    valid_until: datetime.date | None  # exclusive; None: open-ended
    score: float
    vector_rank: int | None
    lexical_rank: int | None
    place: int  # 1 .. k: a chunk row fills one, a standing or turn block's rows share one


@dataclass(frozen=True)
class Claim:
    """One extracted claim with the bytes it rests on (a row of ``donto.claim_provenance``)."""

    claim_id: int
    subject: str
    predicate: str
    object: str | None
    is_hypothesis: bool
    retracted: bool
    retraction_reason: str | None
    document: str
    revision_id: int
    char_start: int | None
    char_end: int | None
    evidence_text: str | None
    anchor_method: str | None
    model: str | None


def connect(dsn: str | None = None) -> psycopg.Connection:
    """Open a connection: to DSN, else ``DONTO_DSN``, else the embedded cluster (created
    and started on first use). Autocommit is off: the writers commit their work, the
    readers run in ``conn.transaction()`` (see the module's "Transactions")."""
    return dbmod.connect(dsn)


@functools.partial(_writer, schema=False)
def ensure_schema(conn: psycopg.Connection) -> list[str]:
    """Install or upgrade the donto schema, as ``donto-pg migrate`` does (needs a
    superuser; a no-op when up to date, and for a database made with CREATE EXTENSION).
    Returns the migrations applied now."""
    from donto_pg import migrate

    row = conn.execute("select 1 from pg_extension where extname = 'donto'").fetchone()
    conn.commit()
    if row is not None:
        return []
    applied = migrate.migrate(conn)
    dbmod.register_vector_if_present(conn)
    _SCHEMA_CHECKED.pop(conn, None)  # checked again before the next call
    return applied


@_writer
def add_conversation(conn: psycopg.Connection, messages: Sequence[Mapping[str, Any]],
                     document_iri: str, *, embed: bool = True, extraction: bool = True,
                     model: str | None = None, meta: Mapping[str, Any] | None = None,
                     window_chars: int = 1200) -> int:
    """Store a chat log as a revision of DOCUMENT_IRI and return the revision id.

    Records its canonical text and turn table, cuts projection A (recall chunks) and,
    with EXTRACTION, projection B (extraction blocks, for ``donto-pg extract``), and with
    EMBED embeds the chunks with MODEL (default all-MiniLM-L6-v2; else leave it to
    ``donto-pg embed``). Idempotent: the same messages give the same revision and add
    nothing. Raises :class:`~donto_pg.errors.InputError` on a malformed message.
    """
    conv = conversation(messages, _iri(conn, document_iri))
    meta_json = _meta(meta, "api")
    if embed:  # an unknown model fails here, before anything is stored
        from donto_pg.embed import register_model

        register_model(conn, model)
    with conn.transaction():  # the revision and both projections, or nothing
        rec = loader.record_conversation(conn, conv, document_iri, json.loads(meta_json),
                                         window_chars=window_chars)
        if extraction:
            conn.execute("select donto.project_extraction(%s::bigint)", (rec.revision_id,))
    conn.commit()
    if embed:
        _embed(conn, document_iri, model)
    return rec.revision_id


@_writer
def add_text(conn: psycopg.Connection, text: str, document_iri: str, *, embed: bool = True,
             model: str | None = None, meta: Mapping[str, Any] | None = None,
             window_chars: int = 1200) -> int:
    """Store a plain document as a revision of DOCUMENT_IRI (its text verbatim) and cut
    its recall chunks (embedded with EMBED). Returns the revision id; idempotent.

    Recall works on it as on a conversation. Extraction does not: extraction blocks are
    cut along turns (who said what, and when), which a plain text does not have, and
    ``donto.project_extraction`` says so. To extract from a document, give it to
    :func:`add_conversation` as messages (one per paragraph, say).
    """
    _iri(conn, document_iri)
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"{document_iri}: the text is empty",
                         fix="give a file or text with something to recall in it")
    loader.check_body(text, document_iri)
    meta_json = _meta(meta, "text")
    with conn.transaction():
        rev = conn.execute("select donto.register_revision(%s::text, %s::text, %s::jsonb)",
                           (document_iri, text, meta_json)).fetchone()[0]
        conn.execute("select donto.project_recall(%s::bigint, %s::integer)", (rev, window_chars))
    conn.commit()
    if embed:
        _embed(conn, document_iri, model)
    return rev


@_reader
def recall(conn: psycopg.Connection, query: str, k: int = 10, context: str | None = None,
           as_of: datetime.datetime | None = None, *, document: str | None = None,
           model: str | None = None, arms: str = "hybrid") -> list[Hit]:
    """The top K places of recall for QUERY (``donto.recall``: vector and lexical arms,
    fused): chunk rows, and with the hybrid arm the standing block (the standing statements
    that apply, together one place; ``Hit.vector_rank`` and ``lexical_rank`` both None) and,
    for a question about what the user brought up, blocks of the user's own turns (each
    row a turn of the chunk ``statement_id``, several to a place). ``Hit.place`` numbers
    the places 1 .. K.

    CONTEXT is a recall context IRI; DOCUMENT a document IRI (its recall context);
    AS_OF answers as the database knew it then; ARMS is ``vector``, ``lexical`` or
    ``hybrid``; MODEL an embedding model that has vectors (default: the default model).
    """
    _query(query)
    _texts(context=context, document=document, model=model)
    k = _count(k, "k", 1)
    as_of = _moment(as_of, "as_of")
    _known(conn, context, document)
    with conn.transaction():
        rows = conn.execute(
            "select r.statement_id, r.revision_id, r.char_start, r.char_end, r.chunk_text, "
            "lower(r.valid_time), upper(r.valid_time), r.score, r.vector_rank, "
            "r.lexical_rank, r.place "
            "from donto.recall(%s::text, k => %s::integer, "
            "context => coalesce(%s::text, donto.recall_context_iri(%s::text)), "
            "as_of => %s::timestamptz, model => %s::text, arms => %s::text) as r",
            (query, k, context, document, as_of, model, arms)).fetchall()
    return [Hit(*r) for r in rows]


@_reader
def recall_payload(conn: psycopg.Connection, query: str, max_tokens: int, k: int = 20, *,
                   chunk_tokens: int | None = None, context: str | None = None,
                   document: str | None = None, as_of: datetime.datetime | None = None,
                   model: str | None = None) -> dict[str, Any]:
    """Recall packed for a model, never over MAX_TOKENS (``donto.recall_payload``):
    ``{query, memories, chunks, truncated, tokens, omitted}``."""
    _query(query)
    _texts(context=context, document=document, model=model)
    max_tokens, k = _count(max_tokens, "max_tokens", 1), _count(k, "k", 1)
    if chunk_tokens is not None:
        chunk_tokens = _count(chunk_tokens, "chunk_tokens", 0)  # 0: no chunk text
    as_of = _moment(as_of, "as_of")
    _known(conn, context, document)
    with conn.transaction():
        return conn.execute(
            "select donto.recall_payload(%s::text, %s::integer, k => %s::integer, "
            "chunk_tokens => %s::integer, "
            "context => coalesce(%s::text, donto.recall_context_iri(%s::text)), "
            "as_of => %s::timestamptz, model => %s::text)",
            (query, max_tokens, k, chunk_tokens, context, document, as_of, model)
        ).fetchone()[0]


@_reader
def claims(conn: psycopg.Connection, *, document: str | None = None,
           subject: str | None = None, include_retracted: bool = False,
           limit: int | None = 100) -> list[Claim]:
    """Extracted claims with their evidence (``donto.claim_provenance``), oldest first:
    of DOCUMENT (an IRI), about SUBJECT (case-insensitive substring); current facts
    only unless INCLUDE_RETRACTED; the first LIMIT of them (None: all)."""
    _texts(document=document, subject=subject)
    if limit is not None:
        limit = _count(limit, "limit", 0)
    with conn.transaction():
        rows = conn.execute(
            "select c.claim_id, c.subject, c.predicate, c.object, c.is_hypothesis, "
            "c.retracted, c.retraction_reason, c.document, c.revision_id, c.char_start, "
            "c.char_end, c.evidence_text, c.anchor_method, c.model "
            "from donto.claim_provenance as c "
            "where (%s::text is null or c.document = %s::text) "
            "and (%s::text is null or strpos(lower(c.subject), lower(%s::text)) > 0) "
            "and (%s::boolean or not c.retracted) "
            "order by c.claim_id limit %s::integer",
            (document, document, subject, subject, include_retracted, limit)).fetchall()
    return [Claim(*r) for r in rows]


def _query(value: Any) -> str:
    if not _text(value, "the query").strip():
        raise InputError("the query is empty",
                         fix="ask something: recall(conn, 'where do I live?')")
    return value


def _known(conn: psycopg.Connection, context: str | None, document: str | None) -> None:
    """A NothingFound error for a DOCUMENT (when no CONTEXT is given) that is not stored,
    before the query is embedded."""
    if context is None and document is not None:
        with conn.transaction():
            found = conn.execute("select exists (select 1 from donto.document where iri = %s)",
                                 (document,)).fetchone()[0]
        if not found:
            raise NothingFound(f"no document {document[:200]!r}",
                               fix="see what is stored: select iri from donto.document")


def _texts(**values: Any) -> None:
    """Check the text arguments given (None: not given) as :func:`_text` does."""
    for name, value in values.items():
        if value is not None:
            _text(value, name)


# -- input: OpenAI-shaped messages and chat files -------------------------------------


def conversation(messages: Sequence[Mapping[str, Any]], document_iri: str) -> beam.Conversation:
    """The messages as a conversation: turn ids in order (0, 1, ...), a new exchange at
    each user message, sessions from ``session`` (default 1, then the previous one),
    dates from ``timestamp`` (a message without one has the latest date before it in its
    session, else the session's first); contents cleaned as BEAM's are
    (``beam.clean_content``)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence) or not messages:
        raise InputError(f"{document_iri}: messages must be a non-empty list of "
                         "{role, content} objects",
                         fix='give [{"role": "user", "content": "..."}, ...]')
    rows: list[tuple[str, int, datetime.date | None, str, int]] = []
    session, exchange = 1, -1
    numbered = None  # the last session a message numbered (a default does not count)
    for i, m in enumerate(messages):
        where = f"{document_iri}: message {i}"
        if not isinstance(m, Mapping):
            kind = type(m).__name__
            raise InputError(f"{where} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}, not an "
                             "object",
                             fix='give {"role": ..., "content": ...}')
        role = m.get("role")
        if not isinstance(role, str) or not transcript.ROLE.fullmatch(role):
            raise InputError(f"{where}: role {role!r} is not a name",
                             fix="use user, assistant, system, tool (letters, digits, _ -)")
        if m.get("session") is not None:
            if isinstance(m["session"], bool) or not isinstance(m["session"], int) \
                    or not 0 <= m["session"] < 2**31:
                raise InputError(f"{where}: session {m['session']!r} is not a whole number "
                                 "from 0 to 2147483647",
                                 fix='number sessions 1, 2, ... ("session": 2), or leave '
                                     'session out')
            if numbered is not None and m["session"] < numbered:
                raise InputError(f"{where}: session {m['session']} comes after session "
                                 f"{numbered}", "a session is one stretch of the conversation",
                                 fix="order the messages by session, or number the sessions "
                                     "in order")
            session = numbered = m["session"]
        if role == "user" or exchange < 0:
            exchange += 1
        text = _message_text(m, where)
        loader.check_body(text, f"{where}: its content")  # the place in the message, not the body
        rows.append((role, session, _date(m.get("timestamp"), where),
                     beam.clean_content(text), exchange))
    if not any(content.strip() for _, _, _, content, _ in rows):
        raise InputError(f"{document_iri}: every message is empty",
                         fix="give at least one message with text")
    # A message without a timestamp has the latest one before it in its session, else
    # the session's first (so the session's header carries its date, as in BEAM).
    first: dict[int, datetime.date] = {}
    for _, ses, day, _, _ in rows:
        if day is not None:
            first.setdefault(ses, day)
    out: list[beam.Message] = []
    last: dict[int, datetime.date] = {}
    for i, (role, ses, day, content, ex) in enumerate(rows):
        day = day or last.get(ses) or first.get(ses)
        if day is not None:
            last[ses] = day
        out.append(beam.Message(seq=i, turn_id=i, role=role, session=ses, date=day,
                                content=content, question_type=None, exchange=ex))
    return beam.Conversation(conversation_id=document_iri, scale="", messages=out,
                             questions=[], source=document_iri)


def read_chat_file(path: str | Path) -> list[dict[str, Any]]:
    """Messages from a chat log file: a JSON array of messages, a JSON object with a
    ``messages`` array (an OpenAI request), or JSON Lines (one message per line)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark is not content
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text", str(exc), fix="save the file as UTF-8") from exc
    fix = "give a JSON array of messages, or JSON Lines (.jsonl)"
    if not text.strip():
        raise InputError(f"{p}: the file is empty",
                         fix='write messages into it: [{"role": "user", "content": "..."}]')
    if p.suffix.lower() == ".jsonl":  # lines end at \n only (JSON strings may hold U+2028)
        data: Any = []
        for n, line in enumerate(text.split("\n"), 1):
            try:
                if line.strip():
                    data.append(json.loads(line))
            except (json.JSONDecodeError, RecursionError) as exc:
                raise InputError(f"{p}: line {n} is not valid JSON", str(exc), fix=fix) from exc
    else:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise InputError(f"{p}: not valid JSON", str(exc), fix=fix) from exc
    if isinstance(data, Mapping) and "messages" in data:
        if not isinstance(data["messages"], list):
            kind = type(data["messages"]).__name__
            raise InputError(f"{p}: expected a list of messages under \"messages\", got "
                             f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}",
                             fix='give {"messages": [{"role": "user", "content": "..."}, ...]}')
        data = data["messages"]
    if not isinstance(data, list):
        raise InputError(f"{p}: expected a list of messages, got a {type(data).__name__}",
                         fix='give [{"role": "user", "content": "..."}, ...]')
    return data


def _message_text(m: Mapping[str, Any], where: str) -> str:
    """A message's content, then its tool calls (OpenAI ``tool_calls``, or the older
    ``function_call``), one line each: ``[tool call NAME ARGUMENTS]``. A message with
    tool calls may have no content (null or none)."""
    calls = m.get("tool_calls")
    if calls is None and m.get("function_call") is not None:
        calls = [{"function": m["function_call"]}]
    if calls is None:
        return _content(m.get("content"), where)
    if not isinstance(calls, list):
        raise InputError(f"{where}: tool_calls must be a list, got {type(calls).__name__}")
    lines = [] if m.get("content") is None else [_content(m["content"], where)]
    for n, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        args = fn.get("arguments", "") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not isinstance(args, (str, Mapping)):
            raise InputError(f"{where}: tool call {n} has no function name and arguments",
                             fix='give {"function": {"name": ..., "arguments": "..."}}')
        args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
        lines.append(f"[tool call {name} {args}]".replace(" ]", "]"))
    return "\n".join(lines)


def _content(value: Any, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # OpenAI content parts: keep the text ones
        texts = [p.get("text") for p in value
                 if isinstance(p, Mapping) and p.get("type") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "\n".join(texts)
    raise InputError(f"{where}: content must be a string or a list of text parts",
                     f"got {type(value).__name__}")


def _date(value: Any, where: str) -> datetime.date | None:
    try:
        return transcript.message_date(value)
    except (OverflowError, ValueError, OSError) as exc:  # NaN, out of range, not ISO
        raise InputError(f"{where}: timestamp {value!r} is not a date", str(exc),
                         fix="use ISO 8601 (2024-03-02 or 2024-03-02T10:00:00Z) or Unix "
                             "seconds") from exc


def _embed(conn: psycopg.Connection, document_iri: str, model: str | None) -> int:
    from donto_pg import embed

    context = conn.execute("select donto.recall_context_iri(%s::text)",
                           (document_iri,)).fetchone()[0]
    conn.commit()
    return embed.embed_pending(conn, model, context=context, progress=False).embedded
