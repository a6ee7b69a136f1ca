"""The Kubernetes API client, built from a kubeconfig by the kubernetes library (never parsed by hand)."""
from __future__ import annotations

from pathlib import Path

from kubernetes import client, config

from provision.errors import BootstrapError


def load_api_client(kubeconfig: Path, context: str | None = None) -> client.ApiClient:
    if not kubeconfig.is_file():
        raise BootstrapError(f"{kubeconfig}: kubeconfig not found; run `bootstrap up` first or pass --kubeconfig")
    try:
        return config.new_client_from_config(config_file=str(kubeconfig), context=context)
    except config.ConfigException as exc:
        raise BootstrapError(f"{kubeconfig}: not a usable kubeconfig: {exc}") from None
