#!/usr/bin/env bash
# The two entry points: `./dev.sh up [INVENTORY]` brings a cluster up (the local Vagrant lab by default),
# `./dev.sh test` runs the test suite. Both install what they need first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  up)
    shift
    inventory=${1:-${INVENTORY:-}}
    if [ -n "$inventory" ]; then scripts/setup.sh; exec .venv/bin/bootstrap up --inventory "$inventory" "${@:2}"; fi
    scripts/setup.sh vm
    exec .venv/bin/bootstrap lab up ;;
  test)
    shift
    # RUN_SLOW=1 also runs the slow Vagrant test, which needs libvirt and QEMU.
    if [ -n "${RUN_SLOW:-}" ]; then scripts/setup.sh vm; else scripts/setup.sh; fi
    exec .venv/bin/pytest "$@" ;;
  *) echo "usage: ./dev.sh up [INVENTORY] | ./dev.sh test [PYTEST ARGS]" >&2; exit 2 ;;
esac
