#!/usr/bin/env bash
# The two entry points: `./dev.sh up [INVENTORY]` brings a cluster up (the local Vagrant lab by default),
# `./dev.sh test` runs the test suite. Both install what they need first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
case "${1:-}" in
  up)
    shift
    inventory=${1:-${INVENTORY:-}}
    if [ -n "$inventory" ]; then exec .venv/bin/bootstrap up --inventory "$inventory" "${@:2}"; fi
    exec .venv/bin/bootstrap lab up ;;
  test)
    shift
    exec .venv/bin/pytest "$@" ;;
  *) echo "usage: ./dev.sh up [INVENTORY] | ./dev.sh test [PYTEST ARGS]" >&2; exit 2 ;;
esac
