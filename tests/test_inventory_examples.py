"""The example inventories in inventory/ are valid, so users can start from them."""
from __future__ import annotations

from pathlib import Path

import pytest

from provision.inputs.validation import load_cluster
from tests.support.keys import write_private_key
from tests.support.paths import REPO_ROOT as PROJECT_ROOT

EXAMPLES = sorted((PROJECT_ROOT / "inventory").glob("*.ini")) + sorted((PROJECT_ROOT / "inventory").glob("*.yml"))


@pytest.fixture
def home_with_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    write_private_key(tmp_path / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_inventory_is_valid(example: Path, home_with_key: Path) -> None:
    if example.name == "vagrant-lab.ini":
        pytest.skip("its key files exist only after `bootstrap lab up`")
    cluster, _settings = load_cluster(example, PROJECT_ROOT / "inventory" / "cluster.example.yaml")
    assert len(cluster.nodes) >= 1
    assert all(node.key_file in (None, home_with_key / ".ssh" / "id_ed25519") for node in cluster.nodes)


def test_example_gpu_cluster_has_one_control_plane_and_two_gpu_workers(home_with_key: Path) -> None:
    cluster, _ = load_cluster(PROJECT_ROOT / "inventory" / "gpu-cluster-centos.ini", None)
    assert cluster.control_plane.gpu == "false"
    assert [(w.name, w.gpu) for w in cluster.workers] == [("gpu-node-1", "true"), ("gpu-node-2", "true")]
