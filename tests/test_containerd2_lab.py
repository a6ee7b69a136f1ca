"""The versions rules on real nodes (systemd-nspawn, real SSH, packages from Debian's archive):

- sid (Debian's containerd 2.1, docker.io 28): `bootstrap prepare` with the defaults (Kubernetes 1.36,
  containerd_source auto, which takes the distribution's containerd 2) runs for real; containerd's effective
  configuration is read back with `containerd config dump` and over the CRI (`crictl info`: runtime ready,
  systemd cgroups); a second run changes nothing.
- trixie (Debian's containerd 1.7): Kubernetes 1.36 on the distribution's containerd is refused by preflight
  before anything changes; 1.35 prepares, with the warning; a second run changes nothing.
- bookworm, on cgroup v1 like this machine's kernel: the cgroup rule refuses Kubernetes 1.35+; accepting cgroup
  v1 is warned about on every run; switching to cgroup v2 fails by name where no boot loader can be configured.

Kubernetes' own packages are the lab's signed placeholders (tests/lab/repos.py); crictl is the lab's stand-in
speaking the CRI API (tests/lab/crictl.py): Debian ships no cri-tools.
"""
from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import load_settings
from provision.inputs.state import ClusterState
from provision.phases import PhaseContext, PipelineResult, run_phases, select_phases
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, push_kubernetes_repo, write_config
from tests.support.paths import REPO_ROOT

CRICTL = REPO_ROOT / "tests" / "lab" / "crictl.py"


@dataclass
class Run:
    result: PipelineResult
    ctx: PhaseContext
    messages: list[str] = field(default_factory=list)

    @property
    def changed(self) -> dict[str, int]:
        return self.ctx.playbook_results[-1].changed if self.ctx.playbook_results else {}

    @property
    def error(self) -> str:
        return " ".join(str(self.result.error or "").split())

    @property
    def changed_tasks(self) -> list[str]:
        """The tasks that reported a change, from ansible-runner's saved events (for a failure's message)."""
        run_dir = self.ctx.playbook_results[-1].run_dir
        events = (json.loads(path.read_text()) for path in run_dir.glob("artifacts/*/job_events/*.json"))
        return sorted({e["event_data"].get("task", "") for e in events
                       if e.get("event") == "runner_on_ok" and (e["event_data"].get("res") or {}).get("changed")})


@pytest.fixture(scope="module")
def state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # Module fixtures run before the per-test private state directory: give them one of their own.
    path = tmp_path_factory.mktemp("containerd2-state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BOOTSTRAP_STATE_DIR", str(path))
        yield path


def prepare(lab: Lab, config: Path, *, again: bool = False) -> Run:
    """`bootstrap prepare` as the CLI runs it: the prepare phase, preflight first when the cluster's state has
    not counted the GPUs yet (a first run: every run here but `again`)."""
    cluster = load_inventory(lab.inventory_path)
    messages: list[str] = []
    state = ClusterState.load(cluster) if again else ClusterState()
    ctx = PhaseContext(cluster=cluster, settings=load_settings(config), state=state, on_message=messages.append)
    return Run(run_phases(select_phases(("prepare",)), ctx), ctx, messages)


def untouched(lab: Lab) -> list[str]:
    """What prepare would have left on the node, found there (empty: nothing changed)."""
    node = lab.nodes[0]
    checks = {"containerd installed": "dpkg -s containerd containerd.io",
              "an apt source of ours": "ls /etc/apt/sources.list.d/cb-*",
              "our modules-load.d file": "test -e /etc/modules-load.d/cluster-bootstrap.conf",
              "our sysctl.d file": "test -e /etc/sysctl.d/99-cluster-bootstrap.conf",
              "a containerd configuration": "test -e /etc/containerd/config.toml"}
    return [what for what, command in checks.items() if node.ssh(command, check=False).returncode == 0]


def config_with(lab: Lab, path: Path, **sections: dict[str, object]) -> Path:
    return write_config(lab, path, mirrors={"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"}, **sections)


# --- sid: containerd 2 from the distribution ----------------------------------------------------------------------

@dataclass
class Prepared:
    lab: Lab
    first: Run
    second: Run


@pytest.fixture(scope="module")
def sid(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> Prepared:
    lab = lab_factory(1, flavour="sid")
    tmp = tmp_path_factory.mktemp("sid")
    push_kubernetes_repo(lab, tmp / "offline")
    config = config_with(lab, tmp / "cluster.yaml")
    first = prepare(lab, config)
    assert first.result.ok, first.error
    node = lab.nodes[0]
    # The stand-in crictl (the placeholder cri-tools' crictl only prints its name) and the gRPC it speaks.
    node.ssh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-grpcio >/dev/null",
             timeout=600)
    subprocess.run([*node.ssh_command(), "cat > /usr/local/bin/crictl && chmod 755 /usr/local/bin/crictl"],
                   input=CRICTL.read_bytes(), check=True, timeout=60)
    return Prepared(lab, first, prepare(lab, config, again=True))


def test_sid_prepares_for_kubernetes_1_36_on_its_own_containerd_2(sid: Prepared) -> None:
    outcomes = [(o.name, o.status) for o in sid.first.result.outcomes]
    assert outcomes == [("preflight", "ok"), ("prepare", "ok")]
    assert sid.first.changed["n1"] > 0
    node = sid.lab.nodes[0]
    assert re.match(r"containerd \S+ 2\.\d+\.", node.ssh("containerd --version").stdout)
    # auto took the distribution's containerd 2, so Docker is the distribution's docker.io, beside it.
    installed = node.ssh("dpkg-query -W -f '${Package}\\n' containerd docker.io containerd.io 2>/dev/null",
                         check=False).stdout.split()
    assert installed == ["containerd", "docker.io"]
    assert node.ssh("systemctl is-active containerd docker").stdout.split() == ["active", "active"]
    assert node.ssh("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "systemd"


def test_sid_runs_containerd_2_with_configuration_version_3_as_written(sid: Prepared) -> None:
    node = sid.lab.nodes[0]
    written = node.ssh("cat /etc/containerd/config.toml").stdout
    assert "\nversion = 3\n" in written and 'imports = ["/etc/containerd/conf.d/*.toml"]' in written
    import tomllib

    dump = tomllib.loads(node.ssh("containerd config dump").stdout)
    assert dump["version"] == 3
    runtime = dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    assert runtime["default_runtime_name"] == "runc"
    assert runtime["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    images = dump["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == "registry.k8s.io/pause:3.10.2"
    assert images["registry"]["config_path"] == "/etc/containerd/certs.d"


def test_the_cri_says_the_runtime_is_ready_with_systemd_cgroups(sid: Prepared) -> None:
    node = sid.lab.nodes[0]
    info = json.loads(node.ssh("crictl info").stdout)
    conditions = {c["type"]: c["status"] for c in info["status"]["conditions"]}
    assert conditions["RuntimeReady"] is True
    assert info["config"]["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    version = node.ssh("crictl version").stdout
    assert "RuntimeName:  containerd" in version and re.search(r"RuntimeVersion:  v?2\.", version)


def test_a_second_prepare_on_sid_changes_nothing(sid: Prepared) -> None:
    assert sid.second.result.ok, sid.second.error
    assert sid.second.changed == {"n1": 0}, sid.second.changed_tasks


# --- trixie: containerd 1.7 from the distribution ---------------------------------------------------------------

@dataclass
class Trixie:
    lab: Lab
    tmp: Path


@pytest.fixture(scope="module")
def trixie(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> Trixie:
    lab = lab_factory(1, flavour="trixie")
    tmp = tmp_path_factory.mktemp("trixie")
    push_kubernetes_repo(lab, tmp / "offline", "1.35")
    return Trixie(lab, tmp)


def test_trixie_refuses_kubernetes_1_36_on_its_containerd_1_7_before_any_change(trixie: Trixie) -> None:
    config = config_with(trixie.lab, trixie.tmp / "1.36.yaml", container_runtime={"containerd_source": "distribution"})
    run = prepare(trixie.lab, config)
    assert [(o.name, o.status) for o in run.result.outcomes] == [("preflight", "failed"), ("prepare", "not run")]
    assert run.error.startswith("preflight: n1: containerd: containerd 1.7.24 cannot run Kubernetes 1.36, which needs "
                                "containerd 2.0 or newer (the distribution's, to be installed)")
    assert "fix: set container_runtime.containerd_source: docker" in run.error
    assert "kubernetes.version: '1.35'" in run.error
    assert untouched(trixie.lab) == []


def test_trixie_prepares_kubernetes_1_35_with_the_warning_and_a_second_run_changes_nothing(trixie: Trixie) -> None:
    config = config_with(trixie.lab, trixie.tmp / "1.35.yaml", kubernetes={"version": "1.35"},
                         container_runtime={"containerd_source": "distribution"})
    first = prepare(trixie.lab, config)
    assert first.result.ok, first.error
    warnings = [m for m in first.messages if m.startswith("warning: n1: containerd_1x: ")]
    assert len(warnings) == 1 and "the last minor that supports containerd 1.x" in warnings[0]
    node = trixie.lab.nodes[0]
    assert re.match(r"containerd \S+ 1\.7\.", node.ssh("containerd --version").stdout)
    dump = node.ssh("containerd config dump").stdout
    assert re.search(r"^version = 2$", dump, re.M)
    assert 'sandbox_image = "registry.k8s.io/pause:3.10.1"' in dump
    assert re.search(r"^\s*SystemdCgroup = true$", dump, re.M)
    assert "1.35" in node.ssh("cat /etc/apt/sources.list.d/cb-kubernetes.sources").stdout
    assert node.ssh("docker info --format '{{.CgroupDriver}}'").stdout.strip() == "systemd"
    again = prepare(trixie.lab, config, again=True)
    assert again.result.ok, again.error
    assert again.changed == {"n1": 0}, again.changed_tasks


# --- bookworm: cgroup v1, like this machine's kernel ------------------------------------------------------------

@pytest.fixture(scope="module")
def bookworm(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory, state_dir: Path) -> Trixie:
    lab = lab_factory(1)
    tmp = tmp_path_factory.mktemp("bookworm")
    push_kubernetes_repo(lab, tmp / "offline", "1.35")
    return Trixie(lab, tmp)


def strict_config(lab: Lab, path: Path, **kubelet: bool) -> Path:
    """The lab's settings without its acceptance of cgroup v1 (lab.base_settings), on Debian 12's containerd."""
    data = yaml.safe_load(lab.config_path.read_text())
    data["kubelet"] = dict(kubelet)
    data |= {"kubernetes": {"version": "1.35"}, "container_runtime": {"containerd_source": "distribution"},
             "mirrors": {"kubernetes_repo": f"file://{OFFLINE_DIR}/kubernetes"}}
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_cgroup_v1_node_is_refused_with_both_ways_out_before_any_change(bookworm: Trixie) -> None:
    assert bookworm.lab.nodes[0].ssh("stat -fc %T /sys/fs/cgroup").stdout.strip() == "tmpfs"
    run = prepare(bookworm.lab, strict_config(bookworm.lab, bookworm.tmp / "strict.yaml"))
    assert [(o.name, o.status) for o in run.result.outcomes] == [("preflight", "failed"), ("prepare", "not run")]
    assert run.error.startswith("preflight: n1: cgroup: cgroup v1 (legacy or hybrid hierarchy), which the kubelet of "
                                "Kubernetes 1.35 refuses (failCgroupV1, KEP-5573)")
    assert "kubelet.switch_to_cgroup_v2: true" in run.error and "kubelet.allow_cgroup_v1: true" in run.error
    assert untouched(bookworm.lab) == []


def test_accepting_cgroup_v1_is_warned_about_on_every_run(bookworm: Trixie) -> None:
    config = strict_config(bookworm.lab, bookworm.tmp / "allowed.yaml", allow_cgroup_v1=True)
    cluster = load_inventory(bookworm.lab.inventory_path)
    for _ in range(2):
        messages: list[str] = []
        ctx = PhaseContext(cluster=cluster, settings=load_settings(config), state=ClusterState(),
                           on_message=messages.append)
        result = run_phases(select_phases(("preflight",)), ctx)
        assert result.ok, result.error
        assert any(m.startswith("warning: n1: cgroup_v1_allowed: cgroup v1, run with failCgroupV1: false") for m in messages)


def test_switching_to_cgroup_v2_without_a_boot_loader_to_configure_fails_by_name(bookworm: Trixie) -> None:
    run = prepare(bookworm.lab, strict_config(bookworm.lab, bookworm.tmp / "switch.yaml", switch_to_cgroup_v2=True))
    assert [(o.name, o.status) for o in run.result.outcomes] == [("preflight", "ok"), ("prepare", "failed")]
    assert "n1 is on cgroup v1 and kubelet.switch_to_cgroup_v2 is true, but it has neither grubby nor " \
           "/etc/default/grub" in run.error
    assert any("cgroup_v2_switch" in m for m in run.messages)
