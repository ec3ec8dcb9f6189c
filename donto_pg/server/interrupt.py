"""Bounded work inside the server: a ``check()`` that lets PostgreSQL cancel a long
Python loop (pure Python loops never see a cancel request or ``statement_timeout``)."""

from __future__ import annotations

import time
from collections.abc import Callable

#: Seconds between two looks at PostgreSQL's interrupt flags (see interrupt_check).
_CHECK_EVERY = 0.05


def interrupt_check(plpy) -> Callable[[], None]:
    """A ``check()`` for long Python loops: at most every 50 ms it runs ``select 1``
    through SPI, where PostgreSQL acts on a pending cancel request or an expired
    ``statement_timeout`` (the query is cancelled with SQLSTATE 57014, raised here as a
    PL/Python exception that ends the function)."""
    plan = plpy.prepare("select 1", [])
    last = time.monotonic()

    def check() -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= _CHECK_EVERY:
            last = now
            plpy.execute(plan)

    return check
