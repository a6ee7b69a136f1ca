"""The Kubernetes API client, built from a kubeconfig by the kubernetes library (never parsed by hand), and one call
through it (call_api): a bounded wait, an unreachable server or refused credentials turned into ApiUnreachable
naming the fix. wait_for_api waits for the server; read_cluster_configuration reads kubeadm's configuration."""
from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from provision.errors import BootstrapError
from provision.inputs.state import state_root

# One API call never waits longer than this; the overall wait is the caller's timeout.
REQUEST_TIMEOUT_S = 10
T = TypeVar("T")


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


class ApiUnreachable(BootstrapError):
    """The API server did not answer (or refused our credentials)."""


def _server(api: client.ApiClient) -> str:
    return str(getattr(api.configuration, "host", "the API server"))


def call_api(api: client.ApiClient, fn: Callable[..., T], *args: object, **kwargs: object) -> T:
    """One API call with a bounded wait; an unreachable server becomes ApiUnreachable naming the fix."""
    try:
        return fn(*args, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
    except ApiException as exc:
        if exc.status in (401, 403):
            raise ApiUnreachable(
                f"{_server(api)} refused our credentials (HTTP {exc.status}): the kubeconfig is from another "
                "cluster or was revoked; fetch it again with `bootstrap up --only control_plane`") from None
        if exc.status and exc.status >= 500:
            raise ApiUnreachable(f"{_server(api)} answered HTTP {exc.status} ({exc.reason}): the API server or "
                                 "etcd is unhealthy; check `crictl ps -a` on the control plane") from None
        raise
    except urllib3.exceptions.HTTPError as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ApiUnreachable(
            f"API server {_server(api)} unreachable ({type(reason).__name__}): is kube-apiserver running on the "
            "control plane (`crictl ps -a | grep kube-apiserver` there), and is port 6443 open from here?") from None


def wait_for_api(api: client.ApiClient, timeout_s: float, *, sleep: Callable[[float], None] = time.sleep) -> str:
    """The server's version (e.g. v1.31.4) once /version answers; ApiUnreachable after timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call_api(api, client.VersionApi(api).get_code).git_version
        except ApiUnreachable:
            if time.monotonic() >= deadline:
                raise
        sleep(min(2.0, max(0.0, deadline - time.monotonic())))


def read_cluster_configuration(api: client.ApiClient) -> str:
    """kubeadm's ClusterConfiguration as the cluster keeps it (the kubeadm-config ConfigMap); "" when absent."""
    try:
        config_map = call_api(api, client.CoreV1Api(api).read_namespaced_config_map, "kubeadm-config", "kube-system")
    except ApiException as exc:
        if exc.status == 404:
            return ""
        raise
    return str((config_map.data or {}).get("ClusterConfiguration", ""))
