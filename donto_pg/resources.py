"""Where the package's data lives: SQL sources, built extension files, the demo's example.

In a checkout (and an editable install of one) they are the repository's top-level
``sql/``, ``migrations/``, ``extension/`` and ``examples/``. A wheel carries copies of
them in ``donto_pg/_data/`` (``setup.py`` maps them in when the wheel is built), so an
installed donto-pg finds the same files without the repository.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
#: The directory that holds the ``donto_pg`` package: a checkout's root, or site-packages.
PACKAGE_PARENT = PACKAGE.parent
#: Where a wheel keeps its copies of the top-level data directories.
SHIPPED = PACKAGE / "_data"


def in_checkout() -> bool:
    """True when this package is the ``donto_pg/`` of a donto-pg checkout."""
    return (PACKAGE_PARENT / "pyproject.toml").is_file() and (
        PACKAGE_PARENT / "sql" / "000-head.sql").is_file()


def data_dir(name: str) -> Path:
    """The data directory NAME (``sql``, ``migrations``, ``extension``, ``examples``):
    the checkout's when the package sits in one, else the wheel's copy. The path may
    not exist (an incomplete install); callers say so when they need it."""
    return PACKAGE_PARENT / name if in_checkout() else SHIPPED / name
