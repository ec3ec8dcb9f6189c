"""Issue 10, section 5: every function a reader may call does bounded work (real server).

A real LOGIN role, member of donto_reader only, with statement_timeout = 1s: the worst
cases of donto.anchor (a 10 MB body, a long near-miss quote) return or are cancelled
(57014) within twice the timeout; over-long and blank-only inputs are refused (22023);
the PL/Python helpers whose work grows with their arguments are not a reader's to call.
"""

from __future__ import annotations

import random
import time
import uuid

import psycopg
import pytest
from psycopg import errors

TIMEOUT = 1.0
WORDS = "the user moved to Berlin in March and liked the new flat very much".split()


def words(n: int, seed: int) -> str:
    rng = random.Random(seed)
    out, total = [], 0
    while total < n:
        w = rng.choice(WORDS)
        out.append(w)
        total += len(w) + 1
    return " ".join(out)


@pytest.fixture
def reader(db):
    """A real LOGIN role (password authentication), member of donto_reader only."""
    role = f"reader_{uuid.uuid4().hex[:10]}"
    db.execute(f"create role {role} login password 'read' in role donto_reader")
    db.commit()
    info = db.info
    conn = psycopg.connect(host=info.host, port=info.port, user=role, password="read",
                           dbname=info.dbname)
    assert conn.execute("select rolsuper from pg_roles where rolname = current_user"
                        ).fetchone()[0] is False
    yield conn
    conn.close()
    db.rollback()
    db.execute(f"drop role {role}")
    db.commit()


@pytest.fixture
def bodies(db) -> dict[str, int]:
    near_miss = words(10_000_000, 1)
    revs = {
        "aaaa": db.execute("select donto.register_revision('doc:aaaa', %s)",
                           ("a" * 10_000_000,)).fetchone()[0],
        "words": db.execute("select donto.register_revision('doc:words', %s)",
                            (near_miss,)).fetchone()[0],
        "small": db.execute("select donto.register_revision('doc:ab', %s)",
                            ("ab " * 50_000,)).fetchone()[0],
    }
    db.commit()
    return revs


def near_miss_quote(n: int) -> str:
    q = words(n, 7)
    return q[: n // 2] + "X" + q[n // 2 + 1:]


WORST = {
    "10 MB of one letter, 2k quote, anywhere": ("aaaa", "a" * 1999 + "b", None),
    "10 MB of one letter, 2k quote, near the middle": ("aaaa", "a" * 1999 + "b", 5_000_000),
    "10 MB of one letter, 1k quote (fuzzy), near": ("aaaa", "a" * 999 + "b", 5_000_000),
    "10 MB of words, 2k near-miss quote, near": ("words", near_miss_quote(1990), 5_000_000),
    "10 MB of words, 2k near-miss quote, anywhere": ("words", near_miss_quote(1990), None),
    "150k repeated, 1k near-miss quote (fuzzy, whole body)": ("small", "ab " * 333 + "x",
                                                              None),
}


def test_anchor_worst_cases_end_within_twice_the_statement_timeout(reader, bodies):
    reader.execute(f"set statement_timeout = '{int(TIMEOUT * 1000)}ms'")
    reader.commit()
    outcomes = {}
    for name, (body, quote, near) in WORST.items():
        started = time.monotonic()
        try:
            rows = reader.execute("select * from donto.anchor(%s, %s, %s)",
                                  (bodies[body], quote, near)).fetchall()
            outcome = f"returned {len(rows)}"
        except errors.QueryCanceled:
            outcome = "cancelled"
        reader.rollback()
        elapsed = time.monotonic() - started
        outcomes[name] = outcome
        assert elapsed < 2 * TIMEOUT, f"{name}: {outcome} after {elapsed:.2f}s"
    # the pathological ones really ran into the timeout (the bound was tested, not dodged)
    assert outcomes["10 MB of one letter, 2k quote, anywhere"] == "cancelled"
    # and the reader's session is usable afterwards
    assert reader.execute("select 1").fetchone()[0] == 1


def test_a_cancel_request_stops_anchor_too(reader, bodies, db):
    """pg_cancel_backend (no timeout set) ends the search as well."""
    pid = reader.info.backend_pid
    import threading

    def cancel():
        time.sleep(0.5)
        db.execute("select pg_cancel_backend(%s)", (pid,))
        db.commit()

    t = threading.Thread(target=cancel)
    t.start()
    started = time.monotonic()
    with pytest.raises(errors.QueryCanceled):
        reader.execute("select * from donto.anchor(%s, %s)", (bodies["aaaa"], "a" * 1999 + "b"))
    t.join()
    assert time.monotonic() - started < 0.5 + 2 * TIMEOUT
    reader.rollback()


def test_anchor_refuses_an_overlong_quote(reader, bodies):
    with pytest.raises(errors.InvalidParameterValue, match="more than 2000"):
        reader.execute("select * from donto.anchor(%s, %s)", (bodies["small"], "ab " * 700))
    reader.rollback()
    # at the cap it is a search like any other
    got = reader.execute("select method from donto.anchor(%s, %s)",
                         (bodies["small"], ("ab " * 700)[:2000])).fetchall()
    assert got == [("exact",)]


BLANKS = ["", " ", "\t", "\n", " \t\r\n  \n", "\u000b\f"]


@pytest.mark.parametrize("call", [
    "select * from donto.recall(%s)",
    "select * from donto.recall(%s, arms => 'lexical')",
    "select donto.recall_payload(%s, 200)",
    "select * from donto.recall_summaries(%s)",
])
def test_a_blank_query_is_refused_like_the_empty_one(reader, call):
    for q in BLANKS:
        with pytest.raises(errors.InvalidParameterValue, match="query is empty"):
            reader.execute(call, (q,))
        reader.rollback()


@pytest.mark.parametrize("call", [
    "select * from donto.recall(%s)",
    "select donto.recall_payload(%s, 200)",
    "select * from donto.recall_summaries(%s)",
    "select * from donto.recall_by_vector(null, %s, arms => 'lexical')",
    "select donto.embed_query(%s)",
])
def test_a_giant_query_is_refused(reader, call):
    with pytest.raises(errors.InvalidParameterValue, match="more than 10,000"):
        reader.execute(call, ("where did I move? " * 600,))
    reader.rollback()


def test_a_reader_calls_no_python_helper_whose_work_grows_with_its_arguments(db, reader):
    callable_py = {r[0] for r in db.execute(
        "select p.proname::text from pg_proc p join pg_language l on l.oid = p.prolang "
        "where p.pronamespace = 'donto'::regnamespace and l.lanname = 'plpython3u' "
        "and has_function_privilege('donto_reader', p.oid, 'EXECUTE')").fetchall()}
    assert callable_py == {"_py_boot", "anchor", "embed_query", "recall_payload",
                           "render_for_extraction"}
    rev = db.execute("select donto.register_revision('doc:w', 'hello world\n')").fetchone()[0]
    db.commit()
    for sql in ("select * from donto._recall_windows(%s, 1)",
                "select * from donto._ab_fixed_blocks(%s, 1)"):
        with pytest.raises(errors.InsufficientPrivilege):
            reader.execute(sql, (rev,))
        reader.rollback()
