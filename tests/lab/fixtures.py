"""pytest fixtures for real lab nodes: `lab_factory` (labs of N nodes, of any flavour), `lab3` (one shared
3-node bookworm lab), `etcd_cluster` (three control planes running a real etcd, shared by the etcd tests) and
`rpm_tree` (the signed RPM repositories RHEL-shaped labs use, built once a run).

Every lab made here is torn down at the end of the session. Tests that change a node in a way later tests
would notice (hostname, listeners, fstab) should take their own lab from `lab_factory` or undo the change.

Under pytest-xdist (./dev.sh runs the lab tests with `-n N --dist loadfile`) each worker is a session of its
own: it has its own `lab3` (each lab takes its own slot) and tears its labs down when it ends; `rpm_tree` is
built once for all the workers of a run, under a file lock, and removed when the run ends (tests/conftest.py).
The lab's base images are built once per machine under a lock of their own (tests/lab/lab.py).
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.lab.etcd import EtcdCluster, LabEtcd, cluster_config, control_plane_inventory
from tests.lab.lab import Lab, unavailable_reason
from tests.lab.repos import RPM_TOOLS, RpmTree, build_rpm_tree

LAB_FIXTURES = ("lab_factory", "lab3", "rpm_tree", "etcd_cluster")
# Test files that share one session-scoped lab: under pytest-xdist's `--dist loadfile` each file goes to a worker
# of its own, and each worker would build its own lab; these go to one worker together (shared_lab_scheduler),
# so they build it once. Each test leaves the shared lab as it found it (healthy), in any order.
SHARED_LAB_FILES = {
    "tests/test_etcd_snapshot_lab.py": "etcd_cluster",
    "tests/test_etcd_restore_lab.py": "etcd_cluster",
    "tests/test_etcd_recovery_lab.py": "etcd_cluster",
}


def shared_lab_scheduler(config: pytest.Config, log: object) -> object | None:
    """`--dist loadfile`, except that the files of SHARED_LAB_FILES with the same lab are one unit of work."""
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SharedLabScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return f"shared-lab:{SHARED_LAB_FILES[path]}" if path in SHARED_LAB_FILES else path

    return SharedLabScheduling(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def lab_factory() -> Iterator[Callable[..., Lab]]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"lab tests skipped: {reason}")
    labs: list[Lab] = []

    def make(n: int = 3, **kwargs: object) -> Lab:
        lab = Lab.up(n, **kwargs)  # type: ignore[arg-type]
        labs.append(lab)
        return lab

    try:
        yield make
    finally:
        for lab in labs:
            lab.down()


@pytest.fixture(scope="session")
def lab3(lab_factory: Callable[..., Lab]) -> Lab:
    return lab_factory(3)


def xdist_worker() -> bool:
    """Whether this session is one of several pytest-xdist workers of one run."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER"))


def run_shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder every session of this run shares: the run's base temporary folder, above each worker's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if xdist_worker() else base


@pytest.fixture(scope="session")
def etcd_cluster(lab_factory: Callable[..., Lab], tmp_path_factory: pytest.TempPathFactory) -> EtcdCluster:
    """Three nodes, each a control plane running a real etcd member (tests/lab/etcd.py), shared by the etcd tests
    of the session: each test leaves it with three healthy members."""
    lab = lab_factory(3)
    etcd = LabEtcd.up(lab)
    work = tmp_path_factory.mktemp("etcd-cluster")
    return EtcdCluster(lab, etcd, control_plane_inventory(lab, work / "hosts.ini"),
                       cluster_config(lab, work / "cluster.yaml", snapshot_keep=2), work / "state")


@pytest.fixture(scope="session")
def rpm_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RpmTree]:
    """Pass it to every RHEL-shaped lab (`lab_factory(1, flavour="rocky9", rpm_tree=rpm_tree)`): one build,
    one key, for the whole run (every xdist worker's labs share it); removed at its end (about 150 MB)."""
    missing = [tool for tool in RPM_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"the lab's RPM repositories need {', '.join(missing)} (apt-get install rpm createrepo-c)")
    shared = run_shared_dir(tmp_path_factory) / RPM_TREE_DIR
    shared.mkdir(exist_ok=True)
    built = shared / "tree.json"
    with (shared / "lock").open("w") as lock:
        # The first worker to need the tree builds it; the others wait here for it, then read what it built.
        fcntl.flock(lock, fcntl.LOCK_EX)
        if built.exists():
            fields = json.loads(built.read_text())
            tree = RpmTree(root=Path(fields["root"]), key=Path(fields["key"]), kube_minor=fields["kube_minor"],
                           releasevers=tuple(fields["releasevers"]))
        else:
            tree = build_rpm_tree(shared / "offline")
            built.write_text(json.dumps({"root": str(tree.root), "key": str(tree.key), "kube_minor": tree.kube_minor,
                                         "releasevers": list(tree.releasevers)}))
    try:
        yield tree
    finally:
        if not xdist_worker():
            remove_rpm_tree(tmp_path_factory)


RPM_TREE_DIR = "rpm-tree"


def remove_rpm_tree(tmp_path_factory: pytest.TempPathFactory) -> None:
    """At the end of a run (of its last session: the xdist controller, or the only session)."""
    shutil.rmtree(tmp_path_factory.getbasetemp() / RPM_TREE_DIR, ignore_errors=True)


def mark_lab_tests(items: list[pytest.Item]) -> None:
    """Tests that use a lab fixture carry the `lab` marker, so `-m 'not lab'` leaves them out."""
    for item in items:
        if any(name in getattr(item, "fixturenames", ()) for name in LAB_FIXTURES):
            item.add_marker(pytest.mark.lab)
