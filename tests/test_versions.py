"""The versions table (provision/inputs/versions.py) is the one place a version is chosen: the settings' defaults,
their validation, `bootstrap config show` and the docs' tables come from it, and every choice it makes holds
together (each supported minor has its pause image, Calico and containerd minimum; each GPU generation a driver
branch and an image). Bad combinations are refused by `config validate`, in one line naming the field and the
fix, before any node is touched."""
from __future__ import annotations

import itertools
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.inputs import versions as v
from provision.inputs.settings import Settings, parse_settings
from tests.support import versions_doc
from tests.support.paths import REPO_ROOT

SETTINGS_DOC = REPO_ROOT / "docs" / "settings.md"
HOSTS = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"


def bootstrap(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True, timeout=60)


def validate(tmp_path: Path, settings: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hosts.ini").write_text(HOSTS)
    (tmp_path / "cluster.yaml").write_text(settings)
    return bootstrap("config", "validate", "-i", str(tmp_path / "hosts.ini"), "-c", str(tmp_path / "cluster.yaml"))


# --- the docs and `config show` come from the table -----------------------------------------------------------

def test_the_docs_say_when_the_table_was_checked() -> None:
    text = SETTINGS_DOC.read_text()
    day = v.CHECKED_ON.isoformat()
    assert f"## Versions chosen on {day}\n" in text and f"was checked on {day} against" in text
    assert f"(#versions-chosen-on-{day})" in text


@pytest.mark.parametrize("name", sorted(versions_doc.BLOCKS))
def test_the_docs_version_tables_are_the_versions_table(name: str) -> None:
    block = versions_doc.block_re(name).search(SETTINGS_DOC.read_text())
    assert block, f"docs/settings.md has no <!-- versions:{name} --> block"
    assert block.group(2) == versions_doc.BLOCKS[name](), "run `python -m tests.support.versions_doc`"


@pytest.mark.parametrize("key", ["kubernetes.version", "calico.version", "gpu.driver_branch",
                                 "gpu.container_toolkit_version", "gpu.device_plugin_version", "smoke_test.image"])
def test_the_settings_reference_shows_each_versioned_default(key: str) -> None:
    section, field = key.split(".")
    default = getattr(getattr(Settings(), section), field)
    row = re.search(rf"^\| `{re.escape(key)}` \| ([^|]+) \|", SETTINGS_DOC.read_text(), re.MULTILINE)
    assert row and row.group(1).strip().strip("`").strip('"') == default


def test_config_show_prints_the_new_defaults() -> None:
    result = bootstrap("config", "show")
    assert result.returncode == 0, result.stderr
    shown = yaml.safe_load(result.stdout)
    assert shown["kubernetes"]["version"] == "1.36" and shown["kubelet"]["allow_cgroup_v1"] is False
    assert shown["calico"]["version"] == "v3.33.0"
    assert shown["gpu"].items() >= {"driver_branch": "580", "container_toolkit_version": "1.20.0",
                                    "device_plugin_version": "v0.20.1"}.items()
    assert shown["smoke_test"]["image"] == "docker.io/pytorch/pytorch:2.14.1-cuda13.0-cudnn9-runtime"
    resolved = shown["resolved_versions"]
    assert resolved["kubeadm_api"] == "kubeadm.k8s.io/v1beta4"
    assert resolved["sandbox_image"] == "registry.k8s.io/pause:3.10.2"
    assert resolved["smoke_image_per_generation"]["Pascal"] == "docker.io/pytorch/pytorch:2.14.1-cuda12.6-cudnn9-runtime"
    assert resolved["smoke_image_per_generation"]["Hopper"] == shown["smoke_test"]["image"]


# --- the table holds together -------------------------------------------------------------------------------

def test_every_default_is_inside_its_supported_range() -> None:
    defaults = Settings()
    assert defaults.kubernetes.minor_number in v.supported_minors()
    assert v.kubernetes_minor_problem(defaults.kubernetes.minor_number) is None
    assert v.parse_version(defaults.gpu.container_toolkit_version) >= v.CONTAINER_TOOLKIT_MINIMUM
    assert v.parse_version(defaults.gpu.device_plugin_version) >= v.DEVICE_PLUGIN_MINIMUM
    assert v.DRIVER_BRANCHES[defaults.gpu.driver_branch].supported


@pytest.mark.parametrize("release", v.KUBERNETES_RELEASES, ids=lambda r: r.name)
def test_each_supported_minor_has_its_choices(release: v.KubernetesRelease) -> None:
    assert v.calico_problem(release.calico, release.minor) is None
    assert release.latest_patch.startswith(release.name + ".")
    assert release.end_of_life > v.CHECKED_ON, "a supported minor past its end of life: move it to END_OF_LIFE"
    assert re.fullmatch(r"3\.10(\.\d+)?", release.pause)
    # containerd 1.x: kubeadm 1.35 warns, 1.36 and later do not run on it.
    assert v.containerd_verdict(release.minor, (1, 7, 24)).status == ("warn" if release.minor == 35 else "refuse")
    assert v.containerd_verdict(release.minor, (2, 1, 9)).status == "ok"


def test_pci_device_id_ranges_never_overlap_and_known_gpus_are_placed() -> None:
    ranges = sorted((low, high, g.name) for g in v.GPU_GENERATIONS for low, high in g.device_ids)
    for (_, high, name), (low, _, other) in itertools.pairwise(ranges):
        assert high < low, f"{name} and {other} overlap"
    known = {0x102D: "Kepler", 0x13F2: "Maxwell", 0x1B80: "Pascal", 0x15F8: "Pascal", 0x1DB4: "Volta",
             0x1EB8: "Turing", 0x20B0: "Ampere", 0x2330: "Hopper", 0x2684: "Ada", 0x2901: "Blackwell"}
    assert {hex(i): v.gpu_generation(i).name for i in known} == {hex(i): n for i, n in known.items()}  # type: ignore[union-attr]
    assert v.gpu_generation(0x0001) is None


@pytest.mark.parametrize("generation", v.GPU_GENERATIONS, ids=lambda g: g.name)
def test_each_gpu_generation_has_a_driver_and_an_image_that_fit(generation: v.GpuGeneration) -> None:
    branch = str(generation.oldest_branch)
    assert v.driver_problem(generation, branch) is None
    image = v.smoke_image_for([generation.name])
    if generation.cuda_major < 12:
        assert image is None  # Kepler: no PyTorch image of ours runs there
        return
    assert image is not None
    cuda = v.image_cuda_major(image)
    assert cuda is not None and cuda <= generation.cuda_major and v.cuda_problem(cuda, branch) is None
    # Turing and newer take the CUDA 13 default; older ones the last CUDA 12.6 build.
    assert (image == v.SMOKE_IMAGE_DEFAULT) == generation.open_module


def test_a_mixed_cluster_runs_the_image_its_oldest_gpu_can() -> None:
    assert v.smoke_image_for(["Hopper", "Volta"]) == "docker.io/pytorch/pytorch:2.14.1-cuda12.6-cudnn9-runtime"
    assert v.smoke_image_for(["Hopper", "Ampere"]) == v.SMOKE_IMAGE_DEFAULT
    assert v.module_flavour([v.gpu_generation(0x2330), v.gpu_generation(0x1DB4)]) == "proprietary"  # type: ignore[list-item]
    assert v.module_flavour([v.gpu_generation(0x2330)]) == "open"  # type: ignore[list-item]


@pytest.mark.parametrize(("generation", "branch", "words"), [
    ("Volta", "595", ["Volta GPUs end with driver 580", "proprietary", "gpu.driver_branch: '580'"]),
    ("Kepler", "580", ["Kepler GPUs are driven only by driver 470", "gpu.driver_branch: '470'", "gpu=false"]),
    ("Hopper", "470", ["Hopper GPUs need driver 580 or newer", "gpu.driver_branch: '580'"]),
])
def test_a_driver_branch_that_cannot_drive_a_generation_is_named_with_the_fix(generation: str, branch: str,
                                                                             words: list[str]) -> None:
    problem = v.driver_problem(v.GPU_GENERATIONS[v.generation_index(generation)], branch)
    assert problem is not None
    for word in words:
        assert word in problem


@pytest.mark.parametrize(("version", "expected"), [("1.7.24~ds1-6", (1, 7, 24)), ("v2.1.9", (2, 1, 9)),
                                                   ("2.2.1-1~ubuntu.24.04~noble", (2, 2, 1)), ("", ())])
def test_versions_read_from_packages(version: str, expected: tuple[int, ...]) -> None:
    assert v.parse_version(version) == expected


# --- refusals by `config validate`, before any node is touched ------------------------------------------------

@pytest.mark.parametrize(("settings", "words"), [
    ("kubernetes:\n  version: '1.31'\n", ["kubernetes.version", "1.31 is past its end of life (2025-11-11)",
                                          "choose 1.35, 1.36 or 1.37"]),
    ("kubernetes:\n  version: '1.34.2'\n", ["1.34.2 is past its end of life (2026-10-27)"]),
    ("kubernetes:\n  version: '1.38'\n", ["1.38 is newer than any release", "kubernetes.allow_untested_versions: true"]),
    ("calico:\n  version: v3.31.7\n", ["calico.version", "3.31 was tested with Kubernetes 1.32-1.35, not 1.36",
                                       "use v3.33.0"]),
    ("calico:\n  version: v3.28.2\n", ["Calico v3.28.2 is not in the versions table"]),
    ("gpu:\n  driver_branch: '565'\n", ["gpu.driver_branch", "'565' is not in the versions table", "580"]),
    ("gpu:\n  driver_branch: '535'\n", ["'535' is past its end of life (2026-06)"]),
    ("gpu:\n  container_toolkit_version: 1.17.3\n", ["gpu.container_toolkit_version", "older than 1.19.0", "1.20.0"]),
    ("gpu:\n  device_plugin_version: v0.14.0\n", ["gpu.device_plugin_version", "use v0.20.1"]),
    ("gpu:\n  driver_branch: '470'\n", ["smoke_test.image", "CUDA 13 needs driver 580 or newer",
                                        "a CUDA 11 image"]),
    ("smoke_test:\n  image: docker.io/pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime\ngpu:\n  driver_branch: '470'\n",
     ["CUDA 12 needs driver 525 or newer, and gpu.driver_branch is 470"]),
], ids=["eol-1.31", "eol-pinned-patch", "untested-1.38", "calico-range", "calico-unknown", "branch-unknown",
        "branch-eol", "toolkit-old", "plugin-old", "cuda13-on-470", "cuda12-on-470"])
def test_version_choices_that_cannot_work_are_refused_by_config_validate(tmp_path: Path, settings: str,
                                                                          words: list[str]) -> None:
    result = validate(tmp_path, settings)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    for word in words:
        assert word in lines[0]


@pytest.mark.parametrize("settings", [
    "kubernetes:\n  version: '1.35'\n",
    "kubernetes:\n  version: '1.37.1'\n",
    "kubernetes:\n  version: '1.35'\ncalico:\n  version: v3.31.7\n",
    "gpu:\n  driver_branch: '595'\n",
    "gpu:\n  driver_branch: '470'\nsmoke_test:\n  image: docker.io/pytorch/pytorch:1.12.1-cuda11.3-cudnn8-runtime\n",
], ids=["1.35", "1.37-pinned", "calico-3.31-on-1.35", "branch-595", "kepler-with-cuda11"])
def test_working_choices_pass(tmp_path: Path, settings: str) -> None:
    result = validate(tmp_path, settings)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr


def test_an_untested_minor_passes_when_allowed_and_is_warned_about(tmp_path: Path) -> None:
    result = validate(tmp_path, "kubernetes:\n  version: '1.38'\n  allow_untested_versions: true\n")
    assert result.returncode == 0, result.stderr
    assert "warning: Kubernetes 1.38 is newer than the versions table" in " ".join(result.stderr.split())
    settings = parse_settings({"kubernetes": {"version": "1.38", "allow_untested_versions": True}})
    assert settings.calico.version == v.KUBERNETES_RELEASES[-1].calico


def test_ipvs_is_warned_about_as_deprecated(tmp_path: Path) -> None:
    result = validate(tmp_path, "kubernetes:\n  kube_proxy_mode: ipvs\n")
    assert result.returncode == 0, result.stderr
    assert "ipvs is deprecated since Kubernetes 1.35" in " ".join(result.stderr.split())


def test_accepting_cgroup_v1_is_warned_about_by_every_command_that_loads_the_settings(tmp_path: Path) -> None:
    result = validate(tmp_path, "kubelet:\n  allow_cgroup_v1: true\n")
    assert result.returncode == 0, result.stderr
    assert "warning: kubelet.allow_cgroup_v1 is true: Kubernetes 1.36 no longer supports cgroup v1 hosts" in \
        " ".join(result.stderr.split())
