"""What the released SQL (extension 0.1.0 and 0.2.0) calls: kept so that those
installs keep working until ``ALTER EXTENSION donto UPDATE``.

Their frozen ``donto._py_boot`` caches this module in ``GD['donto_pg']`` and their
PL/Python bodies call ``GD['donto_pg'].<fn>(...)``; current SQL imports
:mod:`donto_pg.server` instead and calls ``GD['donto_pg'].<topic>.<fn>(plpy, ...)``.
The topic modules are here too, so a backend that booted the old SQL keeps working
right after ``ALTER EXTENSION donto UPDATE`` in the same session. Nothing else may
import this module; drop it with the last release whose SQL names it.
"""

import functools
from collections.abc import Callable
from typing import Any

from donto_pg import __version__
from donto_pg.server import ab, append, extraction, payload, recall, revision, standing
from donto_pg.server.extraction import claims_json as parse_claims
from donto_pg.server.extraction import extraction_params_sql


def _released(fn: Callable[..., Any]) -> Callable[..., Any]:
    """FN reading revision text from the body column: a released schema has neither
    donto.revision_body nor revisions stored as deltas (migration 038)."""
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        with revision.released_schema():
            return fn(*args, **kwargs)
    return call


anchor_in_revision = _released(extraction.anchor_in_revision)
extraction_blocks = _released(extraction.extraction_blocks)
render_for_extraction = _released(extraction.render_for_extraction)
recall_windows = _released(recall.recall_windows)

__all__ = [
    "__version__", "ab", "anchor_in_revision", "append", "embed_query", "extraction",
    "extraction_blocks", "extraction_params_sql", "parse_claims", "payload", "recall",
    "recall_windows", "render_for_extraction", "standing",
]


def embed_query(text: str, model: str | None) -> str:
    """The released signature of :func:`donto_pg.server.recall.embed_query`."""
    return recall.embed_query(None, text, model)
