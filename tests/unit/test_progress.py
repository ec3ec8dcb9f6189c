"""When long work reports progress on standard error (donto_pg.cli.progress_enabled)."""

from __future__ import annotations

import pytest

from donto_pg.cli import progress_enabled


@pytest.mark.parametrize("value, shown", [
    ("1", True), ("yes", True), ("on", True),
    ("", False), ("0", False), ("false", False), ("No", False), (" off ", False),
])
def test_donto_progress_forces_or_silences_progress(monkeypatch, value, shown):
    monkeypatch.setenv("DONTO_PROGRESS", value)
    assert progress_enabled() is shown
