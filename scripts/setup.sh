#!/usr/bin/env bash
# One-time (and idempotent) set-up on a fresh Debian/Ubuntu machine: apt packages the lab needs,
# a virtual environment with the project and its test/trainer extras, and the pinned Ansible collections.
# Re-runs are quick: each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}

# gnupg: the lab tests sign a throwaway apt repository (GPG checks stay on).
APT_PACKAGES=(debootstrap systemd-container iptables iproute2 openssh-client gnupg)
missing=()
for p in "${APT_PACKAGES[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing apt packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

stamp="$VENV/.setup-stamp"
want=$(cat pyproject.toml scripts/setup.sh scripts/install_collections.py | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: creating $VENV"
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  # torch==2.13.0 is pinned in the trainer extra; the CPU wheel is taken from a local wheel directory when one is configured.
  # pip's warnings about configured-but-absent local indexes are noise; real errors still fail the script.
  "$VENV/bin/pip" install -q --disable-pip-version-check -e ".[test,trainer,fast]" 2> >(grep -v "^WARNING: Location" >&2)
  "$VENV/bin/python" scripts/install_collections.py "$ROOT/.collections"
  echo "$want" > "$stamp"
fi
