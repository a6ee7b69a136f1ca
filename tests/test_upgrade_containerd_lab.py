"""`bootstrap upgrade --to 1.36` of a cluster whose nodes run containerd 1.x (Kubernetes 1.35 was the last minor
for containerd 1.x: the v1.35 release blog; the kubelet of 1.36 refuses it), on real lab nodes over SSH: containerd
moves to 2.x in the same run, from the node's own source, under drain, before its kubelet.

Real here: containerd itself (Docker's containerd.io layout around Debian's real containerd: bookworm's 1.6 first,
then sid's 2.x published beside it, as Docker's repository keeps every release: tests/lab/repos.py), prepare
installing and configuring the 1.x (configuration version 2) and the upgrade installing the 2.x, writing version 3
and restarting it; apt, the plays, the drains through the API. Kubernetes is the lab's stand-ins
(tests/lab/kube_acting.py): the stand-in kubelet does not use containerd, so what a real kubelet 1.36 does on it is
not shown (docs/upgrade.md).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.lab.cluster import KubeLab, form_cluster, push_tree
from tests.lab.lab import Lab
from tests.lab.repos import OFFLINE_DIR, build_docker_apt_repo


@pytest.fixture(scope="module")
def kube(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = lab_factory(2)
    work = tmp_path_factory.mktemp("containerd")
    kube = form_cluster(lab, work, ("n1",), ("n2",), upgrade={"drain_timeout_s": 10})
    try:
        yield kube
    finally:
        kube.fake.server.stop()


def containerd(kube: KubeLab, name: str) -> dict[str, str]:
    node = kube.lab.node(name)
    return {"version": node.ssh("containerd --version").stdout.split()[2],
            "package": node.ssh("dpkg-query -W -f '${Version}' containerd.io").stdout,
            "config": node.ssh("sed -n 's/^version = //p' /etc/containerd/config.toml").stdout.strip(),
            "active": node.ssh("systemctl is-active containerd", check=False).stdout.strip(),
            "since": node.ssh("systemctl show -p ActiveEnterTimestamp --timestamp=unix containerd").stdout.strip()
                         .removeprefix("ActiveEnterTimestamp=@")}


def test_a_cluster_on_containerd_1_moves_to_2_under_drain_before_each_kubelet(kube: KubeLab,
                                                                             tmp_path: Path) -> None:
    # Docker's repository holds containerd.io 1.6 and 2.x; the nodes were prepared while the operator kept 1.6 (an
    # apt pin, since removed), as a cluster prepared before containerd 2 was published would be.
    docker = f"file://{OFFLINE_DIR}/docker"
    kube.settings(mirrors={"docker_repo": docker})
    push_tree(kube.lab, build_docker_apt_repo(tmp_path, containerd_suites=("bookworm", "sid")).parent, kube.nodes)
    pin = "/etc/apt/preferences.d/containerd-1"
    kube.run_everywhere(f"printf 'Package: containerd.io\\nPin: version 1.6.*\\nPin-Priority: 1001\\n' > {pin}")
    prepared = kube.bootstrap("up", "--only", "prepare")
    kube.run_everywhere(f"rm -f {pin}")
    assert prepared.code == 0, prepared.stderr
    for name in kube.nodes:
        found = containerd(kube, name)
        assert found["version"].startswith("1.6.") and found["config"] == "2" and found["active"] == "active", found

    # The plan says which nodes move, and preflight lets them.
    planned = kube.bootstrap("upgrade", "--to", "1.36", "--dry-run", "-o", "json")
    assert planned.code == 0, planned.stderr
    steps = json.loads(planned.stdout)["plan"]["steps"]
    assert [s.get("containerd") for s in steps] == [{n: containerd(kube, n)["version"].split("~")[0]
                                                     for n in kube.nodes}]

    started = time.time()
    outcome = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert outcome.code == 0, outcome.stderr
    for name in kube.nodes:
        found = containerd(kube, name)
        assert found["version"].startswith("2.") and found["package"].startswith("2.") and found["config"] == "3" \
            and found["active"] == "active", found
        # Under drain: containerd restarted on 2.x after the node's cordon and before its kubelet moved.
        cordoned = next(at for at, action in kube.fake.actions() if action == f"cordon {name}" and at >= started)
        uncordoned = next(at for at, action in kube.fake.actions() if action == f"uncordon {name}" and at >= started)
        kubelet = next(c.start for c in kube.calls([name]) if c.tool == "kubelet" and c.start >= started)
        assert cordoned < float(found["since"]) < kubelet < uncordoned, (name, found, cordoned, kubelet)
        assert kube.running_kubelet(name) == "v1.36.4"

    # Once more: nothing to do, containerd untouched.
    before = {name: containerd(kube, name)["since"] for name in kube.nodes}
    again = kube.bootstrap("upgrade", "--to", "1.36", "--yes", "--skip-etcd-snapshot")
    assert again.code == 0 and "nothing to upgrade" in again.stdout
    assert {name: containerd(kube, name)["since"] for name in kube.nodes} == before
