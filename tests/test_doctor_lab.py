"""`bootstrap doctor` and `bootstrap support-bundle` on real nodes: three Debian 12 lab nodes prepared by
`bootstrap prepare` (containerd configured, the Kubernetes packages from a mirror stand-in served by the lab's hub),
each given a stand-in kubelet that runs (the lab's kubelet package is a placeholder) and the kubelet.conf that
kubeadm would leave, so the node counts as joined.

A healthy lab has no finding (the API's checks say they did not run: there is no API server in the lab). Ten
faults seeded on its nodes are each named, on their node, with their fix, and nothing else is. A support bundle of
the lab, with known secrets planted in every place it collects from that a secret can be put in, holds every
node's parts and not one of the secrets, with the API down.

What the lab cannot seed, tested on recorded probe output instead (tests/test_doctor_checks.py): active swap and the
clock itself (a container shares the host's kernel: swap areas and the clock are the host's, so the clock is seeded
through a `date` wrapper that the probe's PATH finds first), SELinux (not in this kernel), GPUs; and for the bundle,
the kernel log (the host's) and addresses and routes (no free text to put a secret in).
"""
from __future__ import annotations

import base64
import json
import secrets
import shlex
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError
from provision.inputs.inventory import load_inventory
from provision.inputs.state import cluster_dir, runs_root
from tests.lab.disks import between, measure
from tests.lab.lab import Lab
from tests.lab.repos import serve_kubernetes_repo, write_config
from tests.support.output import widest_table_line
from tests.support.paths import REPO_ROOT

# The kubelet as a unit that runs (the placeholder package's exits at once), and kubeadm's mark of a joined node.
STAND_IN_KUBELET = (
    "mkdir -p /etc/systemd/system/kubelet.service.d /etc/kubernetes && "
    "printf '[Service]\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' "
    "> /etc/systemd/system/kubelet.service.d/99-cblab-stand-in.conf && "
    "printf 'apiVersion: v1\\nkind: Config\\n' > /etc/kubernetes/kubelet.conf && "
    "systemctl daemon-reload && systemctl restart kubelet && systemctl is-active kubelet")
CRICTL = REPO_ROOT / "tests" / "lab" / "crictl.py"


@dataclass
class Prepared:
    lab: Lab
    config: Path

    def run(self, command: str, *args: str, inventory: Path | None = None) -> object:
        return CliRunner().invoke(app, [command, "-i", str(inventory or self.lab.inventory_path),
                                        "-c", str(self.config), *args], env={"COLUMNS": "80"})


@pytest.fixture(scope="module")
def prepared(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> Prepared:
    lab = lab_factory(3)
    tmp = tmp_path_factory.mktemp("doctor")
    # The nodes' Kubernetes repository over HTTP from the hub, as a mirror would serve it (the package source).
    url = serve_kubernetes_repo(lab, tmp / "offline", "1.35")
    config = write_config(lab, tmp / "cluster.yaml", kubernetes={"version": "1.35"}, mirrors={"kubernetes_repo": url},
                          container_runtime={"containerd_source": "distribution"})
    result = CliRunner().invoke(app, ["prepare", "-i", str(lab.inventory_path), "-c", str(config)])
    assert result.exit_code == 0, result.output
    for node in lab.nodes:
        assert node.ssh(STAND_IN_KUBELET).stdout.strip() == "active"
    return Prepared(lab, config)


def lines_of(result: object) -> list[str]:
    return result.output.splitlines()  # type: ignore[attr-defined]


def test_a_healthy_prepared_lab_has_no_finding(prepared: Prepared) -> None:
    before = measure(prepared.lab.nodes)
    result = prepared.run("doctor")
    document = json.loads(prepared.run("doctor", "-o", "json").stdout)  # type: ignore[attr-defined]
    disks = between(before, measure(prepared.lab.nodes))
    for node in document["nodes"]:
        assert node["probed"], node
        checks = {c["check"]: c for c in node["checks"]}
        assert set(checks) >= {"swap", "clock", "hostname", "hosts", "firewall", "selinux", "containerd", "kubelet",
                               "disk", "dns", "package_source"}
        assert {c["status"] for name, c in checks.items() if name != "disk"} == {"ok"}, node
        # The disk check is the host's disk (a lab node's filesystems are this machine's): ok unless df says full.
        if disks.judged_ok(node["name"]):
            assert checks["disk"]["status"] == "ok", checks["disk"]
        elif node["name"] in disks.full:
            assert checks["disk"]["status"] in ("warn", "fail") and checks["disk"]["fix"], checks["disk"]
        assert checks["kubelet"]["detail"] == "running"
    shown = lines_of(result)
    assert widest_table_line(result.output, [n.name for n in prepared.lab.nodes]) <= 80  # type: ignore[attr-defined]
    assert any(line.startswith("skip cluster: api: not checked: no admin kubeconfig") for line in shown)
    headed = [line for line in shown if line.startswith(("FAIL ", "warn "))]
    if not disks.full | disks.crossing:
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
        rows = [line.split() for line in shown if line.startswith("n")]
        assert [row[:3] for row in rows] == [["n1", "control-plane", "ok"], ["n2", "worker", "ok"],
                                             ["n3", "worker", "ok"]]
        assert not headed
    else:
        assert all(": disk: " in line for line in headed), result.output  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Fault:
    node: str
    check: str
    status: str
    seed: str
    undo: str
    said: str  # in the finding's detail


def faults(lab: Lab) -> list[Fault]:
    hub, n1 = lab.hub_ip, lab.node("n1").ip
    drifted = lab.unused_ip()
    return [
        Fault("n1", "swap", "warn", "echo '/swapfile none swap sw 0 0' >> /etc/fstab",
              "sed -i '\\#^/swapfile none swap sw 0 0$#d' /etc/fstab", "/swapfile none swap sw 0 0"),
        # The clock: a container's is the host's; `date`, as the probe runs it, reads an hour ahead.
        Fault("n1", "clock", "fail",
              "printf '#!/bin/sh\\nif [ \"$1\" = \"+%%s.%%N\" ]; then now=$(/usr/bin/date +%%s.%%N); "
              "echo \"$(( ${now%%.*} + 3600 )).${now#*.}\"; else exec /usr/bin/date \"$@\"; fi\\n' "
              "> /usr/local/bin/date && chmod 755 /usr/local/bin/date", "rm -f /usr/local/bin/date",
              "3600 s ahead of the other nodes'"),
        Fault("n1", "firewall", "fail", "iptables -A INPUT -p tcp --dport 6443 -j DROP",
              "iptables -D INPUT -p tcp --dport 6443 -j DROP", "6443/tcp (iptables: -A INPUT -p tcp -m tcp --dport 6443"),
        Fault("n2", "hostname", "fail", "hostnamectl set-hostname n2-renamed", "hostnamectl set-hostname n2",
              "'n2-renamed', not its node name 'n2'"),
        Fault("n2", "containerd", "fail",
              "sed -i 's/SystemdCgroup = true/SystemdCgroup = false/' /etc/containerd/config.toml && "
              "systemctl restart containerd",
              "sed -i 's/SystemdCgroup = false/SystemdCgroup = true/' /etc/containerd/config.toml && "
              "systemctl restart containerd", "runtimes.runc.options.SystemdCgroup = False, expected true"),
        Fault("n2", "kubelet", "fail", "systemctl stop kubelet", "systemctl start kubelet",
              "the kubelet is not running (inactive, dead)"),
        Fault("n2", "dns", "fail", "cp /etc/resolv.conf /root/resolv.conf.lab && echo 'nameserver 127.0.0.53' "
              "> /etc/resolv.conf", "cp /root/resolv.conf.lab /etc/resolv.conf",
              "points at 127.0.0.53, where nothing listens on port 53"),
        # A small filesystem filled past the kubelet's eviction point, not the machine's disk.
        Fault("n3", "disk", "fail", "mkdir -p /var/lib/kubelet && mount -t tmpfs -o size=16m tmpfs /var/lib/kubelet "
              "&& head -c 15500000 /dev/zero > /var/lib/kubelet/fill", "umount /var/lib/kubelet",
              "/var/lib/kubelet (/var/lib/kubelet) is 9"),
        Fault("n3", "package_source", "fail", f"iptables -A OUTPUT -p tcp -d {hub} --dport 8081 -j REJECT",
              f"iptables -D OUTPUT -p tcp -d {hub} --dport 8081 -j REJECT", "the connection is refused"),
        Fault("n3", "hosts", "fail", f"sed -i 's/^{n1} n1$/{drifted} n1/' /etc/hosts",
              f"sed -i 's/^{drifted} n1$/{n1} n1/' /etc/hosts", f"n1 is {drifted} in the block, the inventory says {n1}"),
    ]


@pytest.fixture
def seeded(prepared: Prepared) -> Iterator[list[Fault]]:
    seeded = faults(prepared.lab)
    for fault in seeded:
        prepared.lab.node(fault.node).ssh(fault.seed)
    yield seeded
    for fault in reversed(seeded):
        prepared.lab.node(fault.node).ssh(fault.undo)


def test_each_seeded_fault_is_named_on_its_node_with_its_fix_and_nothing_else(prepared: Prepared,
                                                                              seeded: list[Fault]) -> None:
    # n3's disk is its own small filesystem (seeded); n1's and n2's are this host's, full only where df says so.
    hosts = [n for n in prepared.lab.nodes if n.name != "n3"]
    before = measure(hosts)
    result = prepared.run("doctor", "-o", "json")
    text = prepared.run("doctor")
    disks = between(before, measure(hosts))
    assert isinstance(result.exception, BootstrapError) and result.exception.exit_code == 1  # type: ignore[attr-defined]
    document = json.loads(result.stdout)  # type: ignore[attr-defined]
    found = {(c["subject"], c["check"]): c for n in document["nodes"] for c in n["checks"] if c["status"] != "ok"}
    host_full = {(n, "disk") for n in disks.full}
    for finding in [(n, "disk") for n in disks.crossing]:
        found.pop(finding, None)
    assert sorted(found) == sorted({(f.node, f.check) for f in seeded} | host_full)
    for fault in seeded:
        finding = found[(fault.node, fault.check)]
        assert finding["status"] == fault.status, finding
        assert fault.said in finding["detail"], finding
        assert finding["fix"], finding
    shown = lines_of(text)
    assert widest_table_line(text.output, [n.name for n in prepared.lab.nodes]) <= 80  # type: ignore[attr-defined]
    if disks.full | disks.crossing:
        return  # the host's disk findings group with others in the text; the JSON above judged them
    headed = [line for line in shown if line.startswith(("FAIL ", "warn "))]
    assert sorted(line.split(":")[0:2] for line in headed) == sorted(
        [f"{'FAIL' if f.status == 'fail' else 'warn'} {f.node}", f" {f.check}"] for f in seeded)
    assert sum(line.lstrip().startswith("fix: ") for line in shown) == len(seeded)


# --- the support bundle ------------------------------------------------------------------------------------------

def planted() -> dict[str, str]:
    return {"token": f"{secrets.token_hex(3)}.{secrets.token_hex(8)}", "certificate key": secrets.token_hex(32),
            "password": f"pw-{secrets.token_urlsafe(12)}", "key body": secrets.token_urlsafe(48),
            "jwt": f"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ{secrets.token_urlsafe(18)}.{secrets.token_urlsafe(30)}"}


def plant_on_node(s: dict[str, str]) -> tuple[str, str]:
    """(plant, undo): secrets in every file the bundle copies and every journal it reads, as they would stand
    there; the originals kept under /root/cb-planted."""
    key = base64.b64encode(f"-----BEGIN EC PRIVATE KEY-----\n{s['key body']}\n-----END EC PRIVATE KEY-----\n"
                           .encode()).decode()
    files = {
        "/etc/kubernetes/kubeadm-config.yaml": f"apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
                                               f"bootstrapTokens:\n- token: {s['token']}\ncertificateKey: "
                                               f"{s['certificate key']}\n",
        "/etc/kubernetes/kubelet.conf": f"apiVersion: v1\nkind: Config\nusers:\n- name: kubelet\n  user:\n"
                                        f"    client-key-data: {key}\n    token: {s['jwt']}\n",
        "/etc/kubernetes/manifests/etcd.yaml": f"spec:\n  containers:\n  - name: etcd\n    env:\n"
                                               f"    - name: ETCD_ROOT_PASSWORD\n      value: {s['password']}\n",
        "/var/lib/kubelet/config.yaml": f"kind: KubeletConfiguration\nauthentication:\n  token: {s['jwt']}\n",
        "/var/lib/kubelet/kubeadm-flags.env": f'KUBELET_KUBEADM_ARGS="--bootstrap-token={s["token"]}"\n',
        "/etc/default/kubelet": f"KUBELET_EXTRA_ARGS=--registry-password {s['password']}\n",
        "/etc/apt/sources.list.d/cb-private.sources": f"Types: deb\nURIs: https://ops:{s['password']}@mirror.example/"
                                                      "debian\nSuites: bookworm\nComponents: main\nEnabled: no\n",
    }
    appended = {
        "/etc/containerd/config.toml": f'  [plugins."io.containerd.grpc.v1.cri".registry.configs."harbor.example".auth]'
                                       f'\n    username = "robot"\n    password = "{s["password"]}"\n',
        "/etc/systemd/system/kubelet.service.d/99-cblab-stand-in.conf": f"Environment=REGISTRY_TOKEN={s['token']}\n",
        "/etc/crictl.yaml": f"# token: {s['token']}\n",
        "/etc/hosts": f"# mirror password={s['password']}\n",
        "/etc/resolv.conf": f"# token: {s['token']}\n",
        "/etc/fstab": f"//nas/share /mnt/share cifs noauto,username=ops,password={s['password']} 0 0\n",
        "/etc/sysctl.d/99-cluster-bootstrap.conf": f"# password = {s['password']}\n",
        "/etc/modules-load.d/cluster-bootstrap.conf": f"# token: {s['token']}\n",
    }
    plant = ["mkdir -p /root/cb-planted /etc/kubernetes/manifests /var/lib/kubelet"]
    undo = []
    for path, text in {**files, **appended}.items():
        saved = f"/root/cb-planted/{path.strip('/').replace('/', '_')}"
        plant.append(f"if [ -e {path} ]; then cp -a {path} {saved}; fi")
        verb = ">" if path in files else ">>"
        plant.append(f"printf '%s' {shlex.quote(text)} {verb} {path}")
        undo.append(f"if [ -e {saved} ]; then cp -a {saved} {path}; else rm -f {path}; fi")
    journal = {"kubelet.service": f"I1125 server.go:42] Authorization: Bearer {s['jwt']}",
               "containerd.service": f"pulling with password={s['password']}",
               "docker.service": f"login token: {s['token']}", "chrony.service": f"key password={s['password']}"}
    for unit, message in journal.items():
        plant.append(f"printf 'MESSAGE=%s\\nOBJECT_SYSTEMD_UNIT={unit}\\n' {shlex.quote(message)} | logger --journald")
    plant.append(f"logger -t ansible-ansible.legacy.command {shlex.quote('Invoked with _raw_params=kubeadm join --token ' + s['token'] + ' --certificate-key ' + s['certificate key'])}")
    plant.append(f"iptables -A INPUT -m comment --comment {shlex.quote('password=' + s['password'])} -j ACCEPT")
    undo.append(f"iptables -D INPUT -m comment --comment {shlex.quote('password=' + s['password'])} -j ACCEPT")
    plant.append("systemctl daemon-reload && systemctl restart containerd")
    undo += ["systemctl daemon-reload && systemctl restart containerd kubelet", "rm -rf /root/cb-planted"]
    return " && ".join(plant), " ; ".join(undo)


def test_a_bundle_of_the_lab_holds_every_nodes_parts_and_not_one_planted_secret(prepared: Prepared,
                                                                                tmp_path: Path) -> None:
    lab = prepared.lab
    s = planted()
    plant, undo = plant_on_node(s)
    # crictl info on n1 (Debian ships no cri-tools: the lab's stand-in speaks the CRI), showing containerd's
    # registry credentials as the real one does.
    n1 = lab.node("n1")
    n1.ssh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-grpcio >/dev/null",
           timeout=600)
    n1.ssh("cat > /usr/local/bin/crictl && chmod 755 /usr/local/bin/crictl", input=CRICTL.read_text())
    # This machine: an inventory holding a become password (in a comment: the inventory refuses the variable
    # itself), a run's log, and an admin kubeconfig of an API that is down (the bundle must never carry the
    # kubeconfig, and must be made without the API).
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(lab.inventory_path.read_text() + f"\n# ansible_become_password={s['password']}\n")
    admin = cluster_dir(load_inventory(inventory)) / "admin.conf"
    admin.write_text(f"apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n"
                     f"contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
                     f"users:\n- name: u\n  user:\n    token: {s['jwt']}\n")
    run = runs_root() / "20261125-120000-000001-join"
    run.mkdir(parents=True)
    (run / "run.log").write_text(f"n2 failed: kubeadm join --token {s['token']} --certificate-key "
                                 f"{s['certificate key']}\n")
    for node in lab.nodes:
        node.ssh(plant)
    try:
        assert s["password"] in n1.ssh("crictl info").stdout
        out = tmp_path / "support.tar.gz"
        result = prepared.run("support-bundle", "-o", str(out), inventory=inventory)
        assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    finally:
        for node in lab.nodes:
            node.ssh(undo)
        admin.unlink()
    with tarfile.open(out) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                 for m in tar.getmembers()}
    leaks = {name: [kind for kind, value in s.items() if value in text] for name, text in files.items()}
    assert {name: kinds for name, kinds in leaks.items() if kinds} == {}
    for node in ("n1", "n2", "n3"):
        for part in ("journal/kubelet.txt", "journal/containerd.txt", "journal/ansible.txt", "containerd-config-dump.toml",
                     "ip-addr.txt", "ip-route.txt", "iptables.txt", "os-release.txt", "kernel.txt", "dmesg.txt",
                     "files/etc/kubernetes/kubeadm-config.yaml", "files/etc/kubernetes/kubelet.conf",
                     "files/etc/containerd/config.toml", "files/etc/apt/sources.list.d/cb-private.sources"):
            assert f"nodes/{node}/{part}" in files, (node, part)
        # Redacted where it stood, and still readable around it.
        assert "REDACTED" in files[f"nodes/{node}/journal/kubelet.txt"]
        assert 'username = "robot"' in files[f"nodes/{node}/containerd-config-dump.toml"]
    assert '"username": "robot"' in files["nodes/n1/crictl-info.json"]
    assert not [name for name in files if "admin.conf" in name]
    assert "api: not collected (the node-side parts are)" in files["MANIFEST.txt"]
    assert "FAIL cluster: api: the Kubernetes API does not answer" in " ".join(files["doctor.txt"].split())
    output = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert "limits: 1024 KiB per file" in output and "secrets redacted" in output
