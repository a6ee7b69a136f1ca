"""The Kubernetes API client, built from a kubeconfig by the kubernetes library (never parsed by hand)."""
from __future__ import annotations

import shlex
from pathlib import Path

from kubernetes import client, config

from provision.errors import BootstrapError
from provision.inputs.state import state_root


def _where_kubeconfigs_are() -> str:
    """Where to find one: the admin kubeconfigs `bootstrap up` installed under the state directory (`up` merges
    into ~/.kube/config only when asked), or how to form a cluster."""
    found = sorted(state_root().glob("clusters/*/admin.conf"))
    if len(found) == 1:
        return (f"pass --kubeconfig {shlex.quote(str(found[0]))} (the admin kubeconfig of the cluster formed from "
                "this machine), or merge it into ~/.kube/config with `bootstrap kubeconfig --merge`")
    if found:
        return (f"pass --kubeconfig with the admin kubeconfig of one of the {len(found)} clusters formed from this "
                f"machine: {', '.join(shlex.quote(str(path)) for path in found)}")
    return "no cluster was formed from this machine yet: `bootstrap up` forms one (or pass --kubeconfig)"


def load_api_client(kubeconfig: Path, context: str | None = None) -> client.ApiClient:
    if not kubeconfig.is_file():
        raise BootstrapError(f"{kubeconfig}: kubeconfig not found: {_where_kubeconfigs_are()}")
    try:
        return config.new_client_from_config(config_file=str(kubeconfig), context=context)
    except config.ConfigException as exc:
        raise BootstrapError(f"{kubeconfig}: not a usable kubeconfig: {exc}") from None
