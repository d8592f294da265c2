#!/usr/bin/env bash
# Installs Debian's prometheus package for its promtool (the alert rules' unit tests,
# tests/test_alerts.py) when it is missing. PROMTOOL_PATH names another binary to use instead.
# Only promtool is used: the package's system service is not started by the tests.
set -euo pipefail
if [ -n "${PROMTOOL_PATH:-}" ]; then
    if [ -x "$PROMTOOL_PATH" ]; then
        exit 0
    fi
    echo "PROMTOOL_PATH=$PROMTOOL_PATH is not an executable" >&2
    exit 1
fi
if command -v promtool >/dev/null; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update
$sudo apt-get install -y --no-install-recommends prometheus
