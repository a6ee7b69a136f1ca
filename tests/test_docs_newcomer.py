"""Docs that disagreed with the tool (issue 34), each held to the tool: cluster.md's phase table is `up`'s phases,
every place that lists the add-ons lists all of them, offline.md's build command works as shown, the trainer's
README names the default image the versions table pins, the two GPU-cluster examples are one cluster, and
`LAB_WORKERS` means one thing. (preflight --help's platforms: tests/test_cli_startup.py.)"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import COMMANDS, app
from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.addons import ADDON_ORDER, ADDONS
from provision.inputs.platforms import Platform, platform_named
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.validation import load_cluster
from provision.inputs.workflows import UP_PHASES
from tests.support.keys import write_private_key
from tests.support.paths import REPO_ROOT


def test_clusters_phase_table_is_ups_phases_in_order() -> None:
    text = (REPO_ROOT / "docs" / "cluster.md").read_text()
    table = text.split("| phase | what it does | checked by |", 1)[1].split("\n\n", 1)[0]
    named = [name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split(" | ")[0])]
    assert named == list(UP_PHASES)


def test_every_list_of_the_addons_names_all_of_them() -> None:
    titles = [ADDONS[name].title for name in ADDON_ORDER]
    from provision.cli.commands.addons import ADDONS_SUMMARY

    for summary in (ADDONS_SUMMARY, COMMANDS["addons"].summary):
        assert all(title in summary for title in titles), summary
    readme = (REPO_ROOT / "README.md").read_text()
    line = next(line for line in readme.splitlines() if line.startswith("bootstrap addons list"))
    assert "Volcano, Kubeflow Training Operator, Trainer" not in line


def test_offline_mds_build_command_names_the_setting_a_rhel_platform_needs(tmp_path: Path) -> None:
    from provision.bundle.plan import node_plan

    text = (REPO_ROOT / "docs" / "offline.md").read_text()
    command = text.split("bootstrap bundle build --for ", 1)[1].split()[0]
    rocky = platform_named("rocky-9")
    assert command == "debian-12,rocky-9" and isinstance(rocky, Platform)
    with pytest.raises(InputError, match="mirrors.os_repo"):
        node_plan(rocky, Settings(), gpu=False)
    # With what offline.md says to set, it plans.
    assert "`mirrors: {os_repo: https://mirrors.aliyun.com}`" in text
    assert node_plan(rocky, parse_settings({"mirrors": {"os_repo": "https://mirrors.aliyun.com"}}), gpu=False).packages


def test_a_refused_bundle_build_creates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "bundle"
    outcome = CliRunner().invoke(app, ["bundle", "build", "--for", "debian-12,rocky-9", "-o", str(out)])
    assert isinstance(outcome.exception, InputError) and "mirrors.os_repo" in str(outcome.exception)
    assert not out.exists()


def test_the_trainers_readme_names_the_default_smoke_image() -> None:
    text = " ".join((REPO_ROOT / "trainer" / "README.md").read_text().split())
    default = versions.SMOKE_IMAGES[0]
    assert default.image == versions.SMOKE_IMAGE_DEFAULT
    assert f"default image, {default.image}, has {default.torch}" in text
    assert "2.5.1" not in text


def test_the_two_gpu_cluster_examples_are_one_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_private_key(tmp_path / ".ssh" / "id_ed25519")
    monkeypatch.setenv("HOME", str(tmp_path))

    def described(name: str) -> list[tuple[object, ...]]:
        cluster, _ = load_cluster(REPO_ROOT / "inventory" / name, None)
        return [(n.name, n.role, n.address, n.user, n.port, n.gpu, n.key_file) for n in cluster.nodes]

    assert described("gpu-cluster.yml") == described("gpu-cluster-centos.ini")


def test_lab_workers_means_the_labs_worker_machines_only() -> None:
    dev = (REPO_ROOT / "dev.sh").read_text()
    assert "LAB_WORKERS" not in dev.replace("LAB_TEST_WORKERS", "")
    readme = (REPO_ROOT / "README.md").read_text()
    assert "`LAB_TEST_WORKERS` (default 4) test files" in readme
    lab = (REPO_ROOT / "docs" / "lab.md").read_text()
    assert "| `workers` | `LAB_WORKERS` |" in lab
