"""cluster-bootstrap: SSH-reachable Linux machines -> a Kubernetes cluster with usable NVIDIA GPUs.

The package reads top to bottom along the data flow: `inputs` (settings, inventory, validation, sources,
state) -> `render` (kubeadm config, manifests, playbook variables) -> `nodes` (SSH, Ansible, preflight,
prepare) and `kube` (API client, verification, drain, kubeconfig, smoke test) -> `phases` -> `cli`.
Each layer imports only from the layers below it (checked by import-linter in CI). See docs/architecture.md.
"""
from __future__ import annotations


def __getattr__(name: str) -> str:
    # The version is read from the installed metadata when asked for (`bootstrap --version`), not on every import:
    # reading it costs every command's start-up (tests/test_cli_startup.py).
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("cluster-bootstrap")
        except PackageNotFoundError:  # run from a checkout that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'provision' has no attribute {name!r}")
