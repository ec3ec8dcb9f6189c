"""The server floor: what PL/Python bodies call, one module per SQL topic.

``donto._py_boot()`` imports this package into a backend and keeps it in
``GD['donto_pg']``; every PL/Python body is then one call,
``GD['donto_pg'].<topic>.<fn>(plpy, ...)``. Modules here take ``plpy`` as their
first argument and import only :mod:`donto_pg.core` (never psycopg: the server's
Python talks to the database through ``plpy``).
"""

from donto_pg import __version__
from donto_pg.server import ab, append, extraction, payload, recall, standing

__all__ = ["__version__", "ab", "append", "extraction", "payload", "recall", "standing"]
