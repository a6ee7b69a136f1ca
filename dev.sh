#!/usr/bin/env bash
# The two entry points: `./dev.sh up [INVENTORY]` brings a cluster up (the local Vagrant lab by default),
# `./dev.sh test` runs the test suite. Both install what they need first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")"

# pytest's exit 5 means the selection was empty: a pass that has nothing to run here is not a failure.
pytest_pass() {  # pytest_pass VENV MARKEXPR ARGS...
  local venv=$1 marks=$2 rc=0
  shift 2
  echo "== $("$venv/bin/python" -c 'import sys, ansible; print(f"Python {sys.version.split()[0]}, ansible-core {ansible.__version__}")'): pytest -m '$marks' $*"
  "$venv/bin/pytest" -m "$marks" "$@" || rc=$?
  [ "$rc" = 5 ] && return 0
  return "$rc"
}

case "${1:-}" in
  up)
    shift
    inventory=${1:-${INVENTORY:-}}
    # The newest controller (ansible-core 2.21) manages every supported OS, the EL8 family included.
    if [ -n "$inventory" ]; then scripts/setup.sh; exec .venv-modern/bin/bootstrap up --inventory "$inventory" "${@:2}"; fi
    scripts/setup.sh vm
    exec .venv-modern/bin/bootstrap lab up ;;
  test)
    shift
    # RUN_SLOW=1 also runs the slow Vagrant test, which needs libvirt and QEMU.
    if [ -n "${RUN_SLOW:-}" ]; then scripts/setup.sh vm; else scripts/setup.sh; fi
    # Unit tests under both controllers (ansible-core 2.19 on Python 3.11, with the trainer's torch; ansible-core
    # 2.21 on Python >= 3.12, which has no torch and leaves the trainer's tests out); the tests on real lab
    # nodes under 2.21, the controller users get by default.
    pytest_pass .venv "not lab" "$@"
    pytest_pass .venv-modern "" "$@" ;;
  *) echo "usage: ./dev.sh up [INVENTORY] | ./dev.sh test [PYTEST ARGS]" >&2; exit 2 ;;
esac
