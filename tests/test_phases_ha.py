"""The phases with several control planes, without nodes: what each run is limited to, what it is given (kube-vip's
manifests for the interface preflight found), when etcd's members are removed, and what the commands refuse."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError, InputError
from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.state import ClusterState
from provision.phases import PHASES, PhaseContext
from provision.phases.engine import satisfied as _satisfied

HOSTS = ("[kube_control_plane]\ncp1 ansible_host=10.0.0.1\ncp2 ansible_host=10.0.0.2\ncp3 ansible_host=10.0.0.3\n"
         "[kube_node]\nw1 ansible_host=10.0.0.11\n")
VIP = {"control_plane": {"vip": "10.0.0.100"}}


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Cluster:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text(HOSTS)
    return load_inventory(hosts)


def context(cluster: Cluster, settings: dict[str, Any] | None = None, **kwargs: Any) -> PhaseContext:
    return PhaseContext(cluster=cluster, settings=parse_settings(settings or {}), state=ClusterState(), **kwargs)


def limit(phase: str, ctx: PhaseContext) -> list[str] | None:
    definition = PHASES[phase]
    assert definition.limit is not None
    return definition.limit(ctx)


def test_adding_a_control_plane_behind_local_proxies_runs_the_join_on_every_node(cluster: Cluster) -> None:
    assert limit("join", context(cluster, nodes=("cp3",))) is None
    assert limit("join", context(cluster, nodes=("w1",))) == ["cp1", "w1"]
    # With a VIP nothing changes on the other nodes.
    assert limit("join", context(cluster, VIP, nodes=("cp3",))) == ["cp1", "cp3"]


def test_kube_vip_is_rendered_for_the_interface_preflight_found_on_each_control_plane(cluster: Cluster) -> None:
    ctx = context(cluster, VIP)
    ctx.state.vip_interfaces = {"cp1": "eth1", "cp2": "eth1", "cp3": "ens4"}
    ctx.state.kubernetes_version = "1.36.4"  # what prepare found installed
    kube_vip = PHASES["control_plane"].extra_vars(ctx)["cb_kube_vip"]  # type: ignore[misc]
    assert kube_vip["manifest_path"] == "/etc/kubernetes/manifests/kube-vip.yaml"

    def interface(text: str) -> str:
        env = yaml.safe_load(text)["spec"]["containers"][0]["env"]
        return next(e["value"] for e in env if e["name"] == "vip_interface")

    assert {host: interface(text) for host, text in kube_vip["manifests"].items()} == {
        "cp1": "eth1", "cp2": "eth1", "cp3": "ens4"}
    assert "super-admin.conf" in kube_vip["during_init"] and interface(kube_vip["during_init"]) == "eth1"
    # The setting wins over what preflight found.
    ctx = context(cluster, {"control_plane": {"vip": "10.0.0.100", "interface": "bond0"}})
    manifests = PHASES["join"].extra_vars(ctx)["cb_kube_vip"]["manifests"]  # type: ignore[misc]
    assert {interface(text) for text in manifests.values()} == {"bond0"}


def test_without_a_known_interface_preflight_runs_first(cluster: Cluster) -> None:
    ctx = context(cluster, VIP)
    assert not _satisfied("vip_interfaces", ctx)
    ctx.state.vip_interfaces = {"cp1": "eth0", "cp2": "eth0", "cp3": "eth0"}
    assert _satisfied("vip_interfaces", ctx)
    assert _satisfied("vip_interfaces", context(cluster))  # no VIP: nothing to find
    assert "vip_interfaces" in PHASES["preflight"].provides
    assert {"vip_interfaces"} <= set(PHASES["control_plane"].needs) & set(PHASES["join"].needs)
    with pytest.raises(BootstrapError, match="no interface known for kube-vip on cp1: run `bootstrap preflight`"):
        PHASES["control_plane"].extra_vars(context(cluster, VIP))  # type: ignore[misc]


def test_without_a_vip_the_join_gets_the_local_proxy_and_kube_proxys_kubeconfig(cluster: Cluster) -> None:
    extra = PHASES["join"].extra_vars(context(cluster))  # type: ignore[misc]
    assert extra["cb_kube_vip"]["manifests"] == {}
    assert extra["cb_api_proxy"]["dir"] == "/etc/kubernetes/cb-api-proxy"
    assert extra["cb_api_proxy"]["manifest_path"] == "/etc/kubernetes/manifests/cb-api-proxy.yaml"
    assert "server cp3 10.0.0.3:6443" in extra["cb_api_proxy"]["config"]
    assert "https://127.0.0.1:6444" in extra["cb_kube_proxy_kubeconfig"]
    pinned = {"control_plane": {"vip": "10.0.0.100", "interface": "eth0"}}
    with_vip = PHASES["join"].extra_vars(context(cluster, pinned))  # type: ignore[misc]
    assert with_vip["cb_api_proxy"]["config"] == "" and with_vip["cb_kube_proxy_kubeconfig"] == ""


@pytest.mark.parametrize("targets,skip,on,leaving", [
    (("w1",), "no control plane is reset", None, None),
    (("cp2",), None, ["cp1"], ["cp2"]),
    (("cp2", "cp3", "w1"), None, ["cp1"], ["cp2", "cp3"]),
    (("w1", "cp1", "cp2", "cp3"), "every control plane is reset: etcd goes with them", None, None),
])
def test_etcd_forgets_the_control_planes_being_reset_on_one_that_stays(
        cluster: Cluster, targets: tuple[str, ...], skip: str | None, on: list[str] | None,
        leaving: list[str] | None) -> None:
    ctx = context(cluster, nodes=targets)
    etcd = PHASES["etcd"]
    assert etcd.skip_reason is not None and etcd.skip_reason(ctx) == skip
    if skip is None:
        assert limit("etcd", ctx) == on
        assert etcd.extra_vars(ctx) == {"cb_etcd_leaving": leaving}  # type: ignore[misc]


def test_the_playbook_vars_carry_the_endpoint(cluster: Cluster) -> None:
    from provision.render.playbook_vars import playbook_vars

    assert playbook_vars(cluster, parse_settings(VIP))["cb_api_endpoint"] == {
        "mode": "vip", "control_plane_endpoint": "10.0.0.100:6443", "node_url": "https://10.0.0.100:6443",
        "tls_server_name": "kubernetes", "vip": "10.0.0.100"}
    assert playbook_vars(cluster, Settings())["cb_api_endpoint"] == {
        "mode": "proxy", "control_plane_endpoint": "10.0.0.1:6443", "node_url": "https://127.0.0.1:6444",
        "tls_server_name": "kubernetes", "vip": None}


def test_node_add_and_remove_take_control_planes_but_not_the_first(cluster: Cluster) -> None:
    runner = CliRunner()
    inventory = str(cluster.inventory_path)
    for args in (["node", "add", "cp1", "--inventory", inventory],
                 ["node", "remove", "cp1", "--inventory", inventory, "--yes"]):
        outcome = runner.invoke(app, args)
        assert isinstance(outcome.exception, InputError), outcome.output
        assert "'cp1' is the first control plane" in str(outcome.exception)
    # Alone, or with the other control planes staying, the first control plane is not reset either.
    outcome = runner.invoke(app, ["reset", "cp1", "w1", "--inventory", str(cluster.inventory_path), "--yes"])
    assert isinstance(outcome.exception, InputError)
    assert "list another control plane first in the inventory, run `bootstrap up --only control_plane`" in \
        str(outcome.exception)


def test_node_remove_of_a_control_plane_drains_removes_its_etcd_member_then_resets(
        cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from provision import phases as phases_module
    from provision.phases import Phase

    seen: list[tuple[str, tuple[str, ...]]] = []

    def recorded(name: str) -> Phase:
        return Phase(name, name, lambda ctx: seen.append((name, ctx.target_nodes)) or "ok")

    monkeypatch.setattr(phases_module, "PHASES", {n: recorded(n) for n in ("drain", "etcd", "reset")})
    outcome = CliRunner().invoke(app, ["node", "remove", "cp3", "--inventory", str(cluster.inventory_path), "--yes"])
    assert outcome.exit_code == 0, outcome.output
    assert seen == [("drain", ("cp3",)), ("etcd", ("cp3",)), ("reset", ("cp3",))]


def test_verify_asks_etcd_for_every_control_plane_or_for_the_one_added(cluster: Cluster) -> None:
    from provision.phases.common import expectations as _expectations

    whole = _expectations(context(cluster), joined=True)
    assert (whole.etcd_members, whole.etcd_allowed) == (("cp1", "cp2", "cp3"), ("cp1", "cp2", "cp3"))
    assert whole.control_planes == ("cp2", "cp3") and whole.endpoint_pods == ("cb-api-proxy", ("cp1", "cp2", "cp3", "w1"))
    # Going from three to five, cp3 being added: the other new one may still be waiting for its `node add`.
    added = _expectations(context(cluster, VIP, nodes=("cp3",)), joined=True)
    assert (added.etcd_members, added.etcd_allowed) == (("cp3",), ("cp1", "cp2", "cp3"))
    assert added.endpoint_pods == ("kube-vip", ("cp3",))
    assert _expectations(context(cluster, nodes=("w1",)), joined=True).etcd_members is None
    # The network phase looks at the first control plane before anything joined.
    assert _expectations(context(cluster), ["cp1"]).endpoint_pods is None
