#!/usr/bin/env bash
# Print the path of a CPython >= 3.12 (what ansible-core 2.21, the controller for the EL8 family, needs),
# building CPython 3.13 from Debian trixie's source package into a cache when this machine has none.
#   scripts/modern-python.sh            # found or built; about 5 minutes on 2 cores the first time
#   FORCE_BUILD_PYTHON=1 scripts/modern-python.sh    # build even when one is found (to test the build)
# The cache (CB_PYTHON_CACHE, default /var/cache/cluster-bootstrap/python3.13) outlives the checkout.
set -euo pipefail
CACHE=${CB_PYTHON_CACHE:-/var/cache/cluster-bootstrap/python3.13}

usable() {  # usable PYTHON: a CPython >= 3.12 with the modules a venv and ansible need
  "$1" -c 'import sys, ssl, venv, ctypes, sqlite3, lzma, bz2, zlib; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}

if [ -z "${FORCE_BUILD_PYTHON:-}" ]; then
  # pyenv's shims answer for versions that are installed but not selected (and then fail): try the real binaries.
  # Newest first: pyenv's versions sorted by version, highest first.
  pyenv_pythons=$(ls -d "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV || true)
  for candidate in "${MODERN_PYTHON:-}" python3.14 python3.13 python3.12 "$CACHE/bin/python3" $pyenv_pythons \
                   /usr/local/bin/python3.1[2-9]; do
    [ -n "$candidate" ] || continue
    path=$(command -v "$candidate" 2>/dev/null) || continue
    if usable "$path"; then echo "$path"; exit 0; fi
  done
fi

sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
echo "modern-python: no Python >= 3.12 here: building CPython 3.13 from trixie's source into $CACHE" >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A private apt configuration: the machine's own sources stay untouched.
mkdir -p "$work/lists/partial"
echo "deb-src http://deb.debian.org/debian trixie main" > "$work/sources.list"
apt_opts=(-o "Dir::Etc::sourcelist=$work/sources.list" -o "Dir::Etc::sourceparts=-" -o "Dir::State::Lists=$work/lists"
          -o "Acquire::Check-Valid-Until=false" -o "Acquire::Check-Date=false")
apt-get "${apt_opts[@]}" update -q >&2
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends build-essential pkg-config \
  libssl-dev zlib1g-dev libffi-dev libbz2-dev libsqlite3-dev liblzma-dev libreadline-dev uuid-dev libgdbm-dev \
  libncurses-dev dpkg-dev >&2
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only -q python3.13 >&2)
tarball=$(ls "$work"/python3.13_*.orig.tar.* | head -n 1)
tar -C "$work" -xf "$tarball"
src=$(find "$work" -maxdepth 1 -type d -name 'Python-3.13*' | head -n 1)
$sudo mkdir -p "$CACHE"
# `make install` installs pip from the wheel bundled in the source (no network), so venvs get pip.
(cd "$src" && ./configure -q --prefix="$CACHE" >&2 && make -s -j"$(nproc)" >&2 && $sudo make -s install >&2)
usable "$CACHE/bin/python3" || { echo "modern-python: the build in $CACHE does not work" >&2; exit 1; }
echo "$CACHE/bin/python3"
