"""The files prepare writes on every node, rendered here once (`cb_prepare`, in every playbook's variables): the
roles write them, and name them in what they want of the node (each role's `<role>_want`), which the node_state
role's module compares with what it reads. From the tables of render/node_tables.py and the settings."""
from __future__ import annotations

import json
from typing import Any

from provision.inputs import versions
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.sources import resolve_sources
from provision.render.kubeadm_config import CRI_SOCKET
from provision.render.node_tables import HOSTS_MARKER, KERNEL_MODULES, SYSCTLS

CONTAINERD_CERTS_DIR = "/etc/containerd/certs.d"
# containerd 2.x reads drop-ins from here (the imports line of the configuration we write); nvidia-ctk puts the nvidia
# runtime into 99-nvidia.toml there, at the root configuration's version.
CONTAINERD_DROP_IN_DIR = "/etc/containerd/conf.d"


def sandbox_image(settings: Settings) -> str:
    """The pause image kubeadm of the chosen minor uses, from the image repository: containerd pins the same one,
    so it is pulled once."""
    pause = versions.kubernetes_release(settings.kubernetes.minor_number).pause
    return f"{resolve_sources(settings).image_repository}/pause:{pause}"


def _toml(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's)."""
    return json.dumps(text)


def containerd_config(settings: Settings, major: int) -> str:
    """The configuration cluster-bootstrap wants containerd of this major version to run (1.x reads version 2, 2.x
    version 3: the CRI plugin was split and renamed). Keys left out keep containerd's defaults."""
    head = ("# cluster-bootstrap: containerd for Kubernetes.\n"
            f"# Copied to config.toml. The NVIDIA runtime (GPU nodes, gpu.runtime: {settings.gpu.runtime}) comes from "
            f"nvidia-ctk:\n# in a drop-in under {CONTAINERD_DROP_IN_DIR} at this file's version (containerd 2), or "
            "added here (1.x).\n")
    sandbox, certs = _toml(sandbox_image(settings)), _toml(CONTAINERD_CERTS_DIR)
    if major >= 2:
        return head + f"""# containerd 2.0-2.2 read version 3 and 2.3 migrates it; the CRI plugin lives in io.containerd.cri.v1.*.
version = 3
# Written here, not left to containerd's default: a drop-in may never carry a higher version than this file.
imports = [{_toml(CONTAINERD_DROP_IN_DIR + "/*.toml")}]

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = {sandbox}
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = {certs}

[plugins.'io.containerd.cri.v1.runtime'.containerd]
  default_runtime_name = "runc"
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = true
"""
    return head + f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {sandbox}
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = {certs}
"""


def hosts_block(cluster: Cluster) -> str | None:
    """prepare's block of /etc/hosts: every node by the address the nodes talk on, under its node name; None when a
    node is given by DNS name alone (its address then comes from its own facts, on the node)."""
    if any(node.cluster_address is None for node in cluster.nodes):
        return None
    return "".join(f"{node.cluster_address} {node.name}\n" for node in cluster.nodes)


def prepare_want(cluster: Cluster, settings: Settings) -> dict[str, Any]:
    """cb_prepare: every file prepare writes whose content Python decides, by what it is."""
    mirrors = resolve_sources(settings).registry_mirrors.get("docker.io", [])
    # Docker shares the host's cgroup driver with the kubelet (systemd) and pulls docker.io through its mirrors.
    docker_daemon = {"exec-opts": ["native.cgroupdriver=systemd"], "log-driver": "json-file",
                     "log-opts": {"max-size": "100m"}, "registry-mirrors": list(mirrors)}
    return {
        "hosts_block": hosts_block(cluster),
        "hosts_marker": HOSTS_MARKER,
        "modules_load": "# Kubernetes networking (cluster-bootstrap)\n" + "".join(f"{m}\n" for m in KERNEL_MODULES),
        "sysctls": dict(SYSCTLS),
        # Every apt download (package lists, packages) tries a transient failure again (downloads.attempts in all).
        "apt_retries": ("// cluster-bootstrap (setting downloads.attempts): transient download failures are tried "
                        f"again.\nAcquire::Retries \"{settings.downloads.attempts - 1}\";\n"),
        "zram_conf": "# Empty: no zram swap on a Kubernetes node (cluster-bootstrap).\n",
        "chrony_dropin": ("# cluster-bootstrap: chronyd runs with -x in containers (it tracks the host's clock, never "
                          "sets it).\n[Unit]\nConditionVirtualization=\n"),
        "crictl": f"runtime-endpoint: {CRI_SOCKET}\nimage-endpoint: {CRI_SOCKET}\ntimeout: 10\n",
        # As Ansible's to_nice_json writes it (the file earlier releases wrote compares equal).
        "docker_daemon_json": json.dumps(docker_daemon, indent=4, sort_keys=True, separators=(",", ": ")) + "\n",
        # containerd's configuration for either major version: the node read says which one runs.
        "containerd_config": {"1": containerd_config(settings, 1), "2": containerd_config(settings, 2)},
        "containerd_certs_dir": CONTAINERD_CERTS_DIR,
        "containerd_drop_in_dir": CONTAINERD_DROP_IN_DIR,
    }
