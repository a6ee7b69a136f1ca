#!/usr/bin/env bash
# The two entry points: `./dev.sh up [INVENTORY]` brings a cluster up (the local Vagrant lab by default),
# `./dev.sh test` runs the test suite. Each installs what it needs first, and only that (scripts/setup.sh up|lab|test).
set -euo pipefail
cd "$(dirname "$0")"

# Unit tests reach nothing but loopback. The test session refuses other connections in its own process
# (tests/support/no_network.py); the subprocesses they start (ssh, ansible-playbook) are held by running the
# whole pass in an empty network namespace, where only `lo` exists: a broken refusal of a LAN-like address then
# meets "network unreachable" instead of a machine.
offline() {  # offline COMMAND...
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
    unshare --net -- sh -c 'ip link set lo up && exec "$@"' offline "$@"
  elif [ "${CI:-}" = true ]; then
    echo "CI runs the unit tests in an empty network namespace: run it as root (unshare)" >&2
    return 1
  else
    echo "note: not root: the unit tests' subprocesses are not held in an empty network namespace" >&2
    "$@"
  fi
}

# pytest's exit 5 means the selection was empty: a pass that has nothing to run here is not a failure. Each pass
# ends with its slowest tests (--durations).
pytest_pass() {  # pytest_pass [--offline] VENV MARKEXPR ARGS...
  local wrap=() venv marks rc=0
  if [ "$1" = --offline ]; then wrap=(offline); shift; fi
  venv=$1 marks=$2
  shift 2
  echo "== $("$venv/bin/python" -c 'import sys, ansible; print(f"Python {sys.version.split()[0]}, ansible-core {ansible.__version__}")'): pytest -m '$marks' $*"
  "${wrap[@]}" "$venv/bin/pytest" -m "$marks" --durations=15 --durations-min=1 "$@" || rc=$?
  [ "$rc" = 5 ] && return 0
  return "$rc"
}

# Where the `bootstrap` that the tool's hints name is: on PATH, or (what the hints then print) this checkout's.
where_bootstrap() {
  local found
  found=$(command -v bootstrap 2>/dev/null || true)
  if [ "$found" != "$PWD/.venv-modern/bin/bootstrap" ]; then
    echo "setup: bootstrap is $PWD/.venv-modern/bin/bootstrap (not on PATH: the commands it prints name that path;" \
         "add $PWD/.venv-modern/bin to PATH to type \`bootstrap\`)"
  fi
}

case "${1:-}" in
  up)
    shift
    inventory=${1:-${INVENTORY:-}}
    # The newest controller (ansible-core 2.21) manages every supported OS, the EL8 family included. `up` installs
    # what it runs and nothing else: the controller's venv (no test tools, no torch: those are `./dev.sh test`'s).
    if [ -n "$inventory" ]; then
      scripts/setup.sh up
      where_bootstrap
      exec .venv-modern/bin/bootstrap up --inventory "$inventory" "${@:2}"
    fi
    # The lab: what this machine lacks for it is said first, in seconds, with the machine's own python3 and nothing
    # installed (provision/lab/host.py): libvirtd answering, KVM, Vagrant and its libvirt plugin. Exit 3: only
    # packages are missing, which the set-up installs; then everything is checked again.
    rc=0; missing=$(python3 -m provision.lab.host) || rc=$?
    case "$rc" in
      0) ;;
      3) echo "setup: the lab needs: $missing" ;;
      *) exit 1 ;;
    esac
    scripts/setup.sh lab
    [ "$rc" = 0 ] || python3 -m provision.lab.host >/dev/null
    where_bootstrap
    exec .venv-modern/bin/bootstrap lab up ;;
  test)
    shift
    # RUN_SLOW=1 also runs the slow Vagrant test, which needs libvirt and QEMU.
    if [ -n "${RUN_SLOW:-}" ]; then scripts/setup.sh vm; else scripts/setup.sh; fi
    # 1. Every unit test under ansible-core 2.19 on Python 3.11, with the trainer's torch (a missing torch fails
    #    here rather than skipping). 2. Under ansible-core 2.21 on Python >= 3.12 (no torch), again the unit tests
    #    that depend on the controller (found from their imports: tests/support/controller.py); the others ran in
    #    the first pass. Both in an empty network namespace, UNIT_WORKERS test files at a time (default: one per
    #    core). 3. The tests on real lab nodes under 2.21, the controller users get by default: LAB_TEST_WORKERS test
    #    files side by side (each lab in its own slot; a file's tests stay together, sharing its labs).
    unit_workers=${UNIT_WORKERS:-$(nproc)}
    #    The few tests marked `network` (they install from PyPI) run in the third pass, which is online.
    unit="not lab and not network and not slow"
    CB_REQUIRE_TORCH=1 pytest_pass --offline .venv "$unit" -n "$unit_workers" --dist loadfile "$@"
    CB_CONTROLLER_PASS=second pytest_pass --offline .venv-modern "$unit" -n "$unit_workers" --dist loadfile "$@"
    pytest_pass .venv-modern "lab or network${RUN_SLOW:+ or slow}" -n "${LAB_TEST_WORKERS:-4}" --dist loadfile "$@" ;;
  *) echo "usage: ./dev.sh up [INVENTORY] | ./dev.sh test [PYTEST ARGS]" >&2; exit 2 ;;
esac
