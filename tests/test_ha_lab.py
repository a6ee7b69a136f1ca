"""Three control planes on real lab nodes over SSH, written as kubespray writes them, with a kube-vip VIP.

kubeadm and kubectl are stand-ins (tests/support/kube_stand_ins.py) that record every call and act out what the
plays rely on; everything else is real: preflight's look at the VIP from each control plane, the plays, SSH,
become, serial joins, the guards, the run's logs and artifacts (which must contain no token, CA hash or
certificate key), the etcd phase and the reset. What only a real kubeadm shows (etcd's quorum, kube-vip moving
the VIP, the local proxy carrying traffic) is not tested here.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.state import ClusterState
from provision.nodes.preflight.run import run_preflight
from provision.nodes.runner import PlaybookResult, run_playbook
from provision.phases import PHASES, RESET_PHASES, PhaseContext, run_phases
from tests.lab.lab import Lab
from tests.support.kube_stand_ins import CA_HASH, CERTIFICATE_KEY, TOKEN, install_command, leaked
from tests.support.node_reports import installed_release

CONTROL_PLANES = ("n1", "n2", "n3")
DIR_AVAILABLE = "--ignore-preflight-errors=DirAvailable--etc-kubernetes-manifests"


def write_kubespray_inventory(lab: Lab, workers: tuple[str, ...] = ("n4",)) -> Path:
    """The shape of kubespray's sample: [kube_control_plane], [etcd:children], [kube_node], [k8s_cluster:children],
    and `ip` beside ansible_host."""
    lines = ["[kube_control_plane]"]
    lines += [f"{n} ansible_host={lab.node(n).ip} ip={lab.node(n).ip}" for n in CONTROL_PLANES]
    lines += ["", "[etcd:children]", "kube_control_plane", "", "[kube_node]"]
    lines += [f"{n} ansible_host={lab.node(n).ip} ip={lab.node(n).ip}" for n in workers]
    lines += ["", "[calico_rr]", "", "[k8s_cluster:children]", "kube_control_plane", "kube_node", "calico_rr", "",
              "[all:vars]", "ansible_user=tester", "ansible_become=true",
              f"ansible_ssh_private_key_file={lab.key_path}", f"ansible_python_interpreter={lab.flavour.python}", ""]
    lab.inventory_path.write_text("\n".join(lines))
    return lab.inventory_path


def settings_with(lab: Lab, **sections: dict[str, Any]) -> Settings:
    data = yaml.safe_load(lab.config_path.read_text()) or {}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return parse_settings(data)


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    lab = lab_factory(4)
    write_kubespray_inventory(lab)
    return lab


@pytest.fixture(scope="module")
def vip(lab: Lab) -> str:
    return lab.unused_ip()


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def install_stand_ins(lab: Lab, endpoint: str, names: tuple[str, ...]) -> None:
    for name in names:
        lab.node(name).ssh("rm -f /root/kubeadm-calls /root/kubectl-calls /root/order /root/etcd-members "
                           "/root/kube-vip-during-init.yaml /root/patched-*; " + install_command(endpoint))


def calls(lab: Lab, name: str, tool: str = "kubeadm") -> list[str]:
    return lab.node(name).ssh(f"cat /root/{tool}-calls 2>/dev/null || true").stdout.splitlines()


def order(lab: Lab, names: tuple[str, ...]) -> list[str]:
    """Every stand-in call on these nodes, by time: 'node tool arguments' (secrets masked)."""
    lines = [line for name in names for line in lab.node(name).ssh("cat /root/order 2>/dev/null || true")
             .stdout.splitlines()]
    return [line.split(" ", 1)[1] for line in sorted(lines, key=lambda line: float(line.split(" ", 1)[0]))]


def context(lab: Lab, settings: Settings, **kwargs: Any) -> PhaseContext:
    cluster = load_inventory(lab.inventory_path)
    state = ClusterState.load(cluster)
    state.kubernetes_version = installed_release(settings)  # prepare's decision (the kubeadm here is a fake)
    return PhaseContext(cluster=cluster, settings=settings, state=state, **kwargs)


def play(phase: str, ctx: PhaseContext) -> PlaybookResult:
    """The phase's playbook with exactly the variables the phase passes (its API check needs a real cluster)."""
    definition = PHASES[phase]
    assert definition.playbook and definition.extra_vars
    return run_playbook(definition.playbook, ctx.cluster, ctx.settings, phase=phase,
                        extra_vars=definition.extra_vars(ctx))


def manifest(lab: Lab, name: str, path: str) -> dict[str, Any]:
    return yaml.safe_load(lab.node(name).ssh(f"cat {path}").stdout)


def _kubeconfig_of(pod: dict[str, Any]) -> str:
    return str(pod["spec"]["volumes"][0]["hostPath"]["path"])


def test_preflight_finds_the_vip_free_on_every_control_planes_own_network(lab: Lab, vip: str) -> None:
    cluster: Cluster = load_inventory(lab.inventory_path)
    settings = settings_with(lab, control_plane={"vip": vip})
    report = run_preflight(cluster, settings)
    checks = {n.name: n.finding("vip") for n in report.nodes}
    assert {name: (c.status, c.detail) if c else None for name, c in checks.items()} == {
        **dict.fromkeys(CONTROL_PLANES, ("ok", f"{vip} free, on eth0")), "n4": None}
    assert report.vip_interfaces == dict.fromkeys(CONTROL_PLANES, "eth0")

    # Another machine answering for the address is refused on every control plane, naming its MAC.
    lab.node("n4").ssh(f"ip address add {vip}/32 dev eth0")
    try:
        taken = run_preflight(cluster, settings, nodes=["n1"])
    finally:
        lab.node("n4").ssh(f"ip address del {vip}/32 dev eth0")
    (problem,) = [p for p in taken.blocking if p.check == "vip"]
    assert problem.subject == "n1" and f"{vip} is taken: " in problem.detail and "answers for it on eth0" in \
        problem.detail
    # An address the control planes reach only through a router is refused too.
    routed = run_preflight(cluster, settings_with(lab, control_plane={"vip": "192.0.2.10"}), nodes=["n2"])
    (problem,) = [p for p in routed.blocking if p.check == "vip"]
    assert problem.fix.startswith("pick control_plane.vip from the control planes' own subnet")


def test_three_control_planes_init_then_join_one_at_a_time_and_workers_join_through_the_vip(
        lab: Lab, vip: str) -> None:
    install_stand_ins(lab, f"{vip}:6443", ("n1", "n2", "n3", "n4"))
    ctx = context(lab, settings_with(lab, control_plane={"vip": vip}))
    ctx.state.vip_interfaces = dict.fromkeys(CONTROL_PLANES, "eth0")
    # The lab's cgroup v1 nodes run with kubelet.allow_cgroup_v1: every join skips that one kubeadm check too.
    skipped = " --ignore-preflight-errors SystemVerification" if ctx.settings.kubelet.allow_cgroup_v1 else ""

    init = play("control_plane", ctx)
    assert init.ok, init.failures
    assert calls(lab, "n1") == [
        "config images pull --config /etc/kubernetes/kubeadm-config.yaml",
        "init --config /etc/kubernetes/kubeadm-config.yaml --skip-token-print --upload-certs --skip-certificate-key-print"]
    assert [calls(lab, n) for n in ("n2", "n3", "n4")] == [[], [], []]
    # kube-vip held the VIP for kubeadm init with super-admin.conf, then went over to admin.conf.
    during_init = yaml.safe_load(lab.node("n1").ssh("cat /root/kube-vip-during-init.yaml").stdout)
    assert _kubeconfig_of(during_init) == "/etc/kubernetes/super-admin.conf"
    steady = manifest(lab, "n1", "/etc/kubernetes/manifests/kube-vip.yaml")
    assert _kubeconfig_of(steady) == "/etc/kubernetes/admin.conf"
    env = {e["name"]: e.get("value") for e in steady["spec"]["containers"][0]["env"]}
    assert (env["address"], env["vip_interface"]) == (vip, "eth0")
    config = list(yaml.safe_load_all(lab.node("n1").ssh("cat /etc/kubernetes/kubeadm-config.yaml").stdout))
    assert config[1]["controlPlaneEndpoint"] == f"{vip}:6443" and vip in config[1]["apiServer"]["certSANs"]

    join = play("join", ctx)
    assert join.ok, join.failures
    # The first control plane minted one token and one certificate key, and uploaded the certificates with it.
    assert calls(lab, "n1")[2:] == [
        "token create --print-join-command --ttl 15m --description cluster-bootstrap: joins of one run",
        "certs certificate-key",
        f"init phase upload-certs --upload-certs --skip-certificate-key-print --certificate-key {CERTIFICATE_KEY}"]
    for name in ("n2", "n3"):
        ip = lab.node(name).ip
        assert calls(lab, name) == [
            f"join {vip}:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} --node-name {name} "
            f"--cri-socket unix:///run/containerd/containerd.sock --control-plane --certificate-key {CERTIFICATE_KEY} "
            f"--apiserver-advertise-address {ip} {DIR_AVAILABLE}{skipped}"]
        # kube-vip was laid down before the join, with admin.conf.
        assert _kubeconfig_of(manifest(lab, name, "/etc/kubernetes/manifests/kube-vip.yaml")) == \
            "/etc/kubernetes/admin.conf"
    # The worker joins through the VIP, as a worker.
    assert calls(lab, "n4") == [
        f"join {vip}:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} --node-name n4 "
        f"--cri-socket unix:///run/containerd/containerd.sock{skipped}"]
    assert lab.node("n4").ssh("test -e /etc/kubernetes/manifests/kube-vip.yaml || echo none").stdout.strip() == "none"

    # One at a time, in inventory order: n2 joined and etcd was found healthy with it before n3 began; the worker
    # joined after the control planes.
    events = [e for e in order(lab, ("n1", "n2", "n3", "n4"))
              if " join " in e or "member list" in e or "endpoint health" in e]
    steps = [(e.split()[0], "join" if " kubeadm join " in e else "members" if "member list" in e else "health")
             for e in events]
    assert steps == [("n2", "join"), ("n2", "members"), ("n2", "health"), ("n3", "join"), ("n3", "members"),
                     ("n3", "health"), ("n4", "join")]

    for result in (init, join):
        assert leaked(result.run_dir) == []

    # A second run changes nothing and calls kubeadm for nothing.
    before = {n: len(calls(lab, n)) for n in ("n1", "n2", "n3", "n4")}
    again_init, again_join = play("control_plane", ctx), play("join", ctx)
    for again in (again_init, again_join):
        assert again.ok, again.failures
        assert again.changed == {"n1": 0, "n2": 0, "n3": 0, "n4": 0}
        assert leaked(again.run_dir) == []
    assert {n: len(calls(lab, n)) for n in ("n1", "n2", "n3", "n4")} == before


def test_a_control_plane_removed_leaves_etcd_before_its_machine_is_reset_and_takes_the_vip_with_it(
        lab: Lab, vip: str) -> None:
    settings = settings_with(lab, control_plane={"vip": vip})
    members = lab.node("n1").ssh("cat /root/etcd-members").stdout.split()
    assert members[1::2] == ["n1"]  # the stand-in keeps each node's own view; etcd's whole one is set here
    lab.node("n1").ssh("printf '101 n1\\n202 n2\\n303 n3\\n' > /root/etcd-members")
    # kube-vip on n3 held the VIP when it was stopped.
    lab.node("n3").ssh(f"ip address add {vip}/32 dev eth0")

    ctx = context(lab, settings, nodes=("n3",))
    result = run_phases([PHASES[name] for name in RESET_PHASES], ctx)
    assert result.ok, result.error
    assert [(o.name, o.status) for o in result.outcomes] == [("drain", "ok"), ("etcd", "ok"), ("reset", "ok")]
    assert result.outcomes[1].detail == "etcd members of n3 removed (on n1)"
    # The member went first, on a control plane that stays; then n3 was reset.
    steps = [e for e in order(lab, ("n1", "n3")) if "member remove" in e or "kubeadm reset" in e]
    assert [s.split()[0] for s in steps] == ["n1", "n3"]
    assert steps[0].endswith(f"member remove {303:x}")
    assert lab.node("n1").ssh("cat /root/etcd-members").stdout.split()[1::2] == ["n1", "n2"]
    # No kube-vip, no VIP, no configuration left on n3.
    assert lab.node("n3").ssh(f"ip -o address show to {vip}/32").stdout.strip() == ""
    assert lab.node("n3").ssh("test -e /etc/kubernetes || echo gone").stdout.strip() == "gone"
    for playbook in ctx.playbook_results:
        assert leaked(playbook.run_dir) == []

    # Again: nothing left to remove, nothing to reset.
    again = run_phases([PHASES[name] for name in RESET_PHASES], context(lab, settings, nodes=("n3",)))
    assert again.ok, again.error
    assert [o.detail for o in again.outcomes[1:]] == ["n3 no longer etcd members", "1 nodes were already clean"]


KUBELET_STAND_IN = """[Unit]
Description=stand-in kubelet (tests/test_ha_lab.py)
[Service]
ExecStart=/bin/sleep infinity
[Install]
WantedBy=multi-user.target
"""


def test_without_a_vip_every_node_reaches_the_api_through_its_local_proxy_and_reset_leaves_none(lab: Lab) -> None:
    everyone = ("n1", "n2", "n3", "n4")
    # The proxy's configuration is checked by HAProxy itself, on a node that has it.
    lab.node("n4").ssh("DEBIAN_FRONTEND=noninteractive apt-get -qq update && "
                       "DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends haproxy",
                       timeout=600)
    # The whole cluster goes first (the last test left n1 and n2 formed): nothing of it may stay.
    settings = settings_with(lab)
    down = run_phases([PHASES[name] for name in RESET_PHASES], context(lab, settings, nodes=everyone))
    assert down.ok, down.error
    assert down.outcomes[1].detail == "every control plane is reset: etcd goes with them"
    for name in everyone:
        assert lab.node(name).ssh("test -e /etc/kubernetes || echo gone").stdout.strip() == "gone"
        lab.node(name).ssh(f"cat > /etc/systemd/system/kubelet.service <<'EOF'\n{KUBELET_STAND_IN}EOF\n"
                           "systemctl daemon-reload && systemctl start kubelet")
    first = lab.node("n1").ip
    install_stand_ins(lab, f"{first}:6443", everyone)

    ctx = context(lab, settings)
    assert ctx.cluster.control_plane.name == "n1"
    for phase in ("control_plane", "join"):
        result = play(phase, ctx)
        assert result.ok, result.failures
        assert leaked(result.run_dir) == []
    # kubeadm's endpoint is the first control plane: the joins and the kubelets' TLS bootstrap go there.
    for name in ("n2", "n3"):
        (join,) = calls(lab, name)
        assert join.startswith(f"join {first}:6443 --token ") and "--control-plane" in join
        assert DIR_AVAILABLE not in join
    assert calls(lab, "n4")[0].startswith(f"join {first}:6443 --token ")
    assert lab.node("n1").ssh("test -e /etc/kubernetes/manifests/kube-vip.yaml || echo none").stdout.strip() == "none"

    rendered = PHASES["join"].extra_vars(ctx)["cb_api_proxy"]  # type: ignore[misc]
    for name in everyone:
        node = lab.node(name)
        assert node.ssh("cat /etc/kubernetes/cb-api-proxy/haproxy.cfg").stdout == rendered["config"]
        assert node.ssh("cat /etc/kubernetes/manifests/cb-api-proxy.yaml").stdout == rendered["manifest"]
        # The kubelet waited for the proxy, then goes through it, verifying the server as 'kubernetes'.
        assert "--kubeconfig /etc/kubernetes/kubelet.conf --server https://127.0.0.1:6444 --tls-server-name " \
               "kubernetes get --raw=/readyz" in calls(lab, name, "kubectl")
        kubelet = yaml.safe_load(node.ssh("cat /etc/kubernetes/kubelet.conf").stdout)
        assert kubelet["clusters"][0]["cluster"] == {"certificate-authority-data": "Q0E=",
                                                     "server": "https://127.0.0.1:6444",
                                                     "tls-server-name": "kubernetes"}
    valid = lab.node("n4").ssh("haproxy -c -f /etc/kubernetes/cb-api-proxy/haproxy.cfg", check=False)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    # kube-proxy's kubeconfig, cluster-wide, names the local proxy; kube-proxy restarted once to read it.
    kubectl = calls(lab, "n1", "kubectl")
    assert [c for c in kubectl if "kube-proxy" in c][-2:] == [
        c for c in kubectl if " patch configmap kube-proxy " in c or " rollout restart daemonset/kube-proxy" in c]
    assert len([c for c in kubectl if "rollout restart" in c]) == 1

    again = play("join", ctx)
    assert again.ok and again.changed == dict.fromkeys(everyone, 0)
    assert len([c for c in calls(lab, "n1", "kubectl") if "rollout restart" in c]) == 1

    # A proxy that reaches no API server is named, on its node, with where to look.
    lab.node("n4").ssh("touch /root/proxy-down")
    try:
        definition = PHASES["join"]
        assert definition.extra_vars
        broken = run_playbook("join.yml", ctx.cluster, ctx.settings, phase="join", extra_vars=definition.extra_vars(ctx)
                              | {"control_plane_endpoint_wait_retries": 1, "control_plane_endpoint_wait_delay_s": 0})
    finally:
        lab.node("n4").ssh("rm -f /root/proxy-down")
    (failure,) = broken.failures
    assert failure.host == "n4" and failure.message.startswith(
        "the local API proxy on n4 does not reach an API server through https://127.0.0.1:6444: The connection to "
        "the server 127.0.0.1:6444 was refused")
    assert "`crictl ps -a --name haproxy`" in failure.message and "`ss -ltnp 'sport = :6444'`" in failure.message

    down = run_phases([PHASES[name] for name in RESET_PHASES], context(lab, settings, nodes=everyone))
    assert down.ok, down.error
    for name in everyone:
        left = lab.node(name).ssh("ls /etc/kubernetes 2>/dev/null; ss -ltn 'sport = :6444' | tail -n +2").stdout
        assert left.strip() == ""
