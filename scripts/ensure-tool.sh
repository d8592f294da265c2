#!/usr/bin/env bash
# ensure-tool.sh NAME VARIABLE PACKAGE...: installs Debian's PACKAGE (apt-get install's
# arguments) when the command NAME is missing (on the PATH or in /usr/sbin). The environment
# variable VARIABLE, when set, names another binary to use instead, which must be executable. `make test` runs it for
# Chromium (the maps spider's browser), dnsmasq (the real DNS server the domains tests sweep
# through) and promtool (the alert rules' tests); only the binaries are used, never a service.
set -euo pipefail
name="$1" variable="$2"
shift 2
given="${!variable:-}"
if [ -n "$given" ]; then
    if [ -x "$given" ]; then
        exit 0
    fi
    echo "$variable=$given is not an executable" >&2
    exit 1
fi
if command -v "$name" >/dev/null || [ -x "/usr/sbin/$name" ]; then
    exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    sudo="sudo"
fi
$sudo apt-get update
$sudo apt-get install -y "$@"
