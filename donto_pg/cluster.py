"""The embedded default database: a private PostgreSQL 15 cluster.

With no ``DONTO_DSN`` and no ``--dsn``, donto-pg runs its own cluster under
``DONTO_HOME`` (default: ``$XDG_DATA_HOME/donto-pg`` or
``~/.local/share/donto-pg``; as root ``/var/lib/donto-pg``, because root's home
is closed to the server's OS user)::

    DONTO_HOME/pgdata      the cluster (initdb)
    DONTO_HOME/run         the unix socket (no TCP: listen_addresses = '')
    DONTO_HOME/postgres.log

PostgreSQL refuses to run as root, so when we are root the server runs as the
``postgres`` OS user (``runuser``) and owns ``pgdata`` and ``run``. The
superuser inside the cluster is always ``donto``.

Who can connect (two independent locks, both set again on every start, so a
cluster made by an older version is upgraded in place and reloaded):

- the socket directory and the socket are mode 0700, owned by the server's OS
  user: no other OS user but root can even reach the server;
- ``pg_hba.conf`` allows the unix socket only: role ``donto`` by peer
  authentication through the ``donto`` ident map (the server's OS user and
  root), every other role by password (scram-sha-256). There are no TCP lines.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISDIR, S_ISLNK, S_ISREG, S_ISVTX

PG_BIN = Path(os.environ.get("DONTO_PG_BIN", "/usr/lib/postgresql/15/bin"))
SUPERUSER = "donto"
DBNAME = "donto"
PORT = 5432  # only names the socket file; the socket dir is private
IDENT_MAP = "donto"

HBA_CONF = f"""\
# Managed by donto-pg: rewritten on every `donto-pg db start`; edits are lost.
# Unix socket only (no TCP lines: a TCP connection is refused even if enabled).
# TYPE  DATABASE  USER         METHOD
local   all       {SUPERUSER:<12} peer map={IDENT_MAP}
local   all       all          scram-sha-256
"""


def _shared_buffers() -> str:
    """A quarter of the machine's memory, at least 128MB and at most 2GB (the usual
    PostgreSQL advice): the HNSW index of one BEAM-10M conversation is ~1 GB, and recall's
    vector arm is 1.4x faster when it is in shared buffers (BENCHMARKS.md)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return "256MB"
    return f"{max(128, min(2048, total // 4 // 2**20))}MB"


# Server settings for a memory substrate on a small machine.
SERVER_SETTINGS = {
    "listen_addresses": "''",
    "shared_buffers": _shared_buffers(),
    "maintenance_work_mem": "1GB",
    "work_mem": "64MB",
    "max_connections": "60",
    "max_wal_size": "4GB",
    "unix_socket_permissions": "0700",
}


class ClusterError(RuntimeError):
    """The embedded cluster could not be created, started or reached."""


# What the server's processes inherit: nothing of the caller's environment but these (an
# API key or PGPASSWORD in root's environment is not the postgres OS user's to read, nor
# SQL's through /proc or PL/Python's os.environ).
SERVER_ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                   "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def _server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k in SERVER_ENV_KEEP or k.startswith("LC_")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false"})
    return env


def _check_way(path: Path) -> None:
    """Refuse PATH when another OS user could change the way to it under us: a symlink on
    it that is theirs, or a directory on it that they own or may write in (unless it is
    sticky, as /tmp is: then only the entries we made are ours to change). Root or the
    caller must own everything on the way, so nothing root does under DONTO_HOME (mkdir,
    chown, chmod) can be sent elsewhere. Symlinks of root's or ours are followed."""
    trusted = {0, os.geteuid()}
    cur, todo, hops = Path("/"), list(path.parts[1:]), 0
    while todo:
        st = os.stat(cur)
        if st.st_uid not in trusted:
            raise ClusterError(f"{cur} belongs to the OS user {_user_name(st.st_uid)!r}: it "
                               f"could change the way to {path}; choose a DONTO_HOME whose "
                               "directories are yours or root's")
        if st.st_mode & 0o022 and not st.st_mode & S_ISVTX:
            raise ClusterError(f"other OS users may write in {cur} (mode "
                               f"{st.st_mode & 0o7777:o}, not sticky): they could change "
                               f"the way to {path}")
        nxt = cur / todo.pop(0)
        try:
            link = os.lstat(nxt)
        except FileNotFoundError:
            return  # what is left is made by us
        if not S_ISLNK(link.st_mode):
            cur = nxt
            continue
        if link.st_uid not in trusted:
            raise ClusterError(f"{nxt} is a symlink of the OS user "
                               f"{_user_name(link.st_uid)!r}: DONTO_HOME may not go "
                               "through another user's symlink")
        hops += 1
        if hops > 40:
            raise ClusterError(f"too many symlinks on the way to {path}")
        target = Path(os.path.normpath(cur / os.readlink(nxt)))  # cur holds no symlink
        cur, todo = Path("/"), list(target.parts[1:]) + todo


MAX_CONF_CHARS = 1 << 16  # ours are a few hundred; a longer file is someone else's


def _read_own_file(path: Path) -> str | None:
    """PATH's text if it is a regular file, without following a symlink (the server's OS
    user could point one at a FIFO, or /dev/zero, to hang a root process); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # missing, or a symlink (ELOOP)
        return None
    with os.fdopen(fd) as fh:
        if not S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        return fh.read(MAX_CONF_CHARS)


def _replace_file(path: Path, text: str, uid: int, gid: int) -> None:
    """Write PATH (mode 0600, owned by UID:GID) through a new temporary file beside it.

    As root this writes into a directory the server's OS user owns, so nothing may follow
    a symlink that user put there: the temporary file is created exclusively (O_EXCL,
    O_NOFOLLOW, a random name), its owner and mode are set through the descriptor, and
    rename replaces PATH itself, never a file it points to."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.donto-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            os.fchmod(fh.fileno(), 0o600)
            os.fchown(fh.fileno(), uid, gid)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def default_home() -> Path:
    """Where the embedded cluster lives when ``DONTO_HOME`` is not set."""
    if env := os.environ.get("DONTO_HOME"):  # not resolved: a symlink on the way is
        return Path(os.path.abspath(os.path.expanduser(env)))  # checked (_check_way)
    if os.geteuid() == 0:
        return Path("/var/lib/donto-pg")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "donto-pg"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError as exc:
        raise ClusterError(f"OS user id {uid} has no name (peer authentication needs one)") from exc


def _server_user() -> str | None:
    """The OS user the server runs as: ``postgres`` when we are root, else us."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise ClusterError(
            "running as root, but there is no 'postgres' OS user to run the server as "
            "(install postgresql-15, or run as an ordinary user)"
        ) from exc
    return "postgres"


@dataclass
class Cluster:
    """A private PostgreSQL cluster under ``home``."""

    home: Path
    settings: dict[str, str] | None = None

    @classmethod
    def default(cls) -> Cluster:
        return cls(default_home())

    @property
    def datadir(self) -> Path:
        return self.home / "pgdata"

    @property
    def sockdir(self) -> Path:
        return self.home / "run"

    @property
    def logfile(self) -> Path:
        return self.home / "postgres.log"

    def dsn(self, dbname: str = DBNAME) -> str:
        """A libpq URI that psql and psycopg accept."""
        host = str(self.sockdir).replace("/", "%2F")
        return f"postgresql://{SUPERUSER}@/{dbname}?host={host}&port={PORT}"

    def conninfo(self, dbname: str = DBNAME) -> dict[str, object]:
        """Keywords for psycopg (libpq 16 or later; db.client_options says why
        ``require_auth=none``: a socket planted in ``run`` gets no password)."""
        return {"host": str(self.sockdir), "port": PORT, "user": SUPERUSER, "dbname": dbname,
                "require_auth": "none"}

    # -- who may connect ---------------------------------------------------------
    def peer_users(self) -> list[str]:
        """The OS users peer authentication lets in as ``donto``: the server's OS user (the
        owner of ``pgdata``: whoever created the cluster, or ``postgres`` when root did) and
        root (who can read the data files anyway)."""
        if self.datadir.exists():
            owner = _user_name(self.datadir.stat().st_uid)
        else:
            owner = _server_user() or _user_name(os.geteuid())
        return sorted({owner, "root"})

    def auth_note(self) -> str:
        """How a client authenticates to this cluster, in one sentence."""
        return (f"psql and other libpq clients authenticate by peer (the OS user): "
                f"{', '.join(self.peer_users())} may connect as {SUPERUSER}; any other role "
                "needs its password; no other OS user can reach the socket")

    def _write_auth(self) -> bool:
        """Write the managed pg_hba.conf and pg_ident.conf; True if either changed."""
        ident = "".join(f'{IDENT_MAP}  "{u}"  {SUPERUSER}\n' for u in self.peer_users())
        files = {
            "pg_hba.conf": HBA_CONF,
            "pg_ident.conf": "# Managed by donto-pg: the OS users that connect as "
                             f"{SUPERUSER} (peer authentication).\n"
                             "# MAPNAME  SYSTEM-USERNAME  PG-USERNAME\n" + ident,
        }
        stat = self.datadir.stat()
        changed = False
        for name, text in files.items():
            path = self.datadir / name
            if _read_own_file(path) == text:
                continue
            _replace_file(path, text, stat.st_uid, stat.st_gid)
            changed = True
        return changed

    # -- running commands as the server's OS user ---------------------------
    def _run(self, args: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
        user = _server_user()
        cmd = ["runuser", "-u", user, "--", *args] if user else args
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_server_env())
        if check and proc.returncode != 0:
            raise ClusterError(
                f"{Path(args[0]).name} failed (exit {proc.returncode}): "
                f"{(proc.stderr or proc.stdout).strip()}"
            )
        return proc

    def _make_home(self) -> None:
        """Create DONTO_HOME, or check one that exists: it must be ours and a directory, and
        only we may write in it (its mode is set again). Everything donto-pg does as root
        in it (mkdir, chown, chmod) trusts that nobody else can put a symlink there."""
        # as root the server's user (postgres) must traverse it; else it is ours alone
        mode = 0o755 if _server_user() else 0o700
        _check_way(self.home)
        self.home.mkdir(parents=True, exist_ok=True, mode=mode)
        st = os.stat(self.home)  # a symlink on the way is root's or ours (_check_way)
        if not S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise ClusterError(
                f"{self.home} belongs to the OS user {_user_name(st.st_uid)!r}, not "
                f"{_user_name(os.geteuid())!r}, or is not a directory: DONTO_HOME must be a "
                "directory of the OS user that runs donto-pg")
        os.chmod(self.home, mode)

    def _prepare_dirs(self) -> None:
        user = _server_user()
        self._make_home()
        want = user or _user_name(os.geteuid())
        if self.datadir.exists() and (owner := _user_name(self.datadir.stat().st_uid)) != want:
            raise ClusterError(f"{self.datadir} belongs to the OS user {owner!r}, not {want!r}: "
                               f"run donto-pg as {owner!r} (or connect with its DSN)")
        for d in (self.datadir, self.sockdir):
            d.mkdir(exist_ok=True)
            if user:
                shutil.chown(d, user, user)
        self.datadir.chmod(0o700)
        self.sockdir.chmod(0o700)  # root reaches it anyway; nobody else may
        sock = self.sockdir / f".s.PGSQL.{PORT}"  # a running server's socket, made by an
        if user:  # older version 0777; the server's user may have put a symlink there:
            self._run(["chmod", "-f", "0700", str(sock)], check=False)  # chmod as that user
        else:
            with contextlib.suppress(FileNotFoundError):
                sock.chmod(0o700)
        self.logfile.touch(mode=0o600, exist_ok=True)
        self.logfile.chmod(0o600)
        if user:
            shutil.chown(self.logfile, user, user)
            # The server's user must be able to reach its directories.
            proc = self._run(["test", "-w", str(self.sockdir)], check=False)
            if proc.returncode != 0:
                raise ClusterError(
                    f"the 'postgres' OS user cannot reach {self.home}: set DONTO_HOME to a "
                    "directory it can traverse (for example under /var/lib or /tmp)"
                )

    @contextlib.contextmanager
    def _lock(self):
        self._make_home()
        with open(self.home / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    # -- lifecycle -------------------------------------------------------------
    def is_initialized(self) -> bool:
        return (self.datadir / "PG_VERSION").exists()

    def is_running(self) -> bool:
        if not self.is_initialized():
            return False
        proc = self._run([str(PG_BIN / "pg_ctl"), "status", "-D", str(self.datadir)], check=False)
        return proc.returncode == 0

    def init(self) -> bool:
        """Create the cluster if it does not exist. Returns True if it was created."""
        if self.is_initialized():
            return False
        if not (PG_BIN / "initdb").exists():
            raise ClusterError(
                f"PostgreSQL 15 is not installed ({PG_BIN}/initdb missing): run make setup")
        self._prepare_dirs()
        self._run([
            str(PG_BIN / "initdb"), "-D", str(self.datadir), "-U", SUPERUSER,
            "--auth-local=peer", "--auth-host=reject", "-E", "UTF8", "--locale=C.UTF-8",
            "--no-instructions",
        ])
        return True

    def start(self) -> bool:
        """Start the server (creating the cluster first). Returns True if it started now.

        Either way the directory modes and the authentication files are set again (a
        running server reloads them when they changed): idempotent."""
        with self._lock():
            self.init()
            self._prepare_dirs()
            auth_changed = self._write_auth()
            if self.is_running():
                if auth_changed:
                    self._run([str(PG_BIN / "pg_ctl"), "reload", "-D", str(self.datadir)])
                return False
            settings = {**SERVER_SETTINGS, **(self.settings or {})}
            opts = " ".join(f"-c {k}={v}" for k, v in settings.items())
            opts += f" -k {self.sockdir} -p {PORT}"
            self._run([
                str(PG_BIN / "pg_ctl"), "start", "-w", "-t", "60", "-D", str(self.datadir),
                "-l", str(self.logfile), "-o", opts,
            ])
            self._wait_ready()
            self._ensure_database()
            return True

    def stop(self) -> bool:
        """Stop the server. Returns True if it was running."""
        with self._lock():
            if not self.is_running():
                return False
            self._run([str(PG_BIN / "pg_ctl"), "stop", "-w", "-m", "fast", "-D", str(self.datadir)])
            return True

    def ensure_running(self) -> None:
        """Start the server unless it runs; either way its access rules are current."""
        self.start()

    def _wait_ready(self, timeout: float = 30.0) -> None:
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(**self.conninfo("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise ClusterError(f"server did not accept connections: {exc}") from exc
                time.sleep(0.2)

    def _ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(**self.conninfo("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "select 1 from pg_database where datname = %s", (DBNAME,)).fetchone()
            if not exists:
                conn.execute(f'create database "{DBNAME}"')

    def status(self) -> dict[str, object]:
        return {
            "home": str(self.home),
            "initialized": self.is_initialized(),
            "running": self.is_running(),
            "dsn": self.dsn(),
            "server_user": _server_user() or pwd.getpwuid(os.geteuid()).pw_name,
            "auth": self.auth_note(),
        }
