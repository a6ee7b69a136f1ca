"""The Kubernetes API as a pipeline step reaches it from inside its pod: the service account's token and CA, the
API server's in-cluster address, JSON over HTTPS. Standard library only (the steps run the smoke image)."""
from __future__ import annotations

import json
import os
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class Api:
    """Where the API server is and how to authenticate: in a pod, `in_cluster()`."""

    base: str
    token: str | None = None
    context: ssl.SSLContext | None = None

    def call(self, method: str, path: str, body: object | None = None, *, timeout_s: float = 30) -> dict:
        """One request; its JSON answer (an HTTP error raises urllib.error.HTTPError)."""
        return call(method, f"{self.base}{path}", body, token=self.token, context=self.context, timeout_s=timeout_s)


def in_cluster() -> Api:
    """The API server of the pod's cluster, as the pod's service account (KUBERNETES_SERVICE_HOST/PORT, which the
    kubelet sets in every container)."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return Api(f"https://{host}:{port}", (ACCOUNT / "token").read_text().strip(),
               ssl.create_default_context(cafile=str(ACCOUNT / "ca.crt")))


def call(method: str, url: str, body: object | None = None, *, token: str | None = None,
         context: ssl.SSLContext | None = None, timeout_s: float = 30) -> dict:
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
        return json.loads(response.read() or b"{}")
