"""Errors a person can act on: what failed, why, and what to do.

Client code raises a :class:`DontoError` (or a subclass) with three parts; the CLI's
``main()`` prints any error as one or two lines through :func:`explain`, which also
turns the exceptions of psycopg (by SQLSTATE), the embedded cluster and the file
system into the same shape. Nothing prints a traceback unless ``--debug`` is given.

    error: cannot connect to the database: connection to server ... failed
      fix: check --dsn / DONTO_DSN, or unset both to use the embedded cluster

This module imports nothing heavy (no psycopg at import time), so that every client
module may use it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


class DontoError(Exception):
    """A failure with ``what`` failed, ``why`` (optional) and ``fix`` (optional).

    ``str(err)`` is ``"what: why"``; the CLI prints the fix on a second line.
    """

    def __init__(self, what: str, why: str | None = None, *, fix: str | None = None) -> None:
        self.what = _one_line(what)
        self.why = _one_line(why) if why else None
        self.fix = _one_line(fix) if fix else None
        super().__init__(self.what if self.why is None else f"{self.what}: {self.why}")


class UsageError(DontoError):
    """An option or argument has a value that cannot work."""


class InputError(DontoError):
    """An input file is missing, unreadable or not in a format donto-pg reads."""


class NothingFound(DontoError):
    """The input or the database has nothing that matches what was asked for."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a service manager's stop) in the CLI, raised where it runs so that
    long work ends as on Ctrl-C: extract records its ``interrupted`` event, a load rolls
    back its conversation."""


class DatabaseError(DontoError):
    """The database refused or could not be reached (see :func:`explain`)."""


class SchemaMissing(DatabaseError):
    """The connected database has no donto schema (or an older one)."""

    def __init__(self, why: str | None = None) -> None:
        super().__init__("the database has no donto schema (or an older one)", why,
                         fix="run `donto-pg migrate` (or CREATE EXTENSION donto CASCADE) first; "
                             "a database made with CREATE EXTENSION is upgraded with "
                             "ALTER EXTENSION donto UPDATE")


class SchemaVersion(DatabaseError):
    """The connected database's donto schema is of another donto-pg version."""

    def __init__(self, database: str | None, client: str, extension: bool, *,
                 newer: bool = False, unknown: list[str] | None = None) -> None:
        upgrade = ("`donto-pg extension install`, then ALTER EXTENSION donto UPDATE"
                   if extension else "`donto-pg migrate`")
        if unknown:  # migrations of a later build, whatever version the SQL says
            what = (f"the database's donto schema is of a later donto-pg than this one "
                    f"({client}): it has migration(s) {', '.join(unknown)}")
        else:
            what = f"the database's donto schema is version {database}, this donto-pg is {client}"
        fix = ("install the donto-pg that migrated it" + (f" ({database})" if database else "")
               + ": a database is never downgraded" if newer or unknown else
               f"upgrade the database with {upgrade} (from donto-pg {client}), or use "
               f"donto-pg {database}")
        super().__init__(what, fix=fix)


class SchemaBehind(DatabaseError):
    """The connected database's donto schema is this donto-pg's version, but an earlier
    build of it: migrations of this build are not in its ledger."""

    def __init__(self, missing: list[str], client: str, extension: bool) -> None:
        fix = ("an unreleased version has no ALTER EXTENSION path between its builds: dump "
               "the data (pg_dump --data-only --schema donto), DROP EXTENSION donto CASCADE, "
               "CREATE EXTENSION donto CASCADE, restore the data; or use the donto-pg build "
               "the database was made with" if extension else "run `donto-pg migrate`")
        super().__init__(f"the database's donto schema is an earlier build of {client}: it "
                         f"lacks migration(s) {', '.join(missing)}", fix=fix)


@dataclass(frozen=True)
class Explained:
    """An error as the CLI prints it: one or two lines and an exit code."""

    lines: list[str]
    exit_code: int = 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _short(text: str, limit: int = 240) -> str:
    text = _one_line(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: The most characters of an error's reason the CLI prints: the server's own messages
#: name their fix inside (a boot error's ALTER DATABASE ... and how to get the path).
WHY_LIMIT = 1000


def _lines(err: DontoError) -> list[str]:
    first = f"error: {err.what}" + (f": {_short(err.why, WHY_LIMIT)}" if err.why else "")
    return [first] + ([f"  fix: {err.fix}"] if err.fix else [])


# SQLSTATE classes and codes the CLI explains; anything else is "the database refused".
_CONNECT_FIX = ("check --dsn / DONTO_DSN (host, port, database, user, password), "
                "or unset both to use the embedded cluster")
_SQLSTATE_FIX = {
    "42501": "connect as a role that has this privilege (the schema's owner, or a superuser "
             "for CREATE EXTENSION)",
    "28000": _CONNECT_FIX,
    "28P01": _CONNECT_FIX,
    "3D000": "create the database first (createdb), or point --dsn / DONTO_DSN at another",
    "57P01": "an administrator ended this session (pg_terminate_backend) or shut the server "
             "down: check that it runs, then re-run the command",
    "53300": "the server has no free connection slot: close other clients or raise "
             "max_connections",
}


# PL/Python puts the Python exception's class before the message of an error raised in
# the server's Python (plpy.error): "plpy.Error: donto...", also twice over.
_PLPY_PREFIX = re.compile(r"^(?:(?:plpy|spiexceptions)\.\w+: )+")


def from_database(exc: Exception) -> DontoError:
    """A psycopg error as a DontoError, by its SQLSTATE (and connection failures)."""
    import psycopg

    state = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    message = _PLPY_PREFIX.sub("", (diag.message_primary if diag is not None else None)
                               or str(exc))
    hint = diag.message_hint if diag is not None else None
    if state is None and isinstance(exc, psycopg.OperationalError):
        return DatabaseError("cannot connect to the database", _first_line(str(exc)),
                             fix=_CONNECT_FIX)
    if state in ("42883", "3F000", "42P01") and "donto" in (message or ""):
        return SchemaMissing(message)
    fix = hint or _SQLSTATE_FIX.get(state or "")
    if state and state.startswith("08"):
        return DatabaseError("lost the connection to the database", message, fix=_CONNECT_FIX)
    return DatabaseError(f"the database refused ({state})" if state else "database error",
                         message, fix=fix)


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else str(text)


def explain(exc: BaseException) -> Explained | None:
    """How the CLI reports EXC, or None when it is not an error a person can act on
    (a bug: the CLI then says so in two lines and points at ``--debug``)."""
    import psycopg

    from donto_pg.cluster import ClusterError

    if isinstance(exc, DontoError):
        return Explained(_lines(exc))
    if isinstance(exc, psycopg.Error):
        return Explained(_lines(from_database(exc)))
    if isinstance(exc, ClusterError):
        return Explained(_lines(DontoError("the embedded cluster failed", str(exc),
                                           fix="see `donto-pg db status`; or give --dsn")))
    if isinstance(exc, FileNotFoundError):
        name = exc.filename or _first_line(str(exc))
        return Explained(_lines(InputError(f"{name}: no such file or directory")))
    if isinstance(exc, PermissionError):
        name = exc.filename or _first_line(str(exc))
        return Explained(_lines(InputError(f"{name}: permission denied",
                                           fix="run as a user who may read (or write) it")))
    if isinstance(exc, KeyboardInterrupt):
        return Explained(["interrupted"], 130)
    return None


def explain_bug(exc: BaseException) -> Explained:
    """The two lines for an unexpected exception (a bug in donto-pg)."""
    return Explained([f"error: unexpected {type(exc).__name__}: {_short(str(exc))}",
                      "  fix: re-run with --debug for the traceback, and report it"])
