"""Who can connect to the embedded cluster: attacks by a real second OS user.

Only the OS user the server runs as and root may connect as ``donto``; any other
local user is refused, first by the socket's permissions and, should those ever
be opened, by peer authentication. These tests need root (to become ``nobody``
and ``daemon``), as CI runs.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from donto_pg.cluster import PORT, Cluster, ClusterError, default_home
from tests.conftest import run_cli_as

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as other OS users")

OLD_TRUST_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\n"
SMALL = {"shared_buffers": "32MB", "fsync": "off", "max_connections": "20"}


def psql_as(os_user: str, sockdir: Path, role: str, password: str | None = None,
            ) -> subprocess.CompletedProcess[str]:
    """``psql -w`` (never prompts) as another OS user, over the cluster's socket."""
    env = {"PATH": os.environ["PATH"], "PGCONNECT_TIMEOUT": "5"}
    if password:
        env["PGPASSWORD"] = password
    return subprocess.run(
        ["runuser", "-u", os_user, "--", "psql", "-w", "-At",
         f"host={sockdir} port={PORT} user={role} dbname=postgres",
         "-c", "select current_user, (select rolsuper from pg_roles where rolname = current_user)"],
        capture_output=True, text=True, env=env, cwd="/", timeout=60)


def refused(proc: subprocess.CompletedProcess[str], why: str) -> bool:
    return proc.returncode != 0 and why in proc.stderr and not proc.stdout


def as_root(cluster: Cluster, sql: str) -> object:
    with psycopg.connect(**cluster.conninfo("postgres"), autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchone() if cur.description else None


def open_socket(cluster: Cluster) -> None:
    """What a careless admin (or the old code) would leave: a socket anyone can reach."""
    cluster.home.chmod(0o755)
    cluster.sockdir.chmod(0o755)
    (cluster.sockdir / f".s.PGSQL.{PORT}").chmod(0o777)


def wait_for(check, timeout: float = 10.0) -> bool:
    """Poll a check after a configuration reload (SIGHUP is asynchronous)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def _root_cluster() -> Iterator[Cluster]:
    home = Path("/tmp") / f"donto-auth-{uuid.uuid4().hex[:8]}"
    cluster = Cluster(home, settings=SMALL)
    try:
        assert cluster.start()
        as_root(cluster, "create role app login password 'app-secret'")
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def root_cluster(_root_cluster: Cluster) -> Cluster:
    """An embedded cluster started by root (the server runs as ``postgres``), with a password
    role ``app``; each test gets it as ``db start`` leaves it (which undoes the last test's
    damage)."""
    _root_cluster.start()
    return _root_cluster


def test_other_os_users_cannot_reach_a_root_cluster(root_cluster: Cluster) -> None:
    """nobody is refused under every role name; root connects as donto."""
    assert as_root(root_cluster, "select current_user, rolsuper from pg_roles "
                                 "where rolname = current_user") == ("donto", True)
    for role in ("donto", "postgres", "nobody", "app", "donto_reader"):
        assert refused(psql_as("nobody", root_cluster.sockdir, role), "Permission denied"), role
    # even with the password, the socket is out of reach
    assert refused(psql_as("nobody", root_cluster.sockdir, "app", "app-secret"),
                   "Permission denied")
    sock = root_cluster.sockdir / f".s.PGSQL.{PORT}"
    assert root_cluster.sockdir.stat().st_mode & 0o777 == 0o700
    assert sock.stat().st_mode & 0o777 == 0o700


def test_peer_authentication_refuses_strangers_when_the_socket_is_open(
        root_cluster: Cluster) -> None:
    """The second lock: with the socket opened to all, pg_hba still lets nobody in as donto
    (peer map) nor as a password role without its password."""
    open_socket(root_cluster)
    for role in ("donto", "postgres"):
        assert refused(psql_as("nobody", root_cluster.sockdir, role),
                       'Peer authentication failed for user "donto"'
                       if role == "donto" else "no password supplied"), role
    assert refused(psql_as("nobody", root_cluster.sockdir, "app"), "no password supplied")
    assert refused(psql_as("nobody", root_cluster.sockdir, "app", "wrong"),
                   'password authentication failed for user "app"')
    # a password role with its password is that role, not a superuser
    ok = psql_as("nobody", root_cluster.sockdir, "app", "app-secret")
    assert ok.returncode == 0 and ok.stdout.strip() == "app|f", ok.stderr
    # the server's OS user is in the map: it owns the data files anyway
    ok = psql_as("postgres", root_cluster.sockdir, "donto")
    assert ok.returncode == 0 and ok.stdout.strip() == "donto|t", ok.stderr


def test_a_running_trust_cluster_is_locked_on_the_next_start(root_cluster: Cluster) -> None:
    """A cluster left by the old code (trust, open socket) lets nobody in as a superuser;
    `db start` on it (running) rewrites pg_hba.conf/pg_ident.conf and reloads."""
    hba = root_cluster.datadir / "pg_hba.conf"
    managed = hba.read_text()
    hba.write_text(OLD_TRUST_HBA)
    as_root(root_cluster, "select pg_reload_conf()")
    open_socket(root_cluster)
    assert wait_for(lambda: psql_as("nobody", root_cluster.sockdir, "donto").stdout.strip()
                    == "donto|t"), "the attack should work against the old configuration"

    assert root_cluster.start() is False  # already running: upgraded in place
    assert hba.read_text() == managed
    assert (root_cluster.sockdir / f".s.PGSQL.{PORT}").stat().st_mode & 0o777 == 0o700
    assert refused(psql_as("nobody", root_cluster.sockdir, "donto"), "Permission denied")
    open_socket(root_cluster)  # only the reloaded pg_hba.conf stands in the way now
    assert wait_for(lambda: refused(psql_as("nobody", root_cluster.sockdir, "donto"),
                                    "Peer authentication failed"))
    # idempotent: a second start rewrites nothing
    stamps = {f: (root_cluster.datadir / f).stat().st_mtime_ns
              for f in ("pg_hba.conf", "pg_ident.conf")}
    assert root_cluster.start() is False
    assert stamps == {f: (root_cluster.datadir / f).stat().st_mtime_ns for f in stamps}


def test_a_stopped_trust_cluster_is_locked_when_it_starts(root_cluster: Cluster) -> None:
    root_cluster.stop()
    (root_cluster.datadir / "pg_hba.conf").write_text(OLD_TRUST_HBA)
    (root_cluster.datadir / "pg_ident.conf").write_text("")
    root_cluster.sockdir.chmod(0o755)
    assert root_cluster.start() is True
    assert "trust" not in (root_cluster.datadir / "pg_hba.conf").read_text()
    assert refused(psql_as("nobody", root_cluster.sockdir, "donto"), "Permission denied")
    open_socket(root_cluster)
    assert refused(psql_as("nobody", root_cluster.sockdir, "donto"),
                   "Peer authentication failed")


def test_a_users_own_cluster_admits_that_user_and_root_only(tmp_path: Path) -> None:
    """nobody runs its own cluster through the CLI: nobody (psql on `db url`) and root
    connect as donto; another OS user (daemon) is refused; root's CLI does not take
    nobody's cluster over."""
    home = Path("/tmp") / f"donto-own-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o777)
    home.chmod(0o1777)  # as /tmp: anyone may make an entry, only its owner change it
    env = {k: v for k, v in os.environ.items() if k != "DONTO_DSN"}
    env["DONTO_HOME"] = str(home / "h")
    cluster = Cluster(home / "h")
    try:
        r = run_cli_as("db", "start", env=env, user="nobody")
        assert r.returncode == 0, r.stderr
        r = run_cli_as("db", "url", env=env, user="nobody")
        url = r.stdout.strip()
        assert "peer" in r.stderr and "nobody, root may connect as donto" in r.stderr
        own = subprocess.run(["psql", "-w", url, "-Atc", "select current_user"],
                             capture_output=True, text=True, user="nobody", cwd="/")
        assert own.stdout.strip() == "donto", own.stderr
        assert as_root(cluster, "select current_user") == ("donto",)  # root is allowed
        assert refused(psql_as("daemon", cluster.sockdir, "donto"), "Permission denied")
        open_socket(cluster)
        assert refused(psql_as("daemon", cluster.sockdir, "donto"),
                       'Peer authentication failed for user "donto"')
        # root's CLI refuses to chown nobody's cluster to postgres
        r = run_cli_as("db", "start", env=env)
        assert r.returncode != 0 and "belongs to the OS user 'nobody'" in r.stderr, r.stderr
        assert cluster.datadir.owner() == "nobody"
    finally:
        run_cli_as("db", "stop", env=env, user="nobody")
        shutil.rmtree(home, ignore_errors=True)


def as_postgres(*args: str) -> None:
    """A command as the server's OS user: what SQL as the superuser can also do
    (COPY ... TO PROGRAM runs as that user)."""
    subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, cwd="/",
                   capture_output=True)


def root_file(name: str) -> Path:
    victim = Path("/tmp") / f"donto-victim-{name}-{uuid.uuid4().hex[:8]}"
    victim.write_text("root's own file\n")
    victim.chmod(0o644)
    return victim


def untouched(victim: Path) -> bool:
    st = victim.lstat()
    return (st.st_uid, st.st_mode & 0o7777, victim.read_text()) == (0, 0o644,
                                                                    "root's own file\n")


def test_root_writes_nothing_through_a_symlink_the_server_user_planted(
        root_cluster: Cluster) -> None:
    """The server's OS user owns pgdata and the socket directory. It plants symlinks where
    root writes (the old temporary names, the managed files, the socket) and makes root
    rewrite them; root's files keep their owner, mode and text (with the old code root
    wrote pg_hba.conf into them and gave them to postgres: a way to root)."""
    data = root_cluster.datadir
    victims = {n: root_file(n) for n in ("new", "ident", "sock")}
    try:
        for name in ("pg_hba.conf", "pg_ident.conf"):
            as_postgres("ln", "-sf", str(victims["new"]), str(data / f"{name}.donto-new"))
        as_postgres("sh", "-c", f"echo '# changed' >> {data}/pg_hba.conf")
        as_postgres("ln", "-sf", str(victims["ident"]), str(data / "pg_ident.conf"))
        assert root_cluster.start() is False  # running: rewrites both files, reloads
        root_cluster.stop()
        as_postgres("ln", "-sf", str(victims["sock"]),
                    str(root_cluster.sockdir / f".s.PGSQL.{PORT}"))
        assert root_cluster.start() is True
        for name, victim in victims.items():
            assert untouched(victim), name
        for name in ("pg_hba.conf", "pg_ident.conf"):
            st = (data / name).lstat()
            assert stat.S_ISREG(st.st_mode) and st.st_mode & 0o777 == 0o600, name
            assert (data / name).owner() == "postgres", name
        assert "trust" not in (data / "pg_hba.conf").read_text()
        assert as_root(root_cluster, "select 1") == (1,)
        assert refused(psql_as("nobody", root_cluster.sockdir, "donto"), "Permission denied")
    finally:
        for victim in victims.values():
            victim.unlink()


def test_the_server_does_not_inherit_roots_environment(
        root_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """An API key in the environment of root's donto-pg is not handed to the postgres OS
    user's processes (nor to SQL: PL/Python reads os.environ, a superuser reads /proc)."""
    monkeypatch.setenv("DONTO_TEST_API_KEY", "sk-not-for-postgres")
    monkeypatch.setenv("PGPASSWORD", "not-for-postgres-either")
    root_cluster.stop()
    assert root_cluster.start() is True
    pid = int((root_cluster.datadir / "postmaster.pid").read_text().split()[0])
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert not [e for e in env if e.startswith((b"DONTO_TEST_API_KEY=", b"PGPASSWORD="))]
    assert b"HF_HUB_OFFLINE=1" in env


def test_root_refuses_a_home_that_another_os_user_owns() -> None:
    """DONTO_HOME made by someone else (here nobody, in /tmp) lets them plant a symlink
    where root makes the cluster's directories: root refuses it before touching anything.
    A home of root's that others may write in is closed again (0755)."""
    home = Path("/tmp") / f"donto-squat-{uuid.uuid4().hex[:8]}"
    victim_dir = Path("/tmp") / f"donto-victim-dir-{uuid.uuid4().hex[:8]}"
    victim_dir.mkdir(mode=0o755)
    try:
        home.mkdir(mode=0o755)
        shutil.chown(home, "nobody")
        subprocess.run(["runuser", "-u", "nobody", "--", "ln", "-s", str(victim_dir),
                        str(home / "run")], check=True, cwd="/")
        with pytest.raises(ClusterError, match="belongs to the OS user 'nobody'"):
            Cluster(home, settings=SMALL).start()
        st = victim_dir.stat()
        assert (st.st_uid, st.st_mode & 0o777) == (0, 0o755)
        assert not (home / "pgdata").exists()

        shutil.chown(home, "root")
        (home / "run").unlink()
        home.chmod(0o777)
        Cluster(home, settings=SMALL)._make_home()
        assert home.stat().st_mode & 0o777 == 0o755
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(victim_dir, ignore_errors=True)


def test_root_refuses_a_home_reached_through_another_users_symlink(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """nobody points /tmp/<name> at a directory only root may read; root's donto-pg with
    DONTO_HOME=/tmp/<name> refuses it (before, the home was resolved first and checked
    after: root opened the directory to 0755 and built the cluster in it). So does a home
    under a directory another user may write in."""
    victim = Path("/tmp") / f"donto-victim-home-{uuid.uuid4().hex[:8]}"
    link = Path("/tmp") / f"donto-evil-{uuid.uuid4().hex[:8]}"
    victim.mkdir(mode=0o700)
    (victim / "rootfile").write_text("root's secret\n")
    try:
        subprocess.run(["runuser", "-u", "nobody", "--", "ln", "-s", str(victim), str(link)],
                       check=True, cwd="/")
        monkeypatch.setenv("DONTO_HOME", str(link))
        assert default_home() == link  # not resolved
        with pytest.raises(ClusterError, match="is a symlink of the OS user 'nobody'"):
            Cluster(default_home(), settings=SMALL).start()
        assert victim.stat().st_mode & 0o777 == 0o700
        assert sorted(p.name for p in victim.iterdir()) == ["rootfile"]
        # a symlink of root's own is followed
        link.unlink()
        link.symlink_to(victim)
        Cluster(link, settings=SMALL)._make_home()
        assert victim.stat().st_mode & 0o777 == 0o755
        # a directory others may write in (not sticky) on the way is refused
        victim.chmod(0o777)
        with pytest.raises(ClusterError, match="other OS users may write in"):
            Cluster(victim / "h", settings=SMALL)._make_home()
    finally:
        link.unlink(missing_ok=True)
        shutil.rmtree(victim, ignore_errors=True)
