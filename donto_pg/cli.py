"""donto-pg: the command line. Every command is a short call into the database API.

With no --dsn and no DONTO_DSN, commands use the embedded cluster under
DONTO_HOME, started on demand (see `donto-pg db --help`). Errors are one or two
lines (what failed and why, then what to do); --debug shows the traceback.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Annotated

import typer

from donto_pg import db as dbmod
from donto_pg import errors
from donto_pg import migrate as mig
from donto_pg.cluster import Cluster
from donto_pg.errors import DontoError, InputError, NothingFound, UsageError
from donto_pg.extract import ALARM_MAX_INJECTION, ALARM_MIN_ANCHOR

# Plain (click) help: flags are shown as flags (`--json`), not as `--json <bool>`.
app = typer.Typer(
    help=__doc__,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(help="Manage the embedded PostgreSQL cluster (ignored with --dsn/DONTO_DSN).",
                     no_args_is_help=True, rich_markup_mode=None)
ext_app = typer.Typer(help="Build and install the donto PostgreSQL extension (CREATE EXTENSION).",
                      no_args_is_help=True, rich_markup_mode=None)
app.add_typer(db_app, name="db")
app.add_typer(ext_app, name="extension")

DsnOpt = Annotated[str | None, typer.Option(
    "--dsn", envvar="DONTO_DSN", help="PostgreSQL DSN; default: the embedded cluster.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]


def out(data: object, as_json: bool, text: str | None = None) -> None:
    """Print DATA as JSON, or TEXT (default: a key: value listing)."""
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif text is not None:
        typer.echo(text)
    elif isinstance(data, dict):
        for k, v in data.items():
            typer.echo(f"{k}: {v}")
    else:
        typer.echo(str(data))


def fail(what: str, why: str | None = None, *, fix: str | None = None) -> UsageError:
    """A bad option or argument; ``raise fail(...)``."""
    return UsageError(what, why, fix=fix)


def progress_enabled() -> bool:
    """Progress of long work goes to standard error (never into --json's standard
    output), when that is a terminal or DONTO_PROGRESS=1 asks for it."""
    forced = os.environ.get("DONTO_PROGRESS")
    if forced is not None:
        return forced.strip().lower() not in ("", "0", "false", "no", "off")
    return sys.stderr.isatty()


def progress(text: str) -> None:
    """One progress line on standard error (see :func:`progress_enabled`)."""
    if progress_enabled():
        typer.echo(text, err=True)


def connect(dsn: str | None, *, vector: bool = True):
    """A connection to a database that has the donto schema (else a SchemaMissing error
    that says to run `donto-pg migrate`)."""
    conn = dbmod.connect(dsn, vector=vector)
    try:
        dbmod.require_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def providers(path: str | None):
    """The provider pool of a TOML file (None: the offline fallback), or an InputError."""
    if path is None:
        return None
    from donto_pg.llm import ProviderPool

    try:
        return ProviderPool.from_config(path)
    except FileNotFoundError as exc:
        raise InputError(f"provider config {path}: no such file",
                         fix="give a TOML file of [[provider]] tables (README: Extraction), "
                             "or leave the option out for the offline extractor") from exc
    except (ValueError, OSError) as exc:
        raise InputError(f"provider config {path}", str(exc),
                         fix="see the providers.toml example in the README") from exc


def recall_arms(value: str) -> list[str]:
    """Comma-separated recall arms, checked before any work starts."""
    from donto_pg.evaluate import ARMS

    arms = [a.strip() for a in value.split(",") if a.strip()]
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms:
        raise fail(f"--arms {value}: unknown recall arm {', '.join(map(repr, bad)) or '(none)'}",
                   fix=f"use {', '.join(ARMS)} (comma-separated where several are allowed)")
    return arms


_DEBUG = False


@app.callback()
def _options(
    debug: Annotated[bool, typer.Option(
        "--debug", envvar="DONTO_DEBUG", help="Show the full traceback of an error.")] = False,
) -> None:
    global _DEBUG
    _DEBUG = _DEBUG or debug


# -- db ---------------------------------------------------------------------------

@db_app.command("start")
def db_start() -> None:
    """Create (initdb) and start the embedded cluster; print its DSN."""
    c = Cluster.default()
    started = c.start()
    typer.echo(("started " if started else "already running ") + c.dsn())


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded cluster."""
    typer.echo("stopped" if Cluster.default().stop() else "not running")


@db_app.command("status")
def db_status(as_json: JsonOpt = False) -> None:
    """Show where the embedded cluster lives and whether it runs."""
    out(Cluster.default().status(), as_json)


@db_app.command("url")
def db_url(dsn: DsnOpt = None) -> None:
    """Print the DSN commands use (psql "$(donto-pg db url)" works). For the embedded
    cluster, standard error says how psql authenticates (peer: by OS user)."""
    typer.echo(dbmod.resolve_dsn(dsn))
    if dsn is None:
        typer.echo(Cluster.default().auth_note(), err=True)


# -- migrate / extension ------------------------------------------------------------

@app.command()
def migrate(
    dsn: DsnOpt = None,
    status: Annotated[bool, typer.Option("--status", help="List applied and pending.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the SQL; change nothing.")] = False,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Run sql/ (functions, views, triggers, grants) again even though "
        "the database records that the same files ran here: after a hand-made change to "
        "one of them. Without it an up-to-date migrate locks no donto table.")] = False,
    lock_wait: Annotated[float, typer.Option(
        "--lock-wait", min=0.0, max=2_147_483.0, help="Seconds to wait for another "
        "session's migration lock (it is named while waiting), and for each lock on a donto "
        "table that an open transaction holds, before giving up.")] = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Install or upgrade the donto schema (safe to re-run: a no-op when up to date).

    \b
    Examples:
      donto-pg migrate --status
      donto-pg migrate --dsn postgresql:///memory --lock-wait 10
    """
    with dbmod.connect(dsn, vector=False) as conn:
        if status:
            st = mig.status(conn)
            lines = [f"applied  {n}  ({t})" for n, t in st.applied]
            lines += [f"pending  {n}" for n in st.pending]
            lines += [f"TAMPERED {n}" for n in st.tampered]
            lines += [f"unknown  {n}" for n in st.unknown]
            out(st.as_dict(), as_json, "\n".join(lines) or "no migrations")
            return
        if dry_run:
            plan = mig.plan(conn, repair=repair)
            if as_json:
                out({"plan": [{"name": s.name, "sha256": s.sha256, "sql": s.text}
                              for s in plan]}, True, "")
            else:
                for s in plan:
                    typer.echo(f"-- {s.name}\n{s.text}")
                if not plan:
                    typer.echo(f"-- nothing to run: {mig.ALREADY}")
            return
        heard: list[str] = []
        applied = mig.migrate(conn, on_step=lambda name: (heard.append(name),
                                                          progress(f"migrate: {name}")),
                              lock_wait=lock_wait, repair=repair,
                              on_wait=lambda text: typer.echo(f"migrate: {text}", err=True))
        if conn.execute("select has_schema_privilege('public', 'public', 'CREATE')"
                        ).fetchone()[0]:
            typer.echo("warning: every role may CREATE in schema public, which the donto "
                       "definers search (for pgvector): run `revoke create on schema public "
                       "from public` (README, Security model)", err=True)
        stale = mig.stale_logins(conn)
        if stale:
            typer.echo(f"warning: login name(s) {', '.join(stale)} stand here for roles that "
                       "no longer have them (dropped and made again, renamed, a restore onto "
                       "another server, pg_upgrade) and file nothing: for the logins that are "
                       "the same people the owner runs `select * from "
                       "donto.adopt_logins(array['name', ...])` (README, Security model)",
                       err=True)
        _check_boot(dsn)
        behind = _stale_revisions(conn)
        if behind:
            typer.echo(f"note: {_n(behind, 'conversation')} loaded before projections this "
                       "version cuts at load time (recall keys, standing memory) recall as "
                       "they did then: run `donto-pg reproject` (README, Migrations)", err=True)
    # sql/ runs again with no migration pending when the catalog differs from what the
    # database recorded of its last run: a restore (--no-owner), a hand-made change
    sql_ran = mig.ALREADY not in heard
    out({"applied": applied, "sql_ran": sql_ran, "stale_revisions": behind}, as_json,
        f"applied {', '.join(applied)}" if applied else
        "no migration to apply; ran sql/ again (functions, views, triggers, grants: "
        + ("--repair)" if repair else "the catalog differed from what this database "
           "recorded of its last run: a restore, a hand-made change)") if sql_ran else
        "up to date (nothing to apply)")


def _check_boot(dsn) -> None:
    """What every later command's first call does in a new backend: the server's Python
    imports donto_pg (from the path migrate recorded). A migrate that succeeded on a server
    that cannot import it (a venv the server's OS user cannot read) said nothing of it."""
    import psycopg

    with dbmod.connect(dsn, vector=False) as fresh:
        try:
            fresh.execute("select donto._py_boot()")
        except psycopg.Error as exc:
            err = errors.from_database(exc)
            raise errors.DatabaseError("the schema is migrated, but the server's Python "
                                       "cannot load donto_pg", err.why, fix=err.fix) from exc


def _stale_revisions(conn) -> int:
    n = conn.execute("select count(*) from donto.stale_revisions()").fetchone()[0]
    conn.commit()
    return n


@app.command()
def reproject(
    model: Annotated[str | None, typer.Option(
        help="Embedding model for the new vectors [default: all-MiniLM-L6-v2].")] = None,
    no_embed: Annotated[bool, typer.Option(
        "--no-embed", help="Cut only; leave the vectors to `donto-pg embed`.")] = False,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cut what a load cuts now and older loads lack: after an upgrade, the recall keys
    (user turns) and standing statements by the current rules of every conversation
    loaded before them (donto.stale_revisions), then embed them. Idempotent.

    \b
    Examples:
      donto-pg reproject            # after `donto-pg migrate` says so
      donto-pg reproject --no-embed --json
    """
    with connect(dsn) as conn:
        rows = conn.execute("select revision_id, document, keys, standing "
                            "from donto.reproject()").fetchall()
        conn.commit()
        others = _stale_revisions(conn)  # what is left: other logins' conversations
        for rev, doc, keys, standing in rows:
            progress(f"reproject: {doc} (revision {rev}): {_n(keys, 'recall key')}, "
                     f"{_n(standing, 'standing statement')}")
        r = None if no_embed or not rows else _embed(conn, model, context=None, chunks=False)
    data = {"revisions": [{"revision_id": rev, "document": doc, "keys": keys,
                           "standing": standing} for rev, doc, keys, standing in rows],
            "embedded_keys": r.keys if r else 0, "embedded_standing": r.standing if r else 0,
            "left_for_other_logins": others}
    text = (f"reprojected {_n(len(rows), 'revision')}: "
            f"{_n(sum(x[2] for x in rows), 'recall key')}, "
            f"{_n(sum(x[3] for x in rows), 'standing statement')}"
            + (f"; embedded {r.keys} keys and {r.standing} standing statements" if r else
               "; run `donto-pg embed` for their vectors" if rows else "")
            if rows else "nothing to reproject: every conversation has what a load cuts now"
            if not others else "nothing of this login's to reproject")
    left = (f"; {_n(others, 'conversation')} of other logins left for them (each reprojects "
            "its own, or the owner all)") if others else ""
    out(data, as_json, text + left)


@ext_app.command("build")
def extension_build() -> None:
    """Regenerate the prompt-template seed in sql/070, then assemble extension/donto.control
    and donto--VERSION.sql from sql/ and migrations/."""
    from donto_pg import build

    if build.write_template_seed():
        typer.echo(f"wrote {build.SEED_FILE.relative_to(mig.ROOT)}")
    for p in build.build_extension():
        typer.echo(f"wrote {p.relative_to(mig.ROOT)}")


@ext_app.command("python-path")
def extension_python_path(
    database: Annotated[str, typer.Argument(help="The database the statement names.")],
) -> None:
    """Print the ALTER DATABASE ... SET donto.python_path statement (for a superuser) that
    lets the server's Python import this donto-pg (or put the value in postgresql.conf)."""
    from donto_pg import settings

    value = settings.python_path_setting().replace("'", "''")
    name = '"' + database.replace('"', '""') + '"'
    typer.echo(f"ALTER DATABASE {name} SET donto.python_path = '{value}';")


@ext_app.command("install")
def extension_install(
    dsn: DsnOpt = None,
    create: Annotated[bool, typer.Option(
        "--create/--no-create",
        help="Also CREATE EXTENSION donto CASCADE in the database and write its settings.")] = True,
) -> None:
    """Copy the extension files into the server's extension directory (pg_config --sharedir).

    With --create (the default) the server at --dsn must be the one that directory belongs
    to (checked first: a server on another host is refused before anything is copied).
    """
    from donto_pg import __version__, build

    sharedir = build.pg_sharedir()
    if not create:
        _install_files(sharedir)
        return
    with dbmod.connect(dsn, vector=False) as conn:
        build.require_same_server(conn, sharedir)  # before anything is copied
        had = build.extension_state(conn)
        _install_files(sharedir)
        build.create_extension(conn)
    if had is None:
        typer.echo(f"created extension donto {__version__}")
    elif had == __version__:
        typer.echo(f"extension donto {had} was already created here")
    else:
        typer.echo(f"extension donto is at version {had} here: upgrade it with ALTER "
                   f"EXTENSION donto UPDATE (to {__version__}; its update scripts are "
                   "installed)")


def _install_files(sharedir) -> None:
    from donto_pg import build

    def replaced(path) -> None:
        typer.echo(f"warning: {path} had other content (an earlier build of this version): "
                   "the databases created from it stay that build (README, Migrations)",
                   err=True)

    for p in build.install_extension(sharedir, on_replace=replaced):
        typer.echo(f"installed {p}")


# -- loading, embedding, recall ----------------------------------------------------------

@app.command("load-beam")
def load_beam(
    path: Annotated[str, typer.Argument(help="BEAM root, chats/ dir, scale or conversation dir, "
                                             "chat.json, or Hugging Face rows (.jsonl/.parquet).")],
    scale: Annotated[str | None, typer.Option(
        help="Only this scale (100K, 500K, 1M, 10M).")] = None,
    conversation: Annotated[list[str] | None, typer.Option(
        "--conversation", "-c",
        help="Only this conversation id (repeatable): 1 or 100K/1.")] = None,
    no_embed: Annotated[bool, typer.Option("--no-embed", help="Skip embedding.")] = False,
    jobs: Annotated[int, typer.Option(min=1, help="Conversations loaded concurrently.")] = 2,
    model: Annotated[str | None, typer.Option(help="Embedding model (name or path).")] = None,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Load BEAM conversations: canonical text, turns, questions, recall chunks, vectors.

    Each conversation loads in its own transaction: a bad one is reported and leaves
    nothing behind, the others still load. Loading twice creates nothing new. A longer
    version of a loaded conversation is appended: only its new text is cut and embedded.
    The exit code is 1 if any conversation failed.

    \b
    Examples:
      donto-pg load-beam ../shared/data/beam --scale 100K -c 1 -c 2
      donto-pg load-beam ../shared/data/beam/chats/500K/13 --no-embed --json
    """
    from pathlib import Path

    from donto_pg import loader

    loaded = 0

    def show(r: loader.LoadResult) -> None:
        nonlocal loaded
        loaded += 1
        if as_json:
            progress(f"load: {loaded} done ({r.conversation}{'' if r.ok else ', FAILED'})")
            return
        if r.ok:
            state = ("appended: a longer version of the loaded one" if r.appended
                     else "new" if r.new_revision else "already loaded")
            typer.echo(f"{r.conversation}: revision {r.revision_id} ({state}), "
                       f"{_n(r.chars, 'char')}, {_n(r.turns, 'turn')}, {_n(r.chunks, 'chunk')}, "
                       f"{_n(r.questions, 'question')}")
        else:
            who = "" if r.conversation == "?" else f"{r.conversation}: "
            typer.secho(f"{who}FAILED: {r.error}", fg=typer.colors.RED, err=True)
        for w in r.warnings:
            typer.echo(f"  warning: {w}", err=True)
        shown = r.skipped if _DEBUG else r.skipped[:3]
        for s in shown:
            typer.echo(f"  skipped: {s}", err=True)
        if len(r.skipped) > len(shown):
            typer.echo(f"  ... and {len(r.skipped) - len(shown)} more skipped questions "
                       "(--json or --debug lists them all)", err=True)

    if _looks_like_a_chat_log(path):
        raise InputError(f"{path}: a chat log of {{role, content}} messages, not BEAM data",
                         fix="load it with `donto-pg add FILE`; load-beam reads BEAM's layout "
                             "(chat.json: batches of turns)")
    with connect(dsn) as conn:
        try:
            results = loader.load_beam(conn, path, scale=scale, conversations=conversation,
                                       on_result=show, jobs=jobs,
                                       connect=lambda: dbmod.connect(dsn, vector=False))
        except (FileNotFoundError, ValueError) as exc:
            raise InputError(str(exc), fix="give a BEAM root, chats/ dir, scale or "
                             "conversation dir, chat.json, or a .jsonl/.parquet rows file"
                             ) from exc
        if not results and Path(path).is_file() and not scale and not conversation:
            raise NothingFound(f"nothing to load at {path}", "the file holds no conversation",
                               fix="give a BEAM chat.json, or a .jsonl/.parquet file of "
                                   "Hugging Face rows (one conversation a row)")
        if not results:
            raise NothingFound(f"nothing to load at {path}",
                               "no conversation there matches" + (f" --scale {scale}" if scale
                                                                   else " the filters"),
                               fix="check --scale (100K, 500K, 1M, 10M) and -c against the "
                                   "directory's chats/<scale>/<id>/ layout")
        embedded = 0
        if not no_embed:
            embedded = _embed_conversations(conn, model,
                                            [r.conversation for r in results if r.ok])
    failed = [r for r in results if not r.ok]
    summary = {"loaded": sum(r.ok for r in results), "failed": len(failed),
               "chunks": sum(r.chunks for r in results),
               "conversations": [r.as_dict() for r in results],
               "embedded": embedded}
    out(summary, as_json, f"{summary['loaded']} loaded, {summary['failed']} failed, "
        f"{summary['chunks']} chunks, {summary['embedded']} vectors added")
    if failed:
        raise typer.Exit(1)


@app.command()
def add(
    file: Annotated[str, typer.Argument(
        help="A chat log (.json: a list of {role, content, timestamp?, session?} messages or "
             "an object with 'messages'; .jsonl: one message per line) or a plain text file.")],
    document: Annotated[str | None, typer.Option(
        "--document", "-d", help="Document IRI, starting with a scheme such as chat: "
                                 "[default: file:<absolute path of FILE>]. "
                                 "A changed text of the same document supersedes the old "
                                 "one in recall.")] = None,
    text: Annotated[bool, typer.Option(
        "--text", help="Read FILE as plain text even if it ends in .json or .jsonl.")] = False,
    no_embed: Annotated[bool, typer.Option("--no-embed", help="Leave embedding to `embed`.")
                        ] = False,
    model: Annotated[str | None, typer.Option(help="Embedding model (name or path).")] = None,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Add a chat log or a text file (donto_pg.add_conversation / add_text): revision,
    turns, recall chunks, extraction blocks (chat logs only) and vectors. Idempotent.

    \b
    Examples:
      donto-pg add chat.json -d chat:alice/1      # OpenAI-shaped messages
      donto-pg add notes.txt -d doc:alice/notes   # a plain text, recall only
      donto-pg add longer-chat.json -d chat:alice/1   # grown: only the new text is cut
    """
    from pathlib import Path

    from donto_pg import api, loader

    path = Path(file)
    if path.is_dir():
        raise InputError(f"{file}: a directory, not a file",
                         fix="give one chat log or text file; `load-beam` reads a directory "
                             "of BEAM conversations")
    if not path.is_file():
        raise InputError(f"{file}: " + ("not a regular file" if path.exists() else "no such file"))
    if document is not None and not document.strip():
        raise InputError("--document is empty", fix="give a document IRI, or leave it out")
    iri = document or f"file:{path.resolve()}"
    chat = not text and path.suffix.lower() in (".json", ".jsonl")
    with connect(dsn) as conn:
        before = loader.last_retraction(conn)
        conn.commit()
        if chat:
            messages = api.read_chat_file(path)
            with loader.notices(conn) as warnings:
                rev = api.add_conversation(conn, messages, iri, embed=not no_embed,
                                           model=model)
        else:
            warnings = []
            try:
                body = path.read_text(encoding="utf-8-sig")  # a byte-order mark is no text
            except UnicodeDecodeError as exc:
                raise InputError(f"{file}: not UTF-8 text", str(exc),
                                 fix="save the file as UTF-8") from exc
            rev = api.add_text(conn, body, iri, embed=not no_embed, model=model)
        other = loader.registered_by_another(conn, rev)
        sup = loader.supersession(conn, rev, before)
    if other:
        warnings.append(other)
    for w in warnings:
        typer.echo(f"warning: {w}", err=True)
    answering = sup.pop("answering_revision")
    data = {"document": iri, "revision_id": rev, "kind": "conversation" if chat else "text",
            "superseded": sup, "answering_revision": answering, "warnings": warnings}
    if chat:
        data["messages"] = len(messages)
    line = f"added {iri}: revision {rev} (" + (
        _n(len(messages), "message") if chat
        else "text, recall only") + ")"
    if sup["revisions"]:
        line += (f"; it supersedes revision {', '.join(map(str, sup['revisions']))} "
                 f"({_n(sup['statements'], 'statement')} of chunks and standing memory "
                 "retracted; recall with as_of before now finds them)")
    if answering != rev:
        line += (f"; this is an earlier text of the document: recall still answers from "
                 f"revision {answering} (a text registered before does not supersede a "
                 "later one)")
    out(data, as_json, line)


def _n(count: int, noun: str) -> str:
    """'1 chunk', '2,048 chunks'."""
    return f"{count:,} {noun}{'s' * (count != 1)}"


def _model_name(model: str) -> str:
    """The name a model is registered under (a local path becomes absolute)."""
    from donto_pg.core import encoder

    return encoder.resolve(model)[0]


def _looks_like_a_chat_log(path: str) -> bool:
    """Whether PATH is a JSON file whose opening reads as a chat log (a list of messages,
    or an object with "messages"), which `add` loads, rather than BEAM's batches. Reads
    only its first 4 KB."""
    import re
    from pathlib import Path

    p = Path(path)
    if not p.is_file() or p.suffix.lower() not in (".json", ".jsonl"):
        return False
    with p.open("rb") as f:
        head = f.read(4096).decode("utf-8", "replace")
    return bool(re.match(r'\s*(?:\[\s*\{\s*"(?:role|content)"|\{\s*"(?:messages|role)")', head))


def _embed(conn, model, *, context, batch=16, page=1024, chunks=True):
    from donto_pg import embed as embedmod

    return embedmod.embed_pending(conn, model, batch=batch, page=page, context=context,
                                  progress=progress_enabled(), chunks=chunks)


def _embed_conversations(conn, model, conversations) -> int:
    """Embed what is pending in the recall contexts of CONVERSATIONS (BEAM ids or document
    IRIs) only, not every pending chunk in the database; returns the vectors added."""
    from donto_pg import loader

    return sum(_embed(conn, model, context=loader.recall_context(conn, c)).embedded
               for c in dict.fromkeys(conversations))


@app.command()
def embed(
    model: Annotated[str | None, typer.Option(
        help="sentence-transformers model name or local path [default: all-MiniLM-L6-v2, "
             "shipped offline]")] = None,
    batch: Annotated[int, typer.Option(
        min=1, help="Encoding batch size (chunks are length-sorted first; 16 measured "
                    "best on CPU, BENCHMARKS.md).")] = 16,
    page: Annotated[int, typer.Option(
        min=1, help="Chunks per committed page (a kill loses at most one page).")] = 1024,
    context: Annotated[str | None, typer.Option(help="Only chunks of this context IRI.")] = None,
    keys_only: Annotated[bool, typer.Option(
        "--keys-only", help="Only the recall keys (user turns) and standing statements, "
                            "not the chunks.")] = False,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Embed every recall chunk, recall key (user turn) and standing statement (and its
    condition, "when I ask about X") that has no vector for the model (resumable;
    kill-safe). A login other than the schema's owner embeds only what it filed.

    \b
    Examples:
      donto-pg embed                                   # everything pending
      donto-pg embed --context ctx:memory/episodic/beam/100K/1 --json
    """
    with connect(dsn) as conn:
        r = _embed(conn, model, context=context, batch=batch, page=page, chunks=not keys_only)
    data = {"model": r.model, "model_id": r.model_id, "dimension": r.dimension,
            "embedded": r.embedded, "encoded": r.encoded, "already": r.already,
            "seconds": round(r.seconds, 2),
            "chunks_per_second": round(r.rate, 1), "index": r.index, "keys": r.keys,
            "standing": r.standing, "standing_conditions": r.conditions,
            "standing_reused": r.standing_reused, "left_for_other_logins": r.others}
    left = (f"; {r.others} chunks filed by other logins left for them (a writer embeds only "
            "what it filed)") if r.others else ""
    out(data, as_json, f"embedded {r.embedded} chunks with {r.model} ({r.dimension}-d) in "
        f"{r.seconds:.1f}s ({r.rate:.1f}/s; {r.encoded} texts encoded, the rest from the "
        f"cache); {r.already} already had vectors; index {r.index}; "
        f"{r.keys} recall keys, {r.standing} standing statements ({r.conditions} conditions; "
        f"{r.standing_reused} vectors reused from an earlier revision)" + left)


@app.command()
def recall(
    query: Annotated[str, typer.Argument(help="What to recall.")],
    k: Annotated[int, typer.Option(
        "--k", "-k", min=1, max=10000,
        help="How many places: chunks, and (hybrid) the standing block or a block of "
             "user turns as one each.")] = 10,
    conversation: Annotated[str | None, typer.Option(
        "--conversation", "-c", help="Only this conversation: a BEAM id (100K/1) or the "
                                     "document name given to add (chat:alice/1).")] = None,
    context: Annotated[str | None, typer.Option(help="Only this context IRI.")] = None,
    arms: Annotated[str, typer.Option(help="vector, lexical or hybrid.")] = "hybrid",
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Recall chunks for a query with donto.recall (the same call works in psql).

    Results are numbered by place: each chunk is one, and with the hybrid arm the standing
    block (the user's instructions and preferences in force that apply) is one, however
    many statements it holds; a question about what the user brought up ("the order in
    which I brought up ...") gets blocks of the user's own turns, several to a place.
    --json gives every row with its "place".

    \b
    Examples:
      donto-pg recall "where does my sister live?" -c chat:alice/1 -k 5
      donto-pg recall "audiobook recommendations" -c 100K/1 --arms lexical --json
    """
    from donto_pg import embed as embedmod
    from donto_pg import loader

    if len(recall_arms(arms)) != 1:
        raise fail(f"--arms {arms}: recall takes one arm", fix="use vector, lexical or hybrid")
    if not query.strip():
        raise InputError("the query is empty", fix='ask something: donto-pg recall "where do I '
                                                    'live?"')
    for name, given in (("-c/--conversation", conversation), ("--context", context)):
        if given is not None and not given.strip():
            raise InputError(f"{name} is empty", fix="name a conversation or context, or leave "
                                                      "it out to search every context")
    with connect(dsn) as conn:
        if conversation:
            context = loader.recall_context(conn, conversation)
        if context is not None and conn.execute(
                "select 1 from donto.context where iri = %s", (context,)).fetchone() is None:
            raise InputError(f"no context {context}",
                             fix="name a loaded conversation: -c 100K/13 (a BEAM id with its "
                                 "scale) or -c chat:alice/1 (a document IRI); select iri from "
                                 "donto.document lists them")
        rows = conn.execute(
            "select statement_id, revision_id, char_start, char_end, score, valid_time::text, "
            "chunk_text, vector_rank, lexical_rank, place "
            "from donto.recall(%s::text, k => %s::integer, context => %s::text, "
            "arms => %s::text)",
            (query, k, context, arms)).fetchall()
        if arms != "lexical" and context is not None:
            missing, total, standing = embedmod.unembedded(conn, context)
            if missing:
                typer.echo(f"note: {missing:,} of {total:,} chunks of {context} have no vector "
                           "yet, so the vector arm does not see them: run `donto-pg embed`",
                           err=True)
            if standing and arms == "hybrid":
                typer.echo(f"note: {_n(standing, 'standing statement')} in "
                           f"force ha{'ve' if standing != 1 else 's'} no vector yet, so the "
                           "standing block leaves them out: run `donto-pg embed`", err=True)
    keys = ["statement_id", "revision_id", "char_start", "char_end", "score", "valid_time",
            "text", "vector_rank", "lexical_rank", "place"]
    data = [dict(zip(keys, r, strict=True)) for r in rows]
    if as_json:
        out(data, True)
        return
    for i, d in enumerate(data):
        number = f"{d['place']:2}." if i == 0 or data[i - 1]["place"] != d["place"] else "   "
        where = f"[{d['revision_id']}:{d['char_start']}-{d['char_end']}]"
        vec, lex = (d["vector_rank"] or "-"), (d["lexical_rank"] or "-")
        how = ("standing, similarity" if d["vector_rank"] is None and d["lexical_rank"] is None
               else f"(vec {vec}, lex {lex}) score")
        snippet = " ".join(d["text"].split())[:160]
        typer.echo(f"{number} {where} {how} {d['score']:.4f} {d['valid_time']}\n    {snippet}")


# -- projection B: extraction ---------------------------------------------------------------

RevisionOpt = Annotated[list[int] | None, typer.Option(
    "--revision", "-r", help="Revision id (repeatable).")]
ConversationOpt = Annotated[list[str] | None, typer.Option(
    "--conversation", "-c", help="Conversation, e.g. 100K/1 (repeatable) [default: all].")]
ParamsOpt = Annotated[str | None, typer.Option(
    help='Segmenter parameters as JSON, e.g. \'{"cap": 3000}\' [default: cap 4000, target 2000].')]


def _params(params: str | None) -> dict | None:
    if params is None:
        return None
    try:
        value = json.loads(params)
    except json.JSONDecodeError as exc:
        raise fail(f"--params is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise fail("--params must be a JSON object")
    return value


def _revisions(conn, revision: list[int] | None, conversation: list[str] | None) -> list[int]:
    """The revisions -r/-c select (extract.resolve_revisions), or a NothingFound error."""
    from donto_pg import extract

    try:
        return extract.resolve_revisions(conn, revision, conversation)
    finally:
        conn.commit()


@app.command("project-extraction")
def project_extraction(
    revision: RevisionOpt = None,
    conversation: ConversationOpt = None,
    params: ParamsOpt = None,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cut extraction blocks (projection B) with donto.project_extraction (idempotent)."""
    from donto_pg import extract

    with connect(dsn) as conn:
        _revisions(conn, revision, conversation)
        results = extract.project_extraction(
            conn, revision_ids=revision, conversations=conversation, params=_params(params),
            on_result=lambda r: progress(f"project-extraction: revision {r.revision_id} "
                                         f"({r.document}): {r.blocks} blocks"))
    data = [r.as_dict() for r in results]
    out(data, as_json, "\n".join(
        f"{d['document']}: revision {d['revision_id']}, {d['blocks']} blocks {d['by_kind']}"
        for d in data) or "nothing to project (load a conversation first)")


@app.command(help=f"""Extract claims from pending blocks; resumable, with a live alarm.

    Each block is rendered by donto.render_for_extraction, sent to the provider(s)
    and ingested by donto.ingest_extraction. Kill it at any time and run it again:
    no block is extracted twice and none is lost. The alarm stops the run when,
    after --alarm-after blocks, the injection rate is above {ALARM_MAX_INJECTION} or the
    median anchor rate of dialogue blocks is below {ALARM_MIN_ANCHOR}. Exit code 1 when it
    stopped early.
    """)
def extract(
    provider_config: Annotated[str | None, typer.Option(
        help="TOML file of OpenAI-compatible providers ([[provider]] tables; keys from env).")
    ] = None,
    provider: Annotated[str | None, typer.Option(
        help="'baseline' for the offline rule-based extractor (the default with no config).")
    ] = None,
    revision: RevisionOpt = None,
    conversation: ConversationOpt = None,
    params: ParamsOpt = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Blocks in flight at once.")] = 4,
    alarm_after: Annotated[int, typer.Option(
        min=0, help="Check the alarm after this many blocks (0: never).")] = 500,
    limit: Annotated[int | None, typer.Option(min=1, help="Stop after this many blocks.")] = None,
    run_name: Annotated[str | None, typer.Option(help="Name a separate run.")] = None,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    from donto_pg import extract as ex

    if provider_config and provider:
        raise fail("give --provider-config or --provider, not both")
    if provider not in (None, "baseline"):
        raise fail("--provider takes only 'baseline'; put real providers in --provider-config")
    pool = providers(provider_config)
    url = dbmod.resolve_dsn(dsn)
    with connect(url) as conn:
        _revisions(conn, revision, conversation)

    live = progress_enabled()

    def progress(p) -> None:
        if live:
            typer.echo("\r" + ex.format_progress(p), nl=False, err=True)

    report = ex.run_extraction(lambda: dbmod.connect(url), revision_ids=revision,
                               conversations=conversation, providers=pool,
                               concurrency=concurrency, alarm_after=alarm_after, limit=limit,
                               params=_params(params), run_name=run_name, on_progress=progress)
    if live:
        typer.echo("", err=True)
    out(report.as_dict(), as_json, ex.format_report(report))
    if not report.ok:
        raise typer.Exit(1)


# -- evaluation --------------------------------------------------------------------------

eval_app = typer.Typer(help="LLM-free benchmarks.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


@eval_app.command("recall")
def eval_recall(
    path: Annotated[str, typer.Argument(
        help="BEAM data to evaluate (loaded and embedded first if needed; idempotent).")],
    k: Annotated[list[int] | None, typer.Option(
        "--k", min=1, max=10000, help="k values [default: 1 5 10].")] = None,
    arms: Annotated[str, typer.Option(help="Comma-separated: vector,lexical,hybrid.")
                    ] = "vector,lexical,hybrid",
    scale: Annotated[str | None, typer.Option(help="Only this scale.")] = None,
    conversation: ConversationOpt = None,
    plot: Annotated[str | None, typer.Option(help="Write a hit@k-per-ability chart (PNG).")
                    ] = None,
    summaries: Annotated[bool, typer.Option(
        "--summaries", help="Also score session summaries (reported apart from chunks).")
    ] = False,
    summary_k: Annotated[list[int] | None, typer.Option(
        min=1, max=10000, help="k values for summaries [default: 1 2 3].")] = None,
    model: Annotated[str | None, typer.Option(
        help="Embedding model to recall with (embedded first if needed).")] = None,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Hit@k of donto.recall per ability on BEAM probing questions, with a random baseline.

    hit@k = 1 when any of the top-k places (chunks; a standing or turn block is one) overlaps a
    gold turn; abstention is left out;
    summarization also reports the fraction of gold turns hit.
    """
    from donto_pg import evaluate, loader

    arm_list = recall_arms(arms)
    with connect(dsn) as conn:
        try:
            loaded = loader.load_beam(conn, path, scale=scale, conversations=conversation)
        except (FileNotFoundError, ValueError) as exc:
            raise InputError(str(exc)) from exc
        for r in loaded:
            if not r.ok:
                typer.secho(f"{r.conversation}: FAILED: {r.error}", fg=typer.colors.RED, err=True)
        convs = [r.conversation for r in loaded if r.ok]
        if not convs:
            raise NothingFound(f"no conversation could be loaded from {path}",
                               fix="check the path, --scale and -c (see the lines above)")
        if set(arm_list) - {"lexical"} or summaries:
            _embed_conversations(conn, model, convs)
        report = evaluate.eval_recall(conn, ks=k or (1, 5, 10), arms=arm_list,
                                      conversations=convs, model=model and _model_name(model))
        if summaries:
            from donto_pg import summaries as summod

            summod.summarize_sessions(conn, conversations=convs)
            report["summaries"] = summod.eval_summaries(
                conn, conversations=convs, ks=summary_k or (1, 2, 3), chunk_report=report,
                chunk_k=max(report["ks"]))
    if plot:
        from donto_pg import plots

        try:
            plots.plot_recall(report, plot)
        except RuntimeError as exc:
            raise DontoError("cannot write the plot", str(exc)) from exc
    if as_json:
        out(report, True)
        return
    typer.echo(evaluate.format_table(report))
    if summaries:
        from donto_pg import summaries as summod

        typer.echo(summod.format_summary_eval(report["summaries"]))
    if plot:
        typer.echo(f"wrote {plot}")


# -- measurement: A/B gate, session summaries ------------------------------------------------

ProviderConfigOpt = Annotated[str | None, typer.Option(
    help="TOML file of LLM providers [default: the offline baseline / extractive].")]


@app.command()
def ab(
    holdout: Annotated[list[str] | None, typer.Option(
        help="Holdout conversation, e.g. 100K/1 (repeatable) [default: a stratified pick].")
    ] = None,
    holdout_size: Annotated[int, typer.Option(min=2, help="Size of an automatic holdout.")] = 2,
    arm: Annotated[list[str] | None, typer.Option(
        help="NAME=STRATEGY:PARAMS, e.g. fixed1200=fixed:window=1200, semantic=semantic:, "
             "semantic3k=semantic:cap=3000 (repeatable) [default: those three].")] = None,
    provider_config: ProviderConfigOpt = None,
    k: Annotated[int, typer.Option(min=1, help="Recall hit@k for the gate.")] = 10,
    model: Annotated[str | None, typer.Option(help="Embedding model.")] = None,
    recall_arm: Annotated[str, typer.Option(help="vector, lexical or hybrid.")] = "hybrid",
    concurrency: Annotated[int, typer.Option(min=1)] = 4,
    alarm_after: Annotated[int, typer.Option(min=0, help="Blocks before the live alarm.")] = 50,
    reject_injection: Annotated[float, typer.Option(
        help="Early reject above this.")] = ALARM_MAX_INJECTION,
    reject_anchor: Annotated[float, typer.Option(
        help="Early reject below this.")] = ALARM_MIN_ANCHOR,
    max_injection: Annotated[float, typer.Option(help="Commit needs at most this.")] = 0.02,
    min_anchor: Annotated[float | None, typer.Option(
        help="Commit needs at least this (default: donto.healthy_anchor_rate()).")] = None,
    min_hypothesis: Annotated[float, typer.Option(help="'re-prompt' at or above this.")] = 0.5,
    max_zero_fact: Annotated[float, typer.Option(help="'re-chunk' above this.")] = 0.5,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Gate competing chunkings on a stratified holdout before spending a full run.

    Each arm re-chunks only the holdout into ctx:measure/<arm>/..., extracts once,
    is rejected early on injection or anchor rate, and survivors are scored by recall
    hit@k against projection A's fixed 1,200-char windows in the same run. The verdict
    per arm (commit / re-prompt / re-chunk / reject) is computed in SQL by donto.ab_verdict.
    A holdout needs probing questions with gold turns (load-beam loads them): without
    any, recall is not measured and no arm commits.
    """
    from donto_pg import ab as abmod

    for spec in arm or ():
        try:
            abmod.parse_arm(spec)
        except ValueError as exc:
            raise fail(f"--arm {spec}", str(exc)) from exc
    recall_arms(recall_arm)
    pool = providers(provider_config)
    url = dbmod.resolve_dsn(dsn)
    connect(url).close()

    def event(e: dict) -> None:
        if not as_json:
            typer.echo(json.dumps(e, default=str), err=True)

    report = abmod.run_ab(
        lambda: dbmod.connect(url), holdout=holdout, holdout_size=holdout_size,
        arms=arm or abmod.DEFAULT_ARMS,
        providers=pool,
        k=k, model=model, recall_arm=recall_arm, concurrency=concurrency,
        alarm_after=alarm_after, reject_injection=reject_injection, reject_anchor=reject_anchor,
        max_injection=max_injection, min_anchor=min_anchor, min_hypothesis=min_hypothesis,
        max_zero_fact=max_zero_fact, on_event=event)
    out(report, as_json, abmod.format_ab(report))


@app.command()
def summarize(
    conversation: ConversationOpt = None,
    revision: RevisionOpt = None,
    provider_config: ProviderConfigOpt = None,
    model: Annotated[str | None, typer.Option(help="Embedding model.")] = None,
    max_chars: Annotated[int, typer.Option(min=100, help="Longest summary.")] = 1000,
    no_embed: Annotated[bool, typer.Option("--no-embed", help="Do not embed them.")] = False,
    dsn: DsnOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """One summary per session (abstractive with a provider, else extractive and labelled so),
    embedded as a coarse recall key (donto.recall_summaries; never mixed into donto.recall)."""
    from donto_pg import summaries

    pool = providers(provider_config)
    with connect(dsn) as conn:
        report = summaries.summarize_sessions(
            conn, revision_ids=revision, conversations=conversation,
            providers=pool,
            model=model, max_chars=max_chars, embed=not no_embed)
    out(report, as_json)


@app.command()
def dashboard(
    port: Annotated[int, typer.Option(
        min=0, max=65535, help="Port on 127.0.0.1 (0: any free port).")] = 8765,
    eval_json: Annotated[str | None, typer.Option(
        "--eval-json", help="Report from `donto-pg eval recall --json > FILE` for the hit@k "
                            "charts; re-read when it changes.")] = None,
    dsn: DsnOpt = None,
) -> None:
    """Serve the live quality dashboard on http://127.0.0.1:PORT/ (read-only; Ctrl-C stops).

    It prints the page's URL with a random token (?token=...): any local user can reach
    127.0.0.1, so without the token the page and its data are refused (403)."""
    from donto_pg import dashboard as dash

    dash.run(dbmod.resolve_dsn(dsn), port, eval_json=eval_json, echo=typer.echo)


@app.command()
def demo(
    path: Annotated[str | None, typer.Argument(
        help="A BEAM conversation dir [default: the bundled examples/beam/chats/100K/13].")] = None,
    provider_config: Annotated[str | None, typer.Option(
        envvar="DONTO_PROVIDER_CONFIG",
        help="LLM providers (TOML) for the extraction step [default: offline baseline].")] = None,
    dsn: DsnOpt = None,
) -> None:
    """Walk through donto-pg on one BEAM conversation (embedded database by default)."""
    from pathlib import Path

    from donto_pg import demo as demomod

    url = dbmod.resolve_dsn(dsn)
    typer.echo(f"database: {dbmod.shown(url)}")
    with dbmod.connect(url, vector=False) as conn:
        applied = mig.migrate(conn)
        typer.echo("migrated: " + (", ".join(applied) if applied else "up to date"))
    with dbmod.connect(url) as conn:
        demomod.run(conn, url, typer.echo, Path(path) if path else demomod.EXAMPLE,
                    provider_config)


_JSON_ERRORS = False  # --json was given: an error is also one JSON object on standard output


def _report(lines: list[str], code: int) -> None:
    typer.secho(lines[0], fg=typer.colors.RED, err=True)
    for line in lines[1:]:
        typer.echo(line, err=True)
    if _JSON_ERRORS:
        fix = next((ln.strip()[len("fix: "):] for ln in lines[1:]
                    if ln.strip().startswith("fix: ")), None)
        typer.echo(json.dumps({"ok": False, "error": lines[0].removeprefix("error: "),
                               "fix": fix, "exit_code": code}))


_SIGTERM: list[int] = []  # the signal, once it came


def _terminated(signum, frame) -> None:
    _SIGTERM.append(signum)
    raise errors.Terminated("SIGTERM")


def main(argv: list[str] | None = None) -> None:
    """The `donto-pg` entry point: every error ends here as one or two lines on standard
    error and a non-zero exit code (2 when the command line does not parse), its
    traceback only with --debug
    (anywhere on the command line) or DONTO_DEBUG=1."""
    global _DEBUG
    args = list(sys.argv[1:] if argv is None else argv)
    cut = args.index("--") if "--" in args else len(args)
    if "--debug" in args[:cut]:
        args.remove("--debug")
        _DEBUG = True
    _DEBUG = _DEBUG or os.environ.get("DONTO_DEBUG", "") not in ("", "0")
    global _JSON_ERRORS
    _JSON_ERRORS = "--json" in args[:cut]
    if argv is None:  # the command line, not a caller's own process
        signal.signal(signal.SIGTERM, _terminated)
    try:
        code = app(args=args, prog_name="donto-pg", standalone_mode=False)
    except typer.TyperException as exc:  # click's usage errors: a bad option or argument
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare `donto-pg` or group: the help
            typer.echo(exc.format_message())
            sys.exit(2)
        ctx = getattr(exc, "ctx", None)
        where = f"donto-pg {ctx.command_path.split(' ', 1)[1]}" if ctx and " " in ctx.command_path \
            else "donto-pg"
        code = getattr(exc, "exit_code", 2) or 2
        _report([f"error: {' '.join(exc.format_message().split())}",
                 f"  fix: see `{where} --help`"], code)
        sys.exit(code)
    except typer.Abort:
        _report(["interrupted"], 130)
        sys.exit(130)
    except (Exception, KeyboardInterrupt) as exc:
        if _DEBUG:
            raise
        told = errors.explain(exc) or errors.explain_bug(exc)
        _report(told.lines, told.exit_code)
        sys.exit(told.exit_code)
    if _SIGTERM:  # typer ends a KeyboardInterrupt in its command with exit code 130
        _report(["terminated (SIGTERM)"], 143)
        sys.exit(143)
    sys.exit(code if isinstance(code, int) else 0)
