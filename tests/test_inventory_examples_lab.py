"""Every example inventory shipped in inventory/ through every phase on real lab nodes, in its own shape.

Each example is copied with the lab's machines in it: every host's addresses (ansible_host, kubespray's `ip`, a host
named by its address as kubeasz names them) become one lab node's, in the order the hosts appear; the login user,
key and known_hosts are the lab's. Everything else is the example as shipped: INI or YAML, its group names
(aliases, kubespray's children groups, kubeasz's empty groups), k8s_nodename, ansible_become, its interpreter. The
one other change: a node the example marks gpu=true is gpu=false here, since NVIDIA's repositories cannot be
reached (tests/test_prepare_lab.py takes a GPU node up to that boundary).

The examples share one prepared set of nodes: every lab node is prepared once, under the lab's own names (the
packages, containerd and the Kubernetes packages from the lab's signed placeholder repository, as
tests/test_prepare_lab.py), and each example's own preflight and prepare then run for real on nodes that hold all of
that already: its prepare renames them and installs nothing. control_plane, join and network run their plays on the
nodes with kubeadm and kubectl stand-ins (tests/support/kube_stand_ins.py), as tests/test_phases_lab.py and
tests/test_ha_lab.py do; the examples then go through reset, so the next one starts on nodes without a cluster. The
YAML example is the one that crashed at control_plane (a host name of Ansible's tagged string type, which
yaml.safe_dump cannot write).
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from provision.inputs.state import ClusterState
from provision.inputs.validation import load_cluster
from provision.nodes.runner import run_playbook
from provision.phases import PHASES, RESET_PHASES, PhaseContext, run_phases, select_phases
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, push_kubernetes_repo, write_config
from tests.support.kube_stand_ins import install_command, leaked
from tests.support.paths import REPO_ROOT

EXAMPLES = sorted((REPO_ROOT / "inventory").glob("*.ini")) + sorted((REPO_ROOT / "inventory").glob("*.yml"))
ADDRESS = re.compile(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d./])", re.ASCII)
BOOKWORM_KUBERNETES = "1.35"
# Calico's release manifest cannot be downloaded here: a stand-in on the first control plane (file://).
CALICO_DIR = "/srv/calico-releases"


def host_count(example: Path) -> int:
    return len({line.split()[0] for line in _host_lines(example.read_text())})


def _host_lines(text: str) -> list[str]:
    """The lines that name a host with its address (INI host lines, YAML `name: {ansible_host: ...}`)."""
    return [line for line in text.splitlines() if ADDRESS.search(line) and not line.lstrip().startswith(("#", ";"))
            and "=" not in line.split()[0] and not line.lstrip().startswith(("SERVICE_CIDR", "CLUSTER_CIDR"))]


def lab_copy(example: Path, lab: Lab, destination: Path) -> Path:
    """The example with the lab's machines, user, key and interpreter in it (see the module's docstring)."""
    text = example.read_text()
    mapping: dict[str, str] = {}
    nodes = iter(lab.nodes)
    for line in text.splitlines():
        if line.lstrip().startswith(("#", ";")):
            continue
        found = [address for address in ADDRESS.findall(line) if not address.endswith(".0")]
        if not found:
            continue
        known = next((mapping[address] for address in found if address in mapping), None)
        target = known or next(nodes).ip
        mapping.update(dict.fromkeys(found, target))
    for address, target in mapping.items():
        text = re.sub(rf"(?<![\d.]){re.escape(address)}(?![\d./])", target, text)
    text = re.sub(r"(ansible_user\s*[=:]\s*)\S+", r"\g<1>tester", text)
    text = re.sub(r"(ansible_ssh_private_key_file\s*[=:]\s*)\S+", rf"\g<1>{lab.key_path}", text)
    text = re.sub(r"(gpu\s*[=:]\s*)true\b", r"\g<1>false", text)
    # An example that leaves the user or the key to ssh's defaults gets the lab's, beside its other variables.
    missing = [f"{name}={value}" for name, value in (("ansible_user", "tester"),
                                                     ("ansible_ssh_private_key_file", lab.key_path))
               if name not in text]
    if missing and example.suffix == ".ini":
        text += "\n[all:vars]\n" + "\n".join(missing) + "\n"
    elif missing:
        document = yaml.safe_load(text)
        document["all"].setdefault("vars", {}).update(dict(item.split("=", 1) for item in missing))
        text = yaml.safe_dump(document, sort_keys=False)
    path = destination / example.name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def lab(lab_factory: Callable[..., Lab]) -> Lab:
    return lab_factory(max(host_count(example) for example in EXAMPLES))


@pytest.fixture(scope="module")
def config(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("examples")
    push_kubernetes_repo(lab, tmp / "offline", BOOKWORM_KUBERNETES)
    return write_config(lab, tmp / "cluster.yaml", kubernetes={"version": BOOKWORM_KUBERNETES},
                        mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes",
                                 "calico_manifest": f"file://{CALICO_DIR}"},
                        container_runtime={"containerd_source": "distribution"},
                        smoke_test={"enabled": False},
                        # Six nodes and the controller share this machine's cores: a node slow to answer under
                        # that load is not what this test is about.
                        ssh={"connect_timeout_s": 60})


@pytest.fixture(scope="module")
def prepared(lab: Lab, config: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Every node of the lab prepared once, as the lab's own inventory names them: what each example then finds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path_factory.mktemp("prepared-state")))
        cluster, settings = load_cluster(lab.inventory_path, config)
        result = run_phases(select_phases(("preflight", "prepare")),
                            PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster)))
        assert result.ok, result.error
    yield lab


@pytest.fixture(autouse=True)
def isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_the_lab_copies_keep_each_examples_shape(lab: Lab, tmp_path: Path) -> None:
    for example in EXAMPLES:
        copy = lab_copy(example, lab, tmp_path)
        shipped, written = example.read_text(), copy.read_text()
        assert [line.split()[0] for line in _host_lines(shipped)] == [line.split()[0] for line in _host_lines(written)] \
            or example.name == "kubeasz.ini"
        assert re.findall(r"^\[[^\]]+\]", shipped, re.M) == re.findall(r"^\[[^\]]+\]", written, re.M)[
            :len(re.findall(r"^\[[^\]]+\]", shipped, re.M))]
        if example.suffix == ".yml":
            assert yaml.safe_load(written).keys() == yaml.safe_load(shipped).keys()


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_each_example_inventory_runs_through_every_phase(prepared: Lab, config: Path, tmp_path: Path,
                                                         example: Path) -> None:
    lab = prepared
    cluster, settings = load_cluster(lab_copy(example, lab, tmp_path), config)
    ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster))
    result = run_phases(select_phases(("preflight", "prepare")), ctx)
    assert result.ok, result.error
    for node in cluster.nodes:
        assert lab.node(_lab_name(lab, node.address)).ssh("hostname").stdout.strip() == node.name
    # The nodes were prepared already: this prepare installed nothing, on any node.
    assert ctx.results.prepare is not None
    assert _transaction_states(ctx.results.prepare.playbook.run_dir) == {node.host: "skipped" for node in cluster.nodes}

    first = cluster.control_plane
    endpoint = f"{first.cluster_address or first.address}:6443"
    for node in cluster.nodes:
        lab.node(_lab_name(lab, node.address)).ssh("rm -f /root/kubeadm-calls /root/kubectl-calls /root/order "
                                                   "/root/etcd-members; " + install_command(endpoint))
    manifests = f"{CALICO_DIR}/{settings.calico.version}/manifests"
    lab.node(_lab_name(lab, first.address)).ssh(f"mkdir -p {manifests} && echo 'kind: List' > {manifests}/calico.yaml")
    for phase in ("control_plane", "join", "network"):
        definition = PHASES[phase]
        assert definition.playbook and definition.extra_vars
        played = run_playbook(definition.playbook, cluster, settings, phase=phase,
                              extra_vars=definition.extra_vars(ctx))
        assert played.ok, (phase, played.failures)
        assert leaked(played.run_dir) == []
    init = lab.node(_lab_name(lab, first.address)).ssh("cat /etc/kubernetes/kubeadm-config.yaml").stdout
    assert f"name: {first.name}" in init

    reset = run_phases(select_phases(RESET_PHASES), PhaseContext(cluster=cluster, settings=settings,
                                                                  state=ClusterState.load(cluster)))
    assert reset.ok, reset.error


def _transaction_states(run_dir: Path) -> dict[str, str]:
    """How prepare's one package transaction went on each host, from the run's own log."""
    found = {}
    for line in (run_dir / "run.log").read_text().splitlines():
        host, state, task = [*line.split("\t"), "", ""][:3]
        if task.startswith("Install every package in one transaction"):
            found[host] = state
    return found


def _lab_name(lab: Lab, address: str) -> str:
    return next(node.name for node in lab.nodes if node.ip == address)
