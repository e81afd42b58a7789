#!/usr/bin/env bash
# Installs the Debian tools the suite drives, if missing: chromium (the dashboard's
# browser test, through playwright-core) and promtool (from the prometheus package:
# the alert rules' tests). Idempotent; a no-op once installed.
set -euo pipefail

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
[ "${#missing[@]}" -eq 0 ] && { echo "tools: chromium and promtool present"; exit 0; }

echo "tools: installing ${missing[*]} from Debian's packages"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo -n"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The prometheus package starts a server on :9090 through its service scripts on
# some machines; the suite needs only promtool, so stop it if it came up.
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  pkill -x prometheus >/dev/null 2>&1 || true
fi
command -v chromium >/dev/null && command -v promtool >/dev/null
echo "tools: chromium and promtool installed"
