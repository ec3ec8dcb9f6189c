"""What the released SQL (extension 0.1.0 and 0.2.0) calls: kept so that those
installs keep working until ``ALTER EXTENSION donto UPDATE``.

Their frozen ``donto._py_boot`` caches this module in ``GD['donto_pg']`` and their
PL/Python bodies call ``GD['donto_pg'].<fn>(...)``; current SQL imports
:mod:`donto_pg.server` instead and calls ``GD['donto_pg'].<topic>.<fn>(plpy, ...)``.
The topic modules are here too, so a backend that booted the old SQL keeps working
right after ``ALTER EXTENSION donto UPDATE`` in the same session. Nothing else may
import this module; drop it with the last release whose SQL names it.
"""

from donto_pg import __version__
from donto_pg.server import ab, append, extraction, payload, recall, standing
from donto_pg.server.extraction import (
    anchor_in_revision,
    extraction_blocks,
    extraction_params_sql,
    render_for_extraction,
)
from donto_pg.server.extraction import claims_json as parse_claims
from donto_pg.server.recall import recall_windows

__all__ = [
    "__version__", "ab", "anchor_in_revision", "append", "embed_query", "extraction",
    "extraction_blocks", "extraction_params_sql", "parse_claims", "payload", "recall",
    "recall_windows", "render_for_extraction", "standing",
]


def embed_query(text: str, model: str | None) -> str:
    """The released signature of :func:`donto_pg.server.recall.embed_query`."""
    return recall.embed_query(None, text, model)
