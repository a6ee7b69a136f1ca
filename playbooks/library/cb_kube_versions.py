#!/usr/bin/python
"""Report the Kubernetes versions a node runs, as one JSON document returned under `cb_kube_versions`.

What provision/nodes/upgrade.py validates and the upgrade plan is made from: the installed kubeadm, kubelet and
kubectl (each asked for its version, as kubeadm's upgrade docs ask), containerd's version, the images of the
control-plane static pods
in the manifests directory, and, when asked, the kubeadm releases the node's package repositories offer. It
only reads: changed is always false, and check mode reports the same.
"""
from __future__ import annotations

import json
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_kube_versions
short_description: Report a node's Kubernetes versions as one JSON document (cb_kube_versions)
options:
  available:
    description: Also list the kubeadm releases the node's package repositories offer.
    type: bool
    default: false
  manifests_dir:
    description: Where the kubelet finds the control-plane static pods.
    type: path
    default: /etc/kubernetes/manifests
"""

SCHEMA = 1
REPORT_KEY = "cb_kube_versions"
COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
VERSION = r"v?1\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.+-]*)?"
_IMAGE_RE = re.compile(r"^\s*-?\s*image:\s*[\"']?([^\s\"']+)[\"']?\s*$", re.MULTILINE | re.ASCII)


def _run(module: AnsibleModule, argv: list[str], notes: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
    if rc != 0:
        notes.append(f"{' '.join(argv)}: exit {rc}: {(err or out).strip()[-200:]}")
        return None
    return out.strip()


def kubeadm_version(text: str | None) -> str | None:
    """`kubeadm version -o short` prints the release alone."""
    return text if text is not None and re.fullmatch(VERSION, text, re.ASCII) else None


def kubelet_version(text: str | None) -> str | None:
    """`kubelet --version` prints `Kubernetes v1.36.4`."""
    match = re.fullmatch(rf"Kubernetes ({VERSION})", text or "", re.ASCII)
    return match.group(1) if match else None


def kubectl_version(text: str | None) -> str | None:
    """`kubectl version --client -o json`: clientVersion.gitVersion."""
    try:
        found = json.loads(text or "").get("clientVersion", {}).get("gitVersion")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, str) and re.fullmatch(VERSION, found, re.ASCII) else None


def containerd_version(text: str | None) -> str | None:
    """`containerd --version` prints `containerd <module> <version> <commit>` (containerd.io: `containerd
    containerd.io 1.7.28 <commit>`; 2.x: `... github.com/containerd/containerd/v2 v2.1.5 ...`; Debian's:
    `... 1.6.20~ds1 ...`): the first word after the module that starts with a release."""
    for word in (text or "").split()[2:3]:
        match = re.match(r"v?([0-9]+\.[0-9]+\.[0-9]+)", word, re.ASCII)
        if match:
            return match.group(1)
    return None


def static_pod_version(text: str, component: str) -> str | None:
    """The tag of the component's image in its static pod manifest (registry/kube-apiserver:v1.36.4)."""
    for image in _IMAGE_RE.findall(text):
        name, _, tag = image.rsplit("/", 1)[-1].partition(":")
        if name == component and re.fullmatch(VERSION, tag, re.ASCII):
            return tag
    return None


def apt_versions(text: str) -> list[str]:
    """`apt-cache madison kubeadm` lines (`kubeadm | 1.36.4-1.1 | <source> Packages`) -> the upstream versions."""
    found = []
    for line in text.splitlines():
        columns = [column.strip() for column in line.split("|")]
        if len(columns) >= 2:
            upstream = columns[1].split(":")[-1].split("-")[0]
            if re.fullmatch(r"1\.[0-9]+\.[0-9]+", upstream, re.ASCII):
                found.append(upstream)
    return found


def dnf_versions(text: str) -> list[str]:
    """`dnf repoquery --qf '%{version}'` lines -> the versions."""
    return [line.strip() for line in text.splitlines() if re.fullmatch(r"1\.[0-9]+\.[0-9]+", line.strip(), re.ASCII)]


def _sorted(found: list[str]) -> list[str]:
    return sorted(set(found), key=lambda text: tuple(int(part) for part in text.split(".")), reverse=True)


def main() -> None:
    module = AnsibleModule(argument_spec={"available": {"type": "bool", "default": False},
                                          "manifests_dir": {"type": "path", "default": "/etc/kubernetes/manifests"}},
                           supports_check_mode=True)
    notes: list[str] = []
    static_pods: dict[str, str | None] = {}
    for component in COMPONENTS:
        path = os.path.join(module.params["manifests_dir"], f"{component}.yaml")
        if os.path.exists(path):
            with open(path, encoding="utf-8", errors="replace") as handle:
                static_pods[component] = static_pod_version(handle.read(), component)
    available = None
    if module.params["available"]:
        if shutil.which("apt-cache"):
            available = _sorted(apt_versions(_run(module, ["apt-cache", "madison", "kubeadm"], notes) or ""))
        elif shutil.which("dnf"):
            listed = _run(module, ["dnf", "-q", "repoquery", "--disableplugin=versionlock", "--qf", "%{version}\n",
                                   "kubeadm"], notes)
            available = _sorted(dnf_versions(listed or ""))
    document = {
        "schema": SCHEMA,
        "kubeadm": kubeadm_version(_run(module, ["kubeadm", "version", "-o", "short"], notes)),
        "kubelet": kubelet_version(_run(module, ["kubelet", "--version"], notes)),
        "kubectl": kubectl_version(_run(module, ["kubectl", "version", "--client", "-o", "json"], notes)),
        "containerd": containerd_version(_run(module, ["containerd", "--version"], notes)),
        "static_pods": static_pods,
        "available": available,
        "notes": notes,
    }
    module.exit_json(changed=False, **{REPORT_KEY: document})


if __name__ == "__main__":
    main()
