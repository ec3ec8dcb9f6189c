"""The embedded cluster's server settings (no server needed)."""

from __future__ import annotations

import pytest

from donto_pg import cluster


@pytest.mark.parametrize(("ram_mb", "want"), [
    (256, "128MB"),      # a quarter would be 64MB: the floor
    (4096, "1024MB"),    # a quarter
    (24576, "2048MB"),   # a quarter would be 6GB: the cap
])
def test_shared_buffers_is_a_quarter_of_memory_within_bounds(monkeypatch, ram_mb, want):
    pages = {"SC_PAGE_SIZE": 4096, "SC_PHYS_PAGES": ram_mb * 2**20 // 4096}
    monkeypatch.setattr(cluster.os, "sysconf", lambda name: pages[name])
    assert cluster._shared_buffers() == want


def test_shared_buffers_falls_back_when_memory_is_unknown(monkeypatch):
    def unknown(name):
        raise ValueError(name)

    monkeypatch.setattr(cluster.os, "sysconf", unknown)
    assert cluster._shared_buffers() == "256MB"
