"""donto-pg: the command line. Every command is a short call into the database API.

With no --dsn and no DONTO_DSN, commands use the embedded cluster under
DONTO_HOME, started on demand (see `donto-pg db --help`).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from donto_pg import db as dbmod
from donto_pg import migrate as mig
from donto_pg.cluster import Cluster, ClusterError

app = typer.Typer(
    help=__doc__,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
db_app = typer.Typer(help="Manage the embedded PostgreSQL cluster (ignored with --dsn/DONTO_DSN).",
                     no_args_is_help=True)
ext_app = typer.Typer(help="Build and install the donto PostgreSQL extension (CREATE EXTENSION).",
                      no_args_is_help=True)
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


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code)


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
    """Print the DSN commands use (psql "$(donto-pg db url)" works)."""
    typer.echo(dbmod.resolve_dsn(dsn))


# -- migrate / extension ------------------------------------------------------------

@app.command()
def migrate(
    dsn: DsnOpt = None,
    status: Annotated[bool, typer.Option("--status", help="List applied and pending.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the SQL; change nothing.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Install or upgrade the donto schema (safe to re-run: a no-op when up to date)."""
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
            for s in mig.plan(conn):
                typer.echo(f"-- {s.name}\n{s.text}")
            return
        applied = mig.migrate(conn)
    out({"applied": applied}, as_json,
        f"applied {', '.join(applied)}" if applied else "up to date (nothing to apply)")


@ext_app.command("build")
def extension_build() -> None:
    """Assemble extension/donto.control and donto--VERSION.sql from sql/ and migrations/."""
    for p in mig.build_extension():
        typer.echo(f"wrote {p.relative_to(mig.ROOT)}")


@ext_app.command("install")
def extension_install(
    dsn: DsnOpt = None,
    create: Annotated[bool, typer.Option(
        "--create/--no-create",
        help="Also CREATE EXTENSION donto CASCADE in the database and write its settings.")] = True,
) -> None:
    """Copy the extension files into the server's extension directory (pg_config --sharedir)."""
    for p in mig.install_extension():
        typer.echo(f"installed {p}")
    if create:
        with dbmod.connect(dsn, vector=False) as conn:
            mig.create_extension(conn)
        typer.echo("created extension donto")


def main() -> None:  # pragma: no cover
    try:
        app()
    except (ClusterError, mig.MigrationError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        sys.exit(1)
