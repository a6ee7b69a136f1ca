"""cluster-bootstrap: SSH-reachable Linux machines -> a Kubernetes cluster with usable NVIDIA GPUs.

The package reads top to bottom along the data flow: `inputs` (settings, inventory, validation, sources,
state) -> `render` (kubeadm config, manifests, playbook variables) -> `nodes` (SSH, Ansible, preflight,
prepare) and `kube` (API client, verification, drain, kubeconfig, smoke test) -> `phases` -> `cli`.
Each layer imports only from the layers below it (checked by import-linter in CI). See docs/architecture.md.
"""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("cluster-bootstrap")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
