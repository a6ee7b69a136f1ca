"""The control_plane, join, network and gpu plays on real lab nodes over SSH.

kubeadm and kubectl cannot be had here, so each node gets stand-in scripts that record every call and act out
what the plays rely on (init writes admin.conf, join writes kubelet.conf, `token create` prints a join
command). Everything around them is real: the plays, SSH, become, the guards, the run's logs and artifacts,
which must never contain the join token.
"""
from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings, load_settings, parse_settings
from provision.inputs.state import ClusterState
from provision.inputs.versions import DEVICE_PLUGIN_DEFAULT, KUBERNETES_DEFAULT, kubernetes_release
from provision.kube.kubeconfig import fetched_kubeconfig_path, install_admin_kubeconfig
from provision.nodes.runner import PlaybookResult, run_playbook
from provision.phases import PHASES, PhaseContext, run_phases
from provision.render.kubeadm_config import render_init_config
from tests.lab.lab import Lab
from tests.support.node_reports import installed_release

ALPHABET = string.ascii_lowercase + string.digits
TOKEN = "".join(secrets.choice(ALPHABET) for _ in range(6)) + "." + "".join(secrets.choice(ALPHABET) for _ in range(16))
CA_HASH = "sha256:" + secrets.token_hex(32)
# Any bootstrap-token-shaped string at all (kubeadm's token format), not only ours.
TOKEN_PATTERN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")
CALICO = kubernetes_release(int(KUBERNETES_DEFAULT.split(".")[1])).calico

FAKE_KUBEADM = """#!/bin/sh
# Stand-in for kubeadm: records each call, acts out what the plays rely on. Like kubeadm 1.36 and later, it
# reads kubeadm.k8s.io/v1beta4 only.
echo "$*" >> /root/kubeadm-calls
case "$1" in config|init)
  if grep -q '^apiVersion: kubeadm.k8s.io/' /etc/kubernetes/kubeadm-config.yaml &&
     grep '^apiVersion: kubeadm.k8s.io/' /etc/kubernetes/kubeadm-config.yaml | grep -qv 'kubeadm.k8s.io/v1beta4$'; then
    echo "this version of kubeadm only supports kubeadm.k8s.io/v1beta4" >&2; exit 1
  fi ;;
esac
case "$1" in
  config) echo "[config/images] Pulled registry.k8s.io/kube-apiserver:v1.36.0" ;;
  init)
    echo "kubeadm join CP_IP:6443 --token TOKEN --discovery-token-ca-cert-hash CA_HASH"
    if [ -e /root/init-fails ]; then
      echo "error execution phase wait-control-plane: timed out waiting for the condition (token TOKEN)" >&2
      echo "error execution phase wait-control-plane: timed out waiting for the condition" >&2
      exit 1
    fi
    # A kubeadm that claims success without doing anything (a placeholder package, say).
    [ -e /root/init-silent ] && exit 0
    mkdir -p /etc/kubernetes
    cat > /etc/kubernetes/admin.conf <<EOF
apiVersion: v1
kind: Config
clusters: [{name: kubernetes, cluster: {server: "https://CP_IP:6443", certificate-authority-data: Q0E=}}]
users: [{name: kubernetes-admin, user: {client-certificate-data: Q0VSVA==, client-key-data: S0VZ}}]
contexts: [{name: kubernetes-admin@kubernetes, context: {cluster: kubernetes, user: kubernetes-admin}}]
current-context: kubernetes-admin@kubernetes
EOF
    ;;
  token) echo "kubeadm join CP_IP:6443 --token TOKEN --discovery-token-ca-cert-hash CA_HASH " ;;
  join)
    if [ -e /root/join-fails ]; then
      echo "[preflight] Running pre-flight checks"
      echo "error execution phase preflight: couldn't validate the identity of the API Server: token id \\"${3%%.*}\\" is invalid for this cluster or it has expired" >&2
      echo "error execution phase preflight: unable to reach CP_IP:6443: connection refused" >&2
      exit 1
    fi
    mkdir -p /etc/kubernetes && echo 'kind: Config' > /etc/kubernetes/kubelet.conf ;;
  reset) rm -rf /etc/kubernetes/*.conf /etc/kubernetes/manifests ;;
esac
"""

FAKE_KUBECTL = """#!/bin/sh
# Stand-in for kubectl: records each call; the first apply of a directory creates, later ones change nothing.
echo "$*" >> /root/kubectl-calls
case "$3" in
  apply)
    marker="/root/applied-$(echo "$*" | md5sum | cut -c1-8)"
    if [ -e "$marker" ]; then echo "daemonset.apps/x unchanged"; else touch "$marker"; echo "daemonset.apps/x created"; fi ;;
  label)
    if grep -qx "$5 $6" /root/labels 2>/dev/null; then echo "node/$5 not labeled"; else echo "$5 $6" >> /root/labels; echo "node/$5 labeled"; fi ;;
esac
"""


def install_fakes(lab: Lab, names: list[str]) -> None:
    cp_ip = lab.inventory_nodes[0].ip
    kubeadm = FAKE_KUBEADM.replace("CP_IP", cp_ip).replace("TOKEN", TOKEN).replace("CA_HASH", CA_HASH)
    for name in names:
        lab.node(name).ssh(f"cat > /usr/local/bin/kubeadm <<'CBFAKE'\n{kubeadm}CBFAKE\n"
                           f"cat > /usr/local/bin/kubectl <<'CBFAKE'\n{FAKE_KUBECTL}CBFAKE\n"
                           "chmod 755 /usr/local/bin/kubeadm /usr/local/bin/kubectl")


def calls(lab: Lab, name: str, tool: str = "kubeadm") -> list[str]:
    return lab.node(name).ssh(f"cat /root/{tool}-calls 2>/dev/null || true").stdout.splitlines()


def leaked(run_dir: Path) -> list[str]:
    """Files of a run (logs, ansible-runner's artifacts and events) that contain the token or anything like it."""
    found = []
    for path in run_dir.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="ignore")
            if TOKEN in text or TOKEN.split(".")[1] in text or CA_HASH in text or TOKEN_PATTERN.search(text):
                found.append(str(path.relative_to(run_dir)))
    return found


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    lab = lab_factory(3)
    install_fakes(lab, ["n1", "n2", "n3"])
    return lab


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def context(lab: Lab, settings: Settings | None = None) -> PhaseContext:
    cluster = load_inventory(lab.inventory_path)
    settings = settings or load_settings(lab.config_path)
    state = ClusterState.load(cluster)
    state.kubernetes_version = installed_release(settings)
    return PhaseContext(cluster=cluster, settings=settings, state=state)


def play(phase: str, ctx: PhaseContext, limit: list[str] | None = None) -> PlaybookResult:
    """The phase's playbook with exactly the variables the phase passes (its API check needs a real cluster)."""
    definition = PHASES[phase]
    assert definition.playbook and definition.extra_vars
    return run_playbook(definition.playbook, ctx.cluster, ctx.settings, phase=phase, limit=limit,
                        extra_vars=definition.extra_vars(ctx))


def with_settings(lab: Lab, **sections: dict[str, Any]) -> Settings:
    data = yaml.safe_load(lab.config_path.read_text()) or {}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return parse_settings(data)


# --- control plane ------------------------------------------------------------------------------------------

def test_a_failed_init_is_rolled_back_and_reported_without_the_token(lab: Lab) -> None:
    n1 = lab.node("n1")
    n1.ssh("touch /root/init-fails")
    try:
        result = play("control_plane", context(lab))
    finally:
        n1.ssh("rm -f /root/init-fails")
    assert not result.ok
    # One failure, the one that explains (not a hidden no_log result).
    (failure,) = result.failures
    assert failure.host == "n1" and "kubeadm init failed on n1 and was rolled back" in failure.message
    assert "timed out waiting for the condition" in failure.message
    assert TOKEN not in failure.message and "token" not in failure.message.lower().replace("kubeadm", "")
    assert calls(lab, "n1")[-2:] == ["init --config /etc/kubernetes/kubeadm-config.yaml --skip-token-print --upload-certs "
                                     "--skip-certificate-key-print",
                                     "reset --force"]
    assert leaked(result.run_dir) == []
    n1.ssh("rm -f /root/kubeadm-calls")


def test_an_init_that_leaves_no_admin_kubeconfig_is_named(lab: Lab) -> None:
    n1 = lab.node("n1")
    n1.ssh("touch /root/init-silent")
    try:
        result = play("control_plane", context(lab))
    finally:
        n1.ssh("rm -f /root/init-silent /root/kubeadm-calls")
    (failure,) = result.failures
    assert failure.host == "n1"
    assert "kubeadm init ended on n1 but /etc/kubernetes/admin.conf is missing" in failure.message
    assert "kubeadm version" in failure.message


def test_control_plane_pulls_images_then_inits_once_and_fetches_a_private_kubeconfig(lab: Lab) -> None:
    ctx = context(lab)
    kubeadm_release = ctx.state.kubernetes_version
    assert kubeadm_release is not None
    first = play("control_plane", ctx)
    assert first.ok, first.failures
    assert calls(lab, "n1") == ["config images pull --config /etc/kubernetes/kubeadm-config.yaml",
                                "init --config /etc/kubernetes/kubeadm-config.yaml --skip-token-print --upload-certs "
                                     "--skip-certificate-key-print"]
    # Only the control plane runs kubeadm; the other nodes only had their networks checked.
    assert calls(lab, "n2") == [] and calls(lab, "n3") == []
    n1 = lab.node("n1")
    assert n1.ssh("stat -c %a /etc/kubernetes/kubeadm-config.yaml /root/.kube/config").stdout.split() == ["600", "600"]
    written = n1.ssh("cat /etc/kubernetes/kubeadm-config.yaml").stdout
    assert written == render_init_config(ctx.cluster, ctx.settings, kubeadm_release)
    assert f"kubernetesVersion: v{kubeadm_release}\n" in written
    assert re.findall(r"^apiVersion: (kubeadm\.k8s\.io/\S+)$", written, re.M) == ["kubeadm.k8s.io/v1beta4"] * 2
    # The lab's nodes are cgroup v1 (this host's kernel) and its settings accept that: both halves of the opt-out.
    assert "failCgroupV1: false" in written and "- SystemVerification" in written
    assert leaked(first.run_dir) == []

    installed = install_admin_kubeconfig(fetched_kubeconfig_path(ctx.cluster), ctx.cluster, ctx.settings)
    assert oct(installed.stat().st_mode & 0o777) == "0o600"
    assert yaml.safe_load(installed.read_text())["clusters"][0]["cluster"]["server"] == f"https://{n1.ip}:6443"

    again = play("control_plane", ctx)
    assert again.ok and again.changed == {"n1": 0, "n2": 0, "n3": 0}
    assert len(calls(lab, "n1")) == 2  # no second pull, no second init


def test_a_pod_cidr_overlapping_a_node_network_is_refused_before_init(lab: Lab) -> None:
    # n2 has a second network, 172.31.5.0/24, which the inventory does not show.
    n2 = lab.node("n2")
    n2.ssh("ip link add cbextra type bridge && ip addr add 172.31.5.1/24 dev cbextra && ip link set cbextra up")
    before = calls(lab, "n1")
    try:
        ctx = context(lab, with_settings(lab, kubernetes={"pod_cidr": "172.31.0.0/16"}))
        result = run_phases([PHASES["control_plane"]], ctx)
    finally:
        n2.ssh("ip link delete cbextra")
    assert result.error is not None
    message = str(result.error)
    assert "n2: interface cbextra has 172.31.5.1/24, which overlaps kubernetes.pod_cidr 172.31.0.0/16" in message
    assert "set kubernetes.pod_cidr in cluster.yaml to a range none of your nodes use" in message
    assert calls(lab, "n1") == before


# --- join ---------------------------------------------------------------------------------------------------

def test_workers_join_with_a_fresh_token_that_appears_in_no_log(lab: Lab) -> None:
    ctx = context(lab)
    first = play("join", ctx)
    assert first.ok, first.failures
    cp_ip = lab.node("n1").ip
    minted = [c for c in calls(lab, "n1") if c.startswith("token create")]
    assert minted == ["token create --print-join-command --ttl 15m --description cluster-bootstrap: joins of one run"]
    for name in ("n2", "n3"):
        node = lab.node(name)
        assert calls(lab, name) == [f"join {cp_ip}:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} "
                                    f"--node-name {name} --cri-socket unix:///run/containerd/containerd.sock "
                                    "--ignore-preflight-errors SystemVerification"]
        assert node.ssh("cat /etc/default/kubelet").stdout == (
            f"# BEGIN cluster-bootstrap node-ip\nKUBELET_EXTRA_ARGS=--node-ip={node.ip}\n"
            "# END cluster-bootstrap node-ip\n")
    assert leaked(first.run_dir) == []

    # Joined workers are skipped, and no token is minted for nobody.
    again = play("join", ctx)
    assert again.ok and again.changed == {"n1": 0, "n2": 0, "n3": 0}
    assert len([c for c in calls(lab, "n1") if c.startswith("token create")]) == 1
    assert [len(calls(lab, n)) for n in ("n2", "n3")] == [1, 1]


def test_a_worker_added_later_joins_and_a_failed_join_rerun_finishes(lab: Lab) -> None:
    n4 = lab.add_node("n4")
    install_fakes(lab, ["n4"])
    lab.write_inventory(["n1", "n2", "n3", "n4"])
    n4.ssh("touch /root/join-fails")
    ctx = context(lab)
    failed = play("join", ctx, limit=["n1", "n4"])
    assert not failed.ok
    (failure,) = failed.failures
    assert failure.host == "n4" and "kubeadm join failed on n4 and was rolled back" in failure.message
    assert "connection refused" in failure.message and TOKEN.split(".")[0] not in failure.message
    assert calls(lab, "n4")[-1] == "reset --force"
    assert leaked(failed.run_dir) == []

    n4.ssh("rm /root/join-fails")
    rerun = play("join", ctx, limit=["n1", "n4"])
    assert rerun.ok, rerun.failures
    assert set(rerun.tally) == {"n1", "n4"}
    assert n4.ssh("test -e /etc/kubernetes/kubelet.conf && echo joined").stdout.strip() == "joined"
    # The workers that had joined before were not part of this run.
    assert [len(calls(lab, n)) for n in ("n2", "n3")] == [1, 1]
    assert leaked(rerun.run_dir) == []


# --- network and GPU add-ons ----------------------------------------------------------------------------------

def test_calico_from_an_offline_source_is_customised_and_applied_once(lab: Lab) -> None:
    n1 = lab.node("n1")
    n1.ssh(f"mkdir -p /srv/offline/calico/{CALICO}/manifests && "
           f"echo 'kind: List' > /srv/offline/calico/{CALICO}/manifests/calico.yaml")
    ctx = context(lab, with_settings(lab, offline={"source": "/srv/offline", "image_repository": "registry.lab:5000"},
                                     kubernetes={"pod_cidr": "10.50.0.0/16"}))
    first = play("network", ctx)
    assert first.ok, first.failures
    listing = n1.ssh("ls /etc/kubernetes/addons/calico").stdout.split()
    assert listing == ["calico-node-patch.yaml", f"calico-{CALICO}.yaml", "kustomization.yaml"]
    assert "value: \"10.50.0.0/16\"" in n1.ssh("cat /etc/kubernetes/addons/calico/calico-node-patch.yaml").stdout
    assert "newName: registry.lab:5000/calico/node" in n1.ssh("cat /etc/kubernetes/addons/calico/kustomization.yaml").stdout
    assert calls(lab, "n1", "kubectl") == ["--kubeconfig /etc/kubernetes/admin.conf apply -k /etc/kubernetes/addons/calico"]
    again = play("network", ctx)
    assert again.ok and sum(again.changed.values()) == 0


def test_calico_download_failure_names_the_url_and_the_setting(lab: Lab) -> None:
    cluster: Cluster = load_inventory(lab.inventory_path)
    # A release other than the default, so that the copy the test above left on n1 is not it.
    ctx = PhaseContext(cluster=cluster, settings=with_settings(lab, calico={"version": "v3.32.1"}),
                       state=ClusterState.load(cluster))
    result = play("network", ctx)
    assert not result.ok
    message = result.failures[-1].message
    assert "cannot download Calico's manifest from https://raw.githubusercontent.com/projectcalico/calico/v3.32.1" in message
    assert "mirrors.calico_manifest" in message and "offline.source" in message
    assert result.elapsed_s < 120


def test_gpu_nodes_are_labelled_and_the_device_plugin_applied(lab: Lab) -> None:
    ctx = context(lab)
    ctx.state.gpus = {"n1": 0, "n2": 2, "n3": 1}
    first = play("gpu", ctx)
    assert first.ok, first.failures
    kubectl = calls(lab, "n1", "kubectl")
    labels = [c for c in kubectl if " label " in c]
    assert labels == [f"--kubeconfig /etc/kubernetes/admin.conf label node {n} nvidia.com/gpu.present=true --overwrite"
                      for n in ("n2", "n3")]
    assert kubectl[-1] == "--kubeconfig /etc/kubernetes/admin.conf apply -f /etc/kubernetes/addons/nvidia"
    plugin = lab.node("n1").ssh("cat /etc/kubernetes/addons/nvidia/20-nvidia-device-plugin.yaml").stdout
    assert f'image: "nvcr.io/nvidia/k8s-device-plugin:{DEVICE_PLUGIN_DEFAULT}"' in plugin
    assert lab.node("n1").ssh("ls /etc/kubernetes/addons/nvidia").stdout.split() == [
        "10-runtimeclass-nvidia.yaml", "20-nvidia-device-plugin.yaml"]
    again = play("gpu", ctx)
    assert again.ok and sum(again.changed.values()) == 0
