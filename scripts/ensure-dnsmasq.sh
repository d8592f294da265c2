#!/usr/bin/env bash
# Installs Debian's dnsmasq (the real DNS server the domains tests sweep through) when it is
# missing. DNSMASQ_PATH names another binary to use instead. Only the binary is used: the
# tests start their own server on a loopback port; the package's system service is not.
set -euo pipefail
if [ -n "${DNSMASQ_PATH:-}" ]; then
    if [ -x "$DNSMASQ_PATH" ]; then
        exit 0
    fi
    echo "DNSMASQ_PATH=$DNSMASQ_PATH is not an executable" >&2
    exit 1
fi
if command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ]; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update
# dnsmasq-base: the binary without the system service (which would take port 53).
$sudo apt-get install -y dnsmasq-base
