"""Every CLI error is one or two lines on standard error (what failed and why, then what
to do), with a non-zero exit code and no traceback unless --debug. The real CLI runs as
a subprocess against the test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import typer

from donto_pg import build, cli
from tests.conftest import EXAMPLES, ROOT


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DONTO_DSN", "DONTO_DEBUG",
                                                             "DONTO_PROGRESS")}
    return subprocess.run([sys.executable, "-m", "donto_pg", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=300, env={**base, **(env or {})})


def dsn_of(conn: psycopg.Connection) -> str:
    i = conn.info
    return f"host={i.host} port={i.port} user={i.user} dbname={i.dbname}"


def assert_short_error(r: subprocess.CompletedProcess[str], *needles: str, code: int = 1
                       ) -> list[str]:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    assert 1 <= len(lines) <= 2, r.stderr
    assert lines[0].startswith("error: "), r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    return lines


@pytest.fixture
def empty_db(donto_proc):
    """A database without the donto schema."""
    name = f"{donto_proc.dbname}_noschema"
    admin = dict(host=donto_proc.host, port=donto_proc.port, user=donto_proc.user,
                 dbname="postgres", autocommit=True)
    with psycopg.connect(**admin) as c:
        c.execute(f"drop database if exists {name}")
        c.execute(f"create database {name}")
    yield f"host={donto_proc.host} port={donto_proc.port} user={donto_proc.user} dbname={name}"
    with psycopg.connect(**admin) as c:
        c.execute(f"drop database if exists {name} with (force)")


def test_wrong_dsn():
    r = run("migrate", "--dsn", "host=/nonexistent-donto dbname=x")
    lines = assert_short_error(r, "cannot connect to the database", "/nonexistent-donto")
    assert "DONTO_DSN" in lines[1]


def test_a_server_that_never_answers_is_given_up_on(tmp_path):
    """Found by review: a host that accepts the connection and never answers held the CLI
    and the API for minutes (psycopg's own limit is 130 s). A listener that accepts and
    stays silent for 60 s: donto-pg gives up after its 10 s default, the DSN's
    connect_timeout wins over it, and the API raises a DontoError, not psycopg's."""
    import socket
    import threading
    import time

    from donto_pg import api
    from donto_pg.errors import DatabaseError

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    closer = threading.Timer(60, lambda: [s.close() for s in held])  # old code: not a hang
    closer.start()
    try:
        dsn = f"host=127.0.0.1 port={port} dbname=x user=x"
        started = time.monotonic()
        r = run("recall", "where?", "--dsn", dsn)
        assert_short_error(r, "cannot connect to the database",
                           "did not answer within 10 s", "connect_timeout")
        assert time.monotonic() - started < 45
        started = time.monotonic()
        with pytest.raises(DatabaseError, match="did not answer within 3 s"):
            api.connect(dsn + " connect_timeout=3")
        assert time.monotonic() - started < 8
    finally:
        closer.cancel()
        listener.close()
        for s in held:
            s.close()


def test_a_malformed_dsn_says_so_and_how_one_is_written():
    """libpq cannot parse it: nothing was tried, so not "cannot connect" (and no
    traceback); the Python API raises the same InputError."""
    from donto_pg import api
    from donto_pg.errors import InputError

    for dsn, why in (("garbage", 'missing "="'), ("dbname=x fooopt=1", '"fooopt"'),
                     ("postgresql://a b@localhost/x", "percent-encoded")):
        lines = assert_short_error(run("migrate", "--dsn", dsn), "the DSN is malformed", why)
        assert "postgresql://user@host:5432/dbname" in lines[1], lines
    with pytest.raises(InputError, match="the DSN is malformed"):
        api.connect("dbname=x fooopt=1")


def test_extension_install_refuses_a_server_that_reads_another_directory(db, tmp_path):
    """This machine's pg_config is not the server's (a server on another host, another
    installation): installing there and creating the extension on the server would
    create whatever copy the server has. Refused before anything is copied."""
    share = tmp_path / "share"
    (share / "extension").mkdir(parents=True)
    fake = tmp_path / "pg_config"
    fake.write_text(f"#!/bin/sh\necho {share}\n")
    fake.chmod(0o755)
    r = run("extension", "install", "--dsn", dsn_of(db), env={"PG_CONFIG": str(fake)})
    assert_short_error(r, "the server reads its extensions from", str(share),
                       "install --no-create` on the database host")
    assert list((share / "extension").iterdir()) == []
    assert db.execute("select count(*) from pg_extension where extname = 'donto'"
                      ).fetchone() == (0,)


def fake_pg_config(where: Path, sharedir: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "pg_config"
    exe.write_text(f"#!/bin/sh\necho '{sharedir}'\n")
    exe.chmod(0o755)
    return exe


def test_extension_install_files_the_pg_config_it_should_and_says_what_it_replaced(tmp_path):
    """Found by review: a pg_config on PATH won over DONTO_PG_BIN (the PostgreSQL the
    embedded cluster runs), an empty or relative --sharedir was used as a directory, and
    a file of this version with other content was replaced without a word."""
    on_path = fake_pg_config(tmp_path / "path", str(tmp_path / "path-share"))
    ours = tmp_path / "ours-share"
    (ours / "extension").mkdir(parents=True)
    fake_pg_config(tmp_path / "bin", str(ours))
    env = {"PATH": f"{on_path.parent}:{os.environ['PATH']}",
           "DONTO_PG_BIN": str(tmp_path / "bin")}
    r = run("extension", "install", "--no-create", env=env)
    assert r.returncode == 0 and str(ours / "extension" / "donto.control") in r.stdout, r.stderr
    assert "warning" not in r.stderr
    script = ours / "extension" / f"donto--{build.__version__}.sql"
    script.write_text("-- an earlier build\n")
    r = run("extension", "install", "--no-create", env=env)
    assert r.returncode == 0 and f"warning: {script} had other content" in r.stderr, r.stderr
    assert script.read_text() == (build.EXTENSION_DIR / script.name).read_text()
    for printed in ("", "share/postgresql"):
        bad = fake_pg_config(tmp_path / f"bad{len(printed)}", printed)
        assert_short_error(run("extension", "install", "--no-create",
                               env={"PG_CONFIG": str(bad)}),
                           f"printed {printed!r}, not an absolute directory", "PG_CONFIG")


def test_extension_install_says_what_the_database_had(db, empty_db):
    """Found by review: `extension install` said "created" on a database whose extension
    was already there at 0.2.0 (it still is: ALTER EXTENSION UPDATE upgrades it), and
    gave a raw 55000 error on a database installed by migrate."""
    sharedir = build.pg_sharedir() / "extension"
    if not os.access(sharedir, os.W_OK):
        pytest.skip(f"installing into {sharedir} needs root (CI runs as root)")
    assert_short_error(run("extension", "install", "--dsn", dsn_of(db)),
                       "installed by `donto-pg migrate`", "--no-create")
    assert db.execute("select count(*) from pg_extension where extname = 'donto'"
                      ).fetchone() == (0,)
    build.install_extension()
    with psycopg.connect(empty_db) as conn:
        conn.execute("create extension donto version '0.2.0' cascade")
    r = run("extension", "install", "--dsn", empty_db)
    assert r.returncode == 0, r.stderr
    assert "extension donto is at version 0.2.0 here: upgrade it with ALTER EXTENSION donto " \
           "UPDATE" in r.stdout and "created" not in r.stdout
    with psycopg.connect(empty_db) as conn:
        assert conn.execute("select extversion from pg_extension where extname = 'donto'"
                            ).fetchone() == ("0.2.0",)
        conn.execute("alter extension donto update")
    r = run("extension", "install", "--dsn", empty_db)
    assert r.returncode == 0, r.stderr
    assert f"extension donto {build.__version__} was already created here" in r.stdout


def test_debug_shows_the_traceback():
    r = run("migrate", "--dsn", "host=/nonexistent-donto dbname=x", "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr
    r = run("migrate", "--dsn", "host=/nonexistent-donto dbname=x", env={"DONTO_DEBUG": "1"})
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_missing_schema(empty_db):
    for args in (["recall", "where?", "--arms", "lexical"], ["load-beam", str(EXAMPLES)],
                 ["project-extraction"], ["extract", "--provider", "baseline"]):
        r = run(*args, "--dsn", empty_db)
        lines = assert_short_error(r, "the database has no donto schema")
        assert "donto-pg migrate" in lines[1], args


def test_unknown_recall_arm(db):
    db.commit()
    r = run("recall", "where?", "--arms", "foo", "--dsn", dsn_of(db))
    assert_short_error(r, "--arms foo", "vector, lexical, hybrid")
    # eval recall says so before it loads or embeds anything
    r = run("eval", "recall", str(EXAMPLES / "chats" / "100K" / "13"), "--arms",
            "lexical,foo", "--dsn", dsn_of(db))
    assert_short_error(r, "'foo'")
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == 0
    # so does a k that is not a positive whole number (it was an "unexpected ValueError"
    # after the data was loaded and embedded)
    for k in ("0", "-3"):
        r = run("eval", "recall", str(EXAMPLES / "chats" / "100K" / "13"), "--k", k,
                "--dsn", dsn_of(db))
        assert r.returncode == 2 and "--k" in r.stderr and "Traceback" not in r.stderr
        assert "unexpected" not in r.stderr
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == 0


def test_unknown_conversation(db):
    db.commit()
    r = run("load-beam", str(EXAMPLES), "-c", "100K/99", "--no-embed", "--dsn", dsn_of(db))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [
        f"FAILED: {EXAMPLES}: conversation '100K/99' not found"]
    for cmd in (["project-extraction"], ["extract", "--provider", "baseline"]):
        r = run(*cmd, "-c", "100K/99", "--dsn", dsn_of(db))
        assert_short_error(r, "no conversation beam:100K/99", "donto.document")


def test_scale_that_matches_nothing(db):
    db.commit()
    r = run("load-beam", str(EXAMPLES), "--scale", "5K", "--no-embed", "--dsn", dsn_of(db))
    assert_short_error(r, "nothing to load", "--scale 5K")
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == 0


def test_missing_provider_config(db):
    db.commit()
    for cmd in (["extract"], ["summarize"], ["ab"]):
        r = run(*cmd, "--provider-config", "/nonexistent/providers.toml", "--dsn", dsn_of(db))
        assert_short_error(r, "/nonexistent/providers.toml: no such file", "[[provider]]")


def test_invalid_provider_config(db, tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text("[[provider]]\nname = 'x'\n")
    db.commit()
    r = run("extract", "--provider-config", str(bad), "--dsn", dsn_of(db))
    assert_short_error(r, str(bad))


@pytest.mark.slow
def test_unknown_embedding_model(db):
    db.commit()
    r = run("embed", "--model", "nosuch", "--dsn", dsn_of(db))
    assert_short_error(r, "cannot load the embedding model 'nosuch'", "all-MiniLM-L6-v2")


def test_bad_option_values(db):
    r = run("recall", "--k", "x", "where?")
    assert_short_error(r, "--k", "donto-pg recall --help", code=2)
    r = run("ab", "--arm", "foo", "--dsn", dsn_of(db))
    assert_short_error(r, "--arm foo", "NAME=STRATEGY:PARAMS")
    r = run("nosuch")
    assert_short_error(r, "No such command", code=2)


def test_migrate_by_a_database_owner_who_is_not_superuser(donto_proc):
    role = f"donto_t_owner_{os.getpid()}"
    name = f"{donto_proc.dbname}_owned"
    admin = dict(host=donto_proc.host, port=donto_proc.port, user=donto_proc.user,
                 dbname="postgres", autocommit=True)
    with psycopg.connect(**admin) as c:
        c.execute(f"drop database if exists {name}")
        c.execute(f"drop role if exists {role}")
        c.execute(f"create role {role} login password 'owner-pw'")
        c.execute(f"create database {name} owner {role}")
    try:
        dsn = (f"host={donto_proc.host} port={donto_proc.port} user={role} "
               f"password=owner-pw dbname={name}")
        r = run("migrate", "--dsn", dsn)
        assert_short_error(r, "superuser")
        with psycopg.connect(dsn) as c:  # nothing was left behind
            assert c.execute("select to_regnamespace('donto')").fetchone()[0] is None
    finally:
        with psycopg.connect(**admin) as c:
            c.execute(f"drop database if exists {name} with (force)")
            c.execute(f"drop role if exists {role}")


def test_json_is_a_flag_everywhere():
    """Every --json is a flag (no value), and the help shows it as one."""
    root = typer.main.get_command(cli.app)
    seen = []

    def walk(group, path):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                walk(cmd, [*path, name])
                continue
            for p in cmd.params:
                if "--json" in getattr(p, "opts", []):
                    assert p.is_flag and not p.secondary_opts, (path, name)
                    seen.append(" ".join([*path, name]))
            ctx = cmd.make_context(name, [], resilient_parsing=True)
            for line in cmd.get_help(ctx).splitlines():
                assert "<bool>" not in line, (name, line)

    walk(root, [])
    assert {"migrate", "recall", "load-beam", "embed", "extract", "project-extraction",
            "eval recall", "ab", "summarize", "add", "db status"} <= set(seen)
    r = run("recall", "--json", "true", "x", "--dsn", "host=/nonexistent-donto")
    assert r.returncode == 2  # `true` is not a value of --json: an unexpected argument


@pytest.mark.parametrize("name, content, needles", [
    ("empty.json", b"", ["the file is empty", '"role": "user"']),
    ("blank.jsonl", b"\n \n", ["the file is empty", '"role": "user"']),
    ("messages.json", b'{"messages": "hi"}', ['under "messages", got a str',
                                              '{"messages": [']),
    ("none.json", b"[]", ["messages must be a non-empty list", '"role": "user"']),
    ("session.json", b'[{"role": "user", "content": "hi", "session": "two"}]',
     ["session 'two' is not a whole number", '"session": 2']),
    ("latin1.txt", "Caf\u00e9\n".encode("latin-1"), ["not UTF-8 text", "save the file as UTF-8"]),
    ("blank.txt", b"  \n\n", ["the text is empty", "something to recall"]),
])
def test_add_says_what_is_wrong_with_a_file_and_what_to_do(db, tmp_path, name, content,
                                                           needles):
    """Every refusal of `add` has its second line, what to do (README: "what failed and
    why, then what to do"); an object whose "messages" is no list is not "a dict"."""
    f = tmp_path / name
    f.write_bytes(content)
    db.commit()
    r = run("add", str(f), "--no-embed", "--dsn", dsn_of(db))
    lines = assert_short_error(r, *needles)
    assert len(lines) == 2 and lines[1].startswith("  fix: "), r.stderr
    assert "got a dict" not in r.stderr
    assert db.execute("select count(*) from donto.revision").fetchone()[0] == 0


def test_recall_of_an_empty_query_says_what_to_do():
    """Refused before connecting, with a fix (the database's 22023 named no remedy)."""
    r = run("recall", " \t", "--dsn", "host=/nonexistent-donto dbname=x")
    lines = assert_short_error(r, "the query is empty", "donto-pg recall")
    assert len(lines) == 2 and "22023" not in r.stderr


def test_load_beam_of_an_empty_rows_file_says_the_file_is_empty(db, tmp_path):
    """Not "check --scale and -c against the directory's layout": there were neither."""
    f = tmp_path / "rows.jsonl"
    f.write_text("")
    db.commit()
    r = run("load-beam", str(f), "--no-embed", "--dsn", dsn_of(db))
    assert_short_error(r, "nothing to load", "holds no conversation", ".jsonl")
    assert "--scale" not in r.stderr


def test_load_beam_json_names_the_conversation_of_a_repeated_row(db, tmp_path):
    """The second row of a conversation fails alone; --json names it, not '?'."""
    rows = (EXAMPLES / "hf-sample" / "beam-100K-sample.jsonl").read_text().splitlines()
    f = tmp_path / "twice.jsonl"
    f.write_text("\n".join([rows[0], rows[0]]) + "\n")
    db.commit()
    r = run("load-beam", str(f), "--no-embed", "--json", "--dsn", dsn_of(db))
    assert r.returncode == 1, r.stderr
    first, second = json.loads(r.stdout)["conversations"]
    assert first["ok"] and not second["ok"] and "appears twice" in second["error"]
    assert second["conversation"] == first["conversation"] != "?"


def test_add_names_the_message_and_its_character_that_holds_a_nul(db, tmp_path):
    """Not the offset in the canonical text (character 63 here), which the file does not
    have: the message and the place in its content."""
    f = tmp_path / "chat.json"
    f.write_text(json.dumps([{"role": "user", "content": "hello"},
                             {"role": "assistant", "content": "ab\x00c"}]))
    db.commit()
    r = run("add", str(f), "--no-embed", "--dsn", dsn_of(db))
    assert_short_error(r, "message 1: its content: NUL byte at character 2", "remove it")
