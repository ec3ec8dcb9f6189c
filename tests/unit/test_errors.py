"""How the CLI prints an error (donto_pg.errors.explain)."""

from __future__ import annotations

from donto_pg.errors import WHY_LIMIT, DatabaseError, explain


def test_a_server_message_is_printed_with_the_fix_it_names():
    """Found by review: the reason was cut at 240 characters, and the server's boot error
    names its fix inside its message (ALTER DATABASE ..., the command that prints the path,
    then reconnect): the CLI printed "(the statement `donto-pg e..."."""
    why = ("donto: the server's Python does not know where donto_pg is installed (it is not "
           "importable from the server's own Python, and donto.python_path is not set for "
           "this database): as a superuser run ALTER DATABASE memx2 SET donto.python_path = "
           "'<dirs>' (the statement `donto-pg extension python-path` prints, run where "
           "donto-pg is installed), or set it in postgresql.conf, then reconnect")
    assert 240 < len(why) < WHY_LIMIT
    first = explain(DatabaseError("the database refused (XX000)", why)).lines[0]
    assert first.endswith("then reconnect")
    cut = explain(DatabaseError("the database refused (XX000)", "x" * 50_000)).lines[0]
    assert cut.endswith("...") and len(cut) < WHY_LIMIT + 60
