"""donto-pg: a PostgreSQL-centred memory substrate for very long conversations.

The Python API (:mod:`donto_pg.api`, re-exported here and loaded on first use, so
that ``import donto_pg`` stays light)::

    conn = donto_pg.connect()                        # embedded cluster, or a DSN
    rev = donto_pg.add_conversation(conn, messages, "chat:alice/1")
    hits = donto_pg.recall(conn, "where do I live?", k=5)

Errors a caller can act on are :class:`donto_pg.DontoError` (``what``, ``why``,
``fix``; bad input, and an argument the database refuses, is its subclass
:class:`donto_pg.InputError`, a document that is not stored
:class:`donto_pg.NothingFound`); other database errors are psycopg's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.3.0"

__all__ = [
    "Claim", "DontoError", "Hit", "InputError", "NothingFound", "__version__",
    "add_conversation", "add_text", "claims", "connect", "ensure_schema", "read_chat_file",
    "recall", "recall_payload",
]
_ERRORS = frozenset({"DontoError", "InputError", "NothingFound"})
_API = frozenset(__all__) - _ERRORS - {"__version__"}

if TYPE_CHECKING:
    from donto_pg.api import (
        Claim,
        Hit,
        add_conversation,
        add_text,
        claims,
        connect,
        ensure_schema,
        read_chat_file,
        recall,
        recall_payload,
    )
    from donto_pg.errors import DontoError, InputError, NothingFound


def __getattr__(name: str) -> Any:
    if name in _API:
        from donto_pg import api

        return getattr(api, name)
    if name in _ERRORS:
        from donto_pg import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'donto_pg' has no attribute {name!r}")
