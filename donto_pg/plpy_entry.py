"""Entry points for PL/Python function bodies.

Each SQL function written in PL/Python is two lines that call one function
here; the logic lives in plain modules (segmenter, anchor, embedder, ...) so
that it is unit-tested as ordinary Python and once more through SQL.
Functions take ``plpy`` as their first argument when they need the database.
"""

from __future__ import annotations
