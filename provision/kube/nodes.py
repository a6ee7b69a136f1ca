"""Node labels the tool keeps, set through the API.

kubeadm gives the control plane `node-role.kubernetes.io/control-plane` but leaves workers without a role, so
`kubectl get nodes` shows them as `<none>` until someone labels them by hand (as the seeds do). The join phase
labels them once they are Ready; a node that already carries the label is not patched again.
"""
from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

from provision.kube.client import call_api

WORKER_ROLE_LABEL = "node-role.kubernetes.io/worker"


def label_workers(api: client.ApiClient, names: Iterable[str]) -> list[str]:
    """Give each named node the worker role label; returns the nodes that had to be patched."""
    core = client.CoreV1Api(api)
    patched = []
    for name in names:
        node = call_api(api, core.read_node, name)
        labels = (node.metadata.labels if node.metadata else None) or {}
        if WORKER_ROLE_LABEL in labels:
            continue
        call_api(api, core.patch_node, name, {"metadata": {"labels": {WORKER_ROLE_LABEL: ""}}})
        patched.append(name)
    return patched
