"""The embedded cluster's server settings (no server needed)."""

from __future__ import annotations

import socket
import struct
import threading
import time

import psycopg
import pytest

from donto_pg import cluster, db
from donto_pg.errors import DontoError


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


def _fake_server(path: str, heard: list[bytes]) -> socket.socket:
    """A socket at PATH that asks every client for a cleartext password (AuthenticationCleartext
    Password) and keeps what it sends: what the server's OS user could plant in `run`."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                client, _ = srv.accept()
            except OSError:
                return
            with client:
                client.settimeout(3)
                try:
                    size = struct.unpack("!I", client.recv(4))[0]
                    client.recv(size - 4)  # the startup packet
                    client.sendall(b"R" + struct.pack("!II", 8, 3))
                    while chunk := client.recv(4096):
                        heard.append(chunk)
                except (OSError, struct.error):
                    continue

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_no_password_goes_to_a_socket_planted_in_the_embedded_clusters_run(
        tmp_path, monkeypatch):
    """PGPASSWORD (meant for another server) is never sent to whatever answers on the
    embedded cluster's socket: our connections there require no authentication exchange
    (peer), through db.connect and through Cluster.conninfo."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    monkeypatch.setenv("DONTO_HOME", str(home))
    monkeypatch.setenv("PGPASSWORD", "secret-for-another-server")
    monkeypatch.delenv("DONTO_DSN", raising=False)
    c = cluster.Cluster.default()
    heard: list[bytes] = []
    srv = _fake_server(str(c.sockdir / f".s.PGSQL.{cluster.PORT}"), heard)
    try:
        # the fake works: a plain libpq connection answers it with the password
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(c.dsn(), connect_timeout=3)
        assert _heard(heard, b"secret-for-another-server")
        heard.clear()
        with pytest.raises(DontoError):
            db.connect(c.dsn())
        with pytest.raises(psycopg.OperationalError, match="authentication method requirement"):
            psycopg.connect(**c.conninfo(), connect_timeout=3)
        assert not _heard(heard, b"secret-for-another-server")
    finally:
        srv.close()


def _heard(heard: list[bytes], what: bytes, wait: float = 1.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if any(what in h for h in heard):
            return True
        time.sleep(0.05)
    return False
