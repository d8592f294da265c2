#!/usr/bin/env bash
# Installs Debian's Chromium (the maps spider's browser) when it is missing.
# CHROMIUM_PATH names another binary to use instead.
set -euo pipefail
path="${CHROMIUM_PATH:-/usr/bin/chromium}"
if [ -x "$path" ]; then
    exit 0
fi
if [ -n "${CHROMIUM_PATH:-}" ]; then
    echo "CHROMIUM_PATH=$path is not an executable" >&2
    exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update
$sudo apt-get install -y chromium
