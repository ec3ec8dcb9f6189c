"""Released migrations are frozen: migrations/SHA256SUMS pins each released file.

Releasing: `cd migrations && sha256sum [0-9]*.sql > SHA256SUMS` (after review).
A change to a released migration is a new migration file, never an edit.
"""

from __future__ import annotations

import hashlib

from donto_pg import build, migrate


def released() -> list[tuple[str, str]]:
    sums = migrate.MIGRATIONS_DIR / "SHA256SUMS"
    rows = [line.split() for line in sums.read_text().splitlines() if line.strip()]
    return [(name, sha) for sha, name in rows]


def test_released_migrations_are_unchanged():
    for name, sha in released():
        path = migrate.MIGRATIONS_DIR / name
        assert path.exists(), f"released migration {name} was removed"
        got = hashlib.sha256(path.read_bytes()).hexdigest()
        assert got == sha, f"released migration {name} was edited: add a new migration instead"


def test_released_migrations_are_the_oldest_ones():
    names = [m.name for m in migrate.migrations()]
    rel = [n for n, _ in released()]
    assert rel == names[:len(rel)], "SHA256SUMS must list the first migrations, in order"


def test_released_extension_scripts_are_unchanged():
    """extension/SHA256SUMS pins the CREATE EXTENSION scripts of released versions: a
    database created from one must keep updating from exactly that script's state."""
    sums = migrate.EXTENSION_DIR / "SHA256SUMS"
    rows = [line.split() for line in sums.read_text().splitlines() if line.strip()]
    assert {name for _, name in rows} == {f"donto--{v}.sql" for v in build.RELEASED}
    for sha, name in rows:
        got = hashlib.sha256((migrate.EXTENSION_DIR / name).read_bytes()).hexdigest()
        assert got == sha, f"released extension script {name} was edited"
