#!/usr/bin/env bash
# Idempotent set-up for donto-pg on Debian 12 (bookworm).
#
#   1. PL/Python for PostgreSQL 15            (apt: postgresql-plpython3-15)
#   2. pgvector 0.8 built from Debian's source package (trixie deb-src),
#      because bookworm packages it for PostgreSQL 15 only from 0.5.
#   3. Debian's Chromium + chromedriver (the dashboard's browser test).
#   4. .venv with torch 2.13.0 (CPU) first, then donto-pg with its dev tools.
#
# Each step leaves a stamp (or checks the real thing) so that a second run
# does nothing slow. Needs root for steps 1-2 (it skips them when they are
# already done); step 3 runs as whoever calls it.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG="$PG_BIN/pg_config"
PY=${PYTHON:-python3}

log() { printf '[setup] %s\n' "$*"; }
need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "[setup] $1 is missing and installing it needs root: run 'sudo make setup' once." >&2
        exit 1
    fi
}

apt_updated=0
apt_update() {
    if [ "$apt_updated" = 0 ]; then
        log "apt-get update"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        apt_updated=1
    fi
}

# --- 1. PostgreSQL 15 + PL/Python ----------------------------------------
sharedir=$("$PG_CONFIG" --sharedir 2>/dev/null || true)
pkglibdir=$("$PG_CONFIG" --pkglibdir 2>/dev/null || true)
if [ ! -x "$PG_BIN/postgres" ] || [ ! -f "$pkglibdir/plpython3.so" ] || [ ! -x "$PG_CONFIG" ] \
        || [ ! -f "$("$PG_CONFIG" --includedir-server 2>/dev/null)/postgres.h" ]; then
    need_root "PostgreSQL 15 with PL/Python"
    apt_update
    log "installing postgresql-15, postgresql-plpython3-15, postgresql-server-dev-15"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        postgresql-15 postgresql-plpython3-15 postgresql-server-dev-15 build-essential >/dev/null
    sharedir=$("$PG_CONFIG" --sharedir)
    pkglibdir=$("$PG_CONFIG" --pkglibdir)
fi

# --- 2. pgvector 0.8 ------------------------------------------------------
if ! ls "$sharedir"/extension/vector--0.8*.sql >/dev/null 2>&1 || [ ! -f "$pkglibdir/vector.so" ]; then
    need_root "pgvector"
    src=/etc/apt/sources.list.d/donto-pg-trixie-src.sources
    if [ ! -f "$src" ]; then
        # Same Debian archive as the machine's own bookworm sources.
        uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
        [ -n "$uri" ] || uri=$(awk '$1=="deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
        [ -n "$uri" ] || { echo "[setup] cannot find the Debian archive URI in apt sources" >&2; exit 1; }
        log "adding deb-src trixie from $uri (source packages only)"
        printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
            "$uri" > "$src"
        apt_updated=0
    fi
    apt_update
    work=$(mktemp -d)
    log "building pgvector from Debian's source package in $work"
    (
        cd "$work"
        apt-get source --download-only pgvector >/dev/null
        tar xf pgvector_*.orig.tar.*
        cd pgvector-*/
        make -s PG_CONFIG="$PG_CONFIG" >/dev/null 2>&1
        make -s PG_CONFIG="$PG_CONFIG" install >/dev/null
    )
    rm -rf "$work"
fi

# --- 2b. Chromium, for the dashboard's browser test ------------------------
bash scripts/install-chromium.sh >/dev/null || log "warning: no Chromium: the dashboard browser test will fail (run scripts/install-chromium.sh as root)"

# --- 3. virtualenv ----------------------------------------------------------
if [ ! -x .venv/bin/python ]; then
    log "creating .venv"
    "$PY" -m venv .venv
fi
stamp=.venv/.donto-setup
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    if ! .venv/bin/python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "2.13.0")' 2>/dev/null; then
        log "installing torch 2.13.0 (CPU)"
        # PyPI's Linux torch is the CUDA build (gigabytes of nvidia packages); these
        # machines carry the CPU wheel locally. Elsewhere set DONTO_TORCH_INDEX, e.g.
        # https://download.pytorch.org/whl/cpu, to take the CPU build from there.
        .venv/bin/pip install -q torch==2.13.0 ${DONTO_TORCH_INDEX:+--index-url "$DONTO_TORCH_INDEX"}
        if .venv/bin/python -c 'import sys, torch; sys.exit(torch.version.cuda is None)'; then
            log "warning: pip installed a CUDA build of torch; for the CPU build, run" \
                "DONTO_TORCH_INDEX=https://download.pytorch.org/whl/cpu scripts/setup.sh" \
                "after removing .venv"
        fi
    fi
    log "installing donto-pg with dev tools"
    .venv/bin/pip install -q -e '.[dev]'
    echo "$want" > "$stamp"
fi

# --- 4. the server's postgres user must reach the package ------------------
# PL/Python runs as the OS user that owns the server (postgres when we are
# root). It imports donto_pg and sentence-transformers from this .venv, so
# every directory above it must be traversable by that user.
if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1; then
    d="$here"
    while [ "$d" != / ]; do
        if ! runuser -u postgres -- test -x "$d"; then
            log "letting the postgres user traverse $d (o+x)"
            chmod o+x "$d"
        fi
        d=$(dirname "$d")
    done
fi
log "ready"
