#!/usr/bin/env bash
# Idempotent: install Debian's Chromium and chromedriver for the dashboard's browser
# test (tests/db/test_dashboard.py drives headless Chromium over WebDriver). Does
# nothing when /usr/bin/chromium and /usr/bin/chromedriver are there; otherwise
# needs root (apt-get).
set -euo pipefail

CHROMIUM=/usr/bin/chromium
CHROMEDRIVER=/usr/bin/chromedriver

if [ -x "$CHROMIUM" ] && [ -x "$CHROMEDRIVER" ]; then
    echo "[install-chromium] $CHROMIUM and $CHROMEDRIVER are already installed"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    echo "[install-chromium] Chromium is missing and installing it needs root:" \
         "run 'sudo bash scripts/install-chromium.sh'" >&2
    exit 1
fi
echo "[install-chromium] apt-get install chromium chromium-driver"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium chromium-driver >/dev/null
"$CHROMIUM" --version
