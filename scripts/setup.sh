#!/usr/bin/env bash
# One-time (and idempotent) set-up on a fresh Debian/Ubuntu machine: the apt packages the lab needs and two
# virtual environments with the project (the Ansible collections the roles use come with the pinned `ansible`
# package):
#   .venv         the machine's python3 (3.11 here) with ansible-core 2.19, the trainer's torch and the tests;
#   .venv-modern  a Python >= 3.12 (found, or built once by scripts/modern-python.sh) with ansible-core 2.21,
#                 the controller that also manages the EL8 family; the lab tests run under it.
# Re-runs are quick: each step is skipped when its inputs have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
MODERN_VENV=${MODERN_VENV:-$ROOT/.venv-modern}
PY=${PYTHON:-python3}

# usage: scripts/setup.sh [test|vm|up|lab]
#   test (default): what the test suite needs: debootstrap + systemd-nspawn for the lab nodes, iptables/iproute2
#                   for their network, gnupg to sign the lab's throwaway apt and RPM repositories, rpm (rpmbuild,
#                   rpmsign) + createrepo-c to build the RPM one (RHEL-shaped lab nodes), vagrant + vagrant-libvirt
#                   for `vagrant validate`; for the offline bundle's tests: dnf (resolves RPM closures), skopeo and
#                   docker-registry (the CNCF distribution registry: the bundle's images), debian-archive-keyring;
#                   both venvs with the test extras (and the trainer's torch in .venv).
#   vm:             also libvirt and QEMU, for the Vagrant lab itself (the slow test).
#   up:             what `./dev.sh up INVENTORY` needs and nothing else: the ssh client and the controller
#                   (.venv-modern with the project and its runtime dependencies: no test tools, no torch).
#   lab:            up, and the lab's own packages (vagrant, vagrant-libvirt, libvirt, QEMU: LAB_PACKAGES of
#                   provision/lab/host.py, which `./dev.sh up` checks first).
PROFILE=${1:-test}
APT_TEST=(debootstrap systemd-container iptables iproute2 openssh-client gnupg rpm createrepo-c vagrant vagrant-libvirt
          dnf skopeo docker-registry debian-archive-keyring)
APT_VM=(libvirt-daemon-system qemu-system-x86 qemu-utils dnsmasq-base e2fsprogs)
case "$PROFILE" in
  test|vm|up|lab) ;;
  *) echo "usage: scripts/setup.sh [test|vm|up|lab]" >&2; exit 2 ;;
esac

apt_install() {  # apt_install [--no-install-recommends] PACKAGE...: only the ones not installed yet
  local opts=() missing=()
  [ "$1" = --no-install-recommends ] && { opts=("$1"); shift; }
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "setup: installing apt packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${opts[@]}" "${missing[@]}" >/dev/null
}
case "$PROFILE" in
  test|vm) apt_install --no-install-recommends "${APT_TEST[@]}" ;;
  up) apt_install --no-install-recommends openssh-client ;;
  lab) apt_install --no-install-recommends openssh-client vagrant vagrant-libvirt ;;
esac
# libvirt's network needs dnsmasq, which it only recommends: the VM set is installed as tested, with recommends.
if [ "$PROFILE" = vm ] || [ "$PROFILE" = lab ]; then apt_install "${APT_VM[@]}"; fi

# kubectl, for the test that runs kubectl's own kustomize on an add-on's kustomization (tests/test_addons.py).
# Debian packages it from trixie on (bookworm's kubernetes-client is 1.20, too old for that kustomization); on an
# older Debian the trixie package is fetched through a private apt list and installed (a static Go binary: it
# needs only libc6 >= 2.34). Debian's signatures are checked as for any other package.
install_kubectl() {
  command -v kubectl >/dev/null && return 0
  if apt-cache show kubectl >/dev/null 2>&1; then apt_install kubectl; return 0; fi
  local apt_dir sudo="" opts
  [ "$(id -u)" = 0 ] || sudo=sudo
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > "$apt_dir/sources.list"
  opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache")
  echo "setup: installing kubectl (Debian trixie's package)"
  apt-get "${opts[@]}" update -q >/dev/null
  (cd "$apt_dir" && apt-get "${opts[@]}" download -q kubectl >/dev/null)
  $sudo dpkg -i "$apt_dir"/kubectl_*.deb >/dev/null
  rm -rf "$apt_dir"
}
# Only the tests run kubectl here.
case "$PROFILE" in test|vm) install_kubectl ;; esac

# Each venv is refreshed when its inputs change (pyproject.toml, this script, its Python) or when it lacks an extra
# asked for; the extras it has are kept in its stamp, so `./dev.sh up` (no extras) takes the venv `./dev.sh test` made
# as it is, and `./dev.sh test` after `./dev.sh up` adds the test tools. Their dependencies install side by side (most
# of set-up's time is pip unpacking wheels, torch above all); the project itself then goes into one venv at a time,
# since an editable install writes its metadata into this checkout.
venv_stamp() {  # venv_stamp PYTHON
  cat pyproject.toml scripts/setup.sh <("$1" -V) | sha256sum | cut -c1-16
}
venv_extras() {  # venv_extras DIR PYTHON: the extras the venv has, when its stamp is current ("" otherwise)
  local stamp="" extras=""
  [ -f "$1/.setup-stamp" ] && read -r stamp extras < "$1/.setup-stamp"
  [ "$stamp" = "$(venv_stamp "$2")" ] && echo "${extras:-,}"
}
venv_current() {  # venv_current DIR PYTHON EXTRAS: current, with every extra asked for
  local have extra
  have=$(venv_extras "$1" "$2") || return 1
  [ -n "$have" ] || return 1
  for extra in ${3//,/ }; do [[ ",$have," == *",$extra,"* ]] || return 1; done
}
venv_deps() {  # venv_deps DIR PYTHON EXTRAS: create the venv and install what the project and its extras require
  local dir=$1 python=$2 extras=$3
  echo "setup: creating $dir ($("$python" -V))"
  [ -x "$dir/bin/python" ] || "$python" -m venv "$dir"
  # The requirements as pyproject.toml lists them, markers included (pip evaluates them for this venv's Python).
  "$dir/bin/python" -c 'import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = [e for e in sys.argv[1].split(",") if e]
print("\n".join(project["dependencies"] + [r for e in extras for r in project["optional-dependencies"][e]]))' \
    "$extras" > "$dir/.setup-requirements"
  # torch==2.13.0 is pinned in the trainer extra; the CPU wheel is taken from a local wheel directory when one is
  # configured. pip's warnings about configured-but-absent local indexes are noise; real errors still fail.
  "$dir/bin/pip" install -q --disable-pip-version-check -r "$dir/.setup-requirements" \
    2> >(grep -v "^WARNING: Location" >&2)
}
venv_project() {  # venv_project DIR PYTHON EXTRAS: the project itself, editable, then the stamp (with the extras
  local dir=$1 python=$2 extras=$3 had   # it had before, when its inputs have not changed)
  had=$(venv_extras "$dir" "$python" || true)
  "$dir/bin/pip" install -q --disable-pip-version-check --no-deps -e . 2> >(grep -v "^WARNING: Location" >&2)
  extras=$(echo "${had//,/ } ${extras//,/ }" | tr ' ' '\n' | sed '/^$/d' | sort -u | paste -sd, -)
  echo "$(venv_stamp "$python") ${extras:-,}" > "$dir/.setup-stamp"
}
MODERN_PY=$(scripts/modern-python.sh)
if [ "$PROFILE" = up ] || [ "$PROFILE" = lab ]; then
  declare -a VENVS=("$MODERN_VENV|$MODERN_PY|fast") STALE=() PIDS=()
else
  declare -a VENVS=("$VENV|$PY|test,trainer,fast" "$MODERN_VENV|$MODERN_PY|test,fast") STALE=() PIDS=()
fi
for spec in "${VENVS[@]}"; do
  IFS='|' read -r dir python extras <<< "$spec"
  venv_current "$dir" "$python" "$extras" && continue
  STALE+=("$spec")
  venv_deps "$dir" "$python" "$extras" &
  PIDS+=($!)
done
for pid in "${PIDS[@]}"; do wait "$pid"; done
for spec in "${STALE[@]}"; do
  IFS='|' read -r dir python extras <<< "$spec"
  venv_project "$dir" "$python" "$extras"
done
