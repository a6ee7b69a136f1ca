"""The offline bundle without a network: what it must hold (read from the roles), its signed manifest, the names
`bundle verify` gives each problem, and `up` (through the CLI) refusing a bundle before any node is touched.

Builds from real upstreams (Debian's archive) and stand-ins are tests/test_bundle_build.py; a cluster prepared from
one with no route out is tests/test_bundle_lab.py.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import yaml

from provision.bundle.check import check_offline_bundle, missing_for
from provision.bundle.images import bundle_path, source_of
from provision.bundle.manifest import (
    MANIFEST,
    PUBLIC_KEY,
    SIGNATURE,
    Contents,
    ensure_key,
    export_public,
    verify_directory,
    write_manifest,
)
from provision.bundle.plan import node_plan
from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.inventory import load_inventory
from provision.inputs.platforms import PLATFORMS, Platform, bundle_key, platform_named
from provision.inputs.settings import parse_settings
from provision.render.images import kubeadm_images, manifest_images, own_images, pulled_from
from provision.render.playbook_vars import sandbox_image
from tests.support.refusal import assert_refused, run_main

pytestmark = pytest.mark.skipif(shutil.which("gpg") is None or shutil.which("gpgv") is None,
                                reason="signing needs gpg and gpgv")

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"


def contents(**changes: object) -> Contents:
    settings = parse_settings({})
    images = own_images(settings, gpu=True)
    base = Contents(platforms=("debian-12", "rocky-9"), gpu=True, kubernetes_minor="1.36", kubernetes_version="1.36.4",
                    calico=settings.calico.version, addons={"volcano": "v1.15.2"},
                    images={image: bundle_path(settings, image) for image in images}, cifar10=True)
    return Contents(**(base.as_dict() | changes))  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def key_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("key") / "gnupg"
    ensure_key(home)
    return home


def make_bundle(root: Path, key_home: Path, held: Contents | None = None) -> Path:
    """A small bundle: a few files in the offline layout, its manifest, signature and key."""
    for name, text in {"kubernetes/v1.36/deb/InRelease": "signed index\n", "os/debian/pool/main/c/chrony.deb": "deb\n",
                       "registry/docker/registry/v2/blobs/sha256/ab/abcd/data": "layer\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    write_manifest(root, held or contents(), key_home)
    return root


# --- what a bundle holds: the roles' own lists ------------------------------------------------------------------

def test_a_debian_node_plan_is_what_prepare_installs_from_the_repositories_the_roles_write() -> None:
    plan = node_plan(platform_named("debian-12"), parse_settings({}), gpu=False)  # type: ignore[arg-type]
    assert {"chrony", "conntrack", "containerd.io", "kubeadm", "kubelet", "kubectl"} <= set(plan.packages)
    layout = {r.path: r for r in plan.repositories}
    # docs/offline.md's layout: the distribution archive under os/, Docker's, the Kubernetes minor's flat repository.
    assert set(layout) == {"os/debian", "os/debian-security", "docker/debian", "kubernetes/v1.36/deb"}
    assert layout["os/debian"].url == "http://deb.debian.org/debian"
    assert layout["os/debian"].suites == ("bookworm", "bookworm-updates")
    assert layout["kubernetes/v1.36/deb"].url == "https://pkgs.k8s.io/core:/stable:/v1.36/deb"
    assert layout["docker/debian"].keys == (("https://download.docker.com/linux/debian/gpg", "docker/debian/gpg"),)


def test_a_gpu_bundle_carries_both_driver_flavours_and_the_archives_kernel_headers() -> None:
    plan = node_plan(platform_named("debian-12"), parse_settings({}), gpu=True)  # type: ignore[arg-type]
    assert {"nvidia-open-580", "cuda-drivers-580", "linux-headers-amd64"} <= set(plan.packages)
    assert "nvidia-container-toolkit=1.20.0-1" in plan.packages
    assert "nvidia-cuda/debian12/x86_64" in {r.path for r in plan.repositories}
    rocky = node_plan(platform_named("rocky-9"), parse_settings({"mirrors": {"os_repo": "https://m.example.com"}}),  # type: ignore[arg-type]
                      gpu=True)
    assert {"@nvidia-driver:580-open", "@nvidia-driver:580-dkms", "kernel-devel", "epel-release"} <= set(rocky.packages)
    assert {r.path for r in rocky.repositories} >= {"os/rockylinux/9/BaseOS/x86_64/os", "os/rockylinux/9/extras/x86_64/os",
                                                    "docker/rhel/9/x86_64/stable", "nvidia-cuda/rhel9/x86_64"}


def test_the_kubernetes_release_and_containerd_choice_follow_the_settings() -> None:
    plan = node_plan(platform_named("debian-12"),  # type: ignore[arg-type]
                     parse_settings({"kubernetes": {"version": "1.35.2"},
                                     "container_runtime": {"containerd_source": "distribution", "install_docker": False}}),
                     gpu=False)
    assert "kubeadm=1.35.2-*" in plan.packages and "containerd" in plan.packages
    assert "containerd.io" not in plan.packages
    assert not any(r.path.startswith("docker/") for r in plan.repositories)


@pytest.mark.parametrize(("key", "settings", "says"), [
    ("rocky-9", {}, "mirrors.os_repo"),
    ("rhel-9", {}, "subscription-manager"),
])
def test_a_platform_whose_packages_cannot_be_found_is_refused_by_name(key: str, settings: dict[str, object],
                                                                      says: str) -> None:
    with pytest.raises(InputError, match=says):
        node_plan(platform_named(key), parse_settings(settings), gpu=False)  # type: ignore[arg-type]


def test_every_platform_has_a_key_that_names_it_back() -> None:
    for row in PLATFORMS:
        if isinstance(row, Platform):
            assert platform_named(bundle_key(row)) == row


# --- images: one list for the offline rewrite and the bundle -----------------------------------------------------

def test_the_run_images_move_where_the_offline_rewrite_sends_them() -> None:
    settings = parse_settings({"offline": {"source": "http://hub.lab:8080", "image_repository": "hub.lab:5000"}})
    images = own_images(settings, gpu=True)
    release = versions.kubernetes_release(settings.kubernetes.minor_number)
    assert f"registry.k8s.io/pause:{release.pause}" in images
    assert f"nvcr.io/nvidia/k8s-device-plugin:{versions.DEVICE_PLUGIN_DEFAULT}" in images
    assert {versions.KUBE_VIP_IMAGE, versions.API_PROXY_IMAGE, settings.verify.dns_probe_image} <= set(images)
    assert {image.image for image in versions.SMOKE_IMAGES} <= set(images)
    assert all(":" in image.rsplit("/", 1)[-1] for image in images), images
    # Where the nodes pull each from is the bundle's path under the offline registry: the pause image containerd
    # pins included.
    for image, pulled in pulled_from(settings, images).items():
        assert pulled == f"hub.lab:5000/{bundle_path(settings, image)}"
    assert sandbox_image(settings) == f"hub.lab:5000/{bundle_path(settings, f'registry.k8s.io/pause:{release.pause}')}"


def test_kubeadm_answers_are_read_as_images_and_anything_else_is_refused() -> None:
    assert kubeadm_images("registry.k8s.io/kube-apiserver:v1.36.4\nregistry.k8s.io/etcd:3.6.5-0\n") == [
        "registry.k8s.io/kube-apiserver:v1.36.4", "registry.k8s.io/etcd:3.6.5-0"]
    for bad in ("", "kubeadm placeholder v1.36.0", "registry.k8s.io/kube-apiserver:v1.36.4\nerror: oops"):
        with pytest.raises(ValueError):
            kubeadm_images(bad)


def test_a_manifests_images_are_found_in_every_pod_template() -> None:
    text = yaml.safe_dump_all([
        {"kind": "Deployment", "spec": {"template": {"spec": {"initContainers": [{"image": "a/init:1"}],
                                                              "containers": [{"image": "a/main:1"}]}}}},
        {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [
            {"image": "a/main:1"}, {"image": "b/job:2"}]}}}}}},
        {"kind": "ConfigMap", "data": {"image": "not/this:1"}}])
    assert sorted(manifest_images(text)) == ["a/init:1", "a/main:1", "b/job:2"]


def test_the_build_pulls_through_the_mirror_the_settings_name() -> None:
    settings = parse_settings({"container_runtime": {"registry_mirrors": {"quay.io": ["http://127.0.0.1:5001"]}}})
    assert source_of(settings, "quay.io/calico/node:v3.33.0") == ("127.0.0.1:5001/calico/node:v3.33.0", False)
    assert source_of(settings, "busybox:1.36") == ("registry-1.docker.io/library/busybox:1.36", True)
    assert bundle_path(settings, "docker.io/library/busybox:1.36") == "library/busybox:1.36"
    # A mirror known not to carry the image (DaoCloud's allow list) is passed over for the next, then upstream.
    cn = parse_settings({"container_runtime": {"registry_mirrors": {"ghcr.io": [
        "https://ghcr.m.daocloud.io", "https://ghcr.nju.edu.cn"]}}})
    assert source_of(cn, "ghcr.io/chrislusf/seaweedfs:4.34") == ("ghcr.nju.edu.cn/chrislusf/seaweedfs:4.34", True)
    assert source_of(cn, "ghcr.io/kubeflow/kfp-driver:2.17.0") == ("ghcr.m.daocloud.io/kubeflow/kfp-driver:2.17.0", True)


# --- the manifest and `bundle verify` ----------------------------------------------------------------------------

def test_a_bundle_verifies_and_says_who_signed_it(tmp_path: Path, key_home: Path) -> None:
    root = make_bundle(tmp_path / "b", key_home)
    verdict = verify_directory(root)
    assert verdict.ok, verdict.problems
    assert verdict.fingerprint == ensure_key(key_home) and not verdict.key_trusted
    document = json.loads((root / MANIFEST).read_text())
    assert document["files"]["os/debian/pool/main/c/chrony.deb"] == {
        "size": 4, "sha256": hashlib.sha256(b"deb\n").hexdigest()}
    assert set(document["files"]) == {"kubernetes/v1.36/deb/InRelease", "os/debian/pool/main/c/chrony.deb",
                                      "registry/docker/registry/v2/blobs/sha256/ab/abcd/data"}
    assert verify_directory(root, fingerprint=verdict.fingerprint).key_trusted
    assert verify_directory(root, trusted_key=export_public(key_home, verdict.fingerprint or "")).ok


@pytest.mark.parametrize(("harm", "named"), [
    (lambda root: (root / "os/debian/pool/main/c/chrony.deb").write_text("evil\n"),
     "changed: os/debian/pool/main/c/chrony.deb"),
    (lambda root: (root / "kubernetes/v1.36/deb/InRelease").unlink(), "missing: kubernetes/v1.36/deb/InRelease"),
    (lambda root: (root / "os/debian/pool/main/e/evil.deb").parent.mkdir() or (
        root / "os/debian/pool/main/e/evil.deb").write_text("x"), "extra: os/debian/pool/main/e/evil.deb"),
    (lambda root: (root / MANIFEST).write_text((root / MANIFEST).read_text().replace('"gpu": true', '"gpu": false')),
     "bad signature"),
    (lambda root: (root / SIGNATURE).unlink(), "bad signature"),
], ids=["changed", "missing", "extra", "manifest-edited", "signature-removed"])
def test_verify_names_each_problem(tmp_path: Path, key_home: Path, harm: object, named: str) -> None:
    root = make_bundle(tmp_path / "b", key_home)
    harm(root)  # type: ignore[operator]
    verdict = verify_directory(root)
    assert any(problem.startswith(named) for problem in verdict.problems), verdict.problems
    outcome = run_main("bundle", "verify", str(root))
    assert outcome.code == 2 and named in outcome.stdout + outcome.stderr


def test_a_bundle_resigned_by_another_key_is_refused_where_the_key_is_pinned(tmp_path: Path, key_home: Path) -> None:
    root = make_bundle(tmp_path / "b", key_home)
    mine = ensure_key(key_home)
    other = tmp_path / "other"
    write_manifest(root, contents(), other)  # someone else rebuilds the manifest and signs it
    assert verify_directory(root).ok  # against the key it carries, it is consistent
    pinned = verify_directory(root, fingerprint=mine)
    assert [p for p in pinned.problems if p.startswith("bad signature: signed by")], pinned.problems
    given = verify_directory(root, trusted_key=export_public(key_home, mine))
    assert any(p.startswith("bad signature") for p in given.problems)
    (root / PUBLIC_KEY).unlink()
    assert any("bad signature" in p for p in verify_directory(root).problems)


def lay_out(root: Path, settings: object) -> None:
    """The parts of docs/offline.md's layout every node reads, as empty stand-ins."""
    from provision.render.manifests import calico_source

    assert isinstance(settings, type(parse_settings({})))
    (root / f"kubernetes/v{settings.kubernetes.minor}/deb").mkdir(parents=True)
    calico = root / calico_source(settings).url.removeprefix(f"file://{root}/")
    calico.parent.mkdir(parents=True)
    calico.write_text("kind: List\n")


# --- up refuses a bundle before any node is touched --------------------------------------------------------------

def write_inputs(tmp_path: Path, settings: dict[str, object]) -> tuple[Path, Path]:
    inventory, config = tmp_path / "hosts.ini", tmp_path / "cluster.yaml"
    inventory.write_text(INVENTORY)
    config.write_text(yaml.safe_dump(settings))
    return inventory, config


@pytest.mark.parametrize("command", [["prepare"], ["up"], ["preflight"], ["config", "validate"]])
def test_a_tampered_bundle_is_refused_before_any_node_is_touched(tmp_path: Path, key_home: Path,
                                                                 command: list[str]) -> None:
    root = make_bundle(tmp_path / "bundle", key_home)
    (root / "os/debian/pool/main/c/chrony.deb").write_text("evil\n")
    inventory, config = write_inputs(tmp_path, {"offline": {"source": str(root)}})
    line = assert_refused(run_main(*command, "-i", str(inventory), "-c", str(config)), str(root), "does not verify",
                          "changed: os/debian/pool/main/c/chrony.deb")
    assert "bundle verify" in line


@pytest.mark.parametrize(("settings", "gpu", "says"), [
    ({"kubernetes": {"version": "1.37"}}, "auto", "the bundle holds Kubernetes 1.36.4"),
    ({"kubernetes": {"version": "1.36.2"}}, "auto", "kubernetes.version pins 1.36.2"),
    ({"addons": {"enabled": ["trainer"]}}, "auto", "addons.enabled has trainer v2.3.0"),
    ({"smoke_test": {"dataset": "cifar10"}}, "auto", "no CIFAR-10 archive"),
    ({}, "true", "w1 is a GPU node"),
])
def test_a_bundle_that_lacks_what_the_settings_need_is_refused(tmp_path: Path, key_home: Path,
                                                               settings: dict[str, object], gpu: str, says: str) -> None:
    held = contents(gpu=False, cifar10=False, images={i: bundle_path(parse_settings({}), i)
                                                     for i in own_images(parse_settings({}), gpu=False)})
    root = make_bundle(tmp_path / "bundle", key_home, held)
    inventory, config = write_inputs(tmp_path, {"offline": {"source": str(root)}, **settings})
    inventory.write_text(INVENTORY.replace("10.0.0.2", f"10.0.0.2 gpu={gpu}"))
    assert_refused(run_main("prepare", "-i", str(inventory), "-c", str(config)), "lacks what the settings need", says)


def test_a_bundle_that_serves_the_settings_passes(tmp_path: Path, key_home: Path) -> None:
    root = make_bundle(tmp_path / "bundle", key_home)
    settings = parse_settings({"offline": {"source": str(root), "bundle_fingerprint": ensure_key(key_home)},
                               "addons": {"enabled": ["volcano"]}})
    inventory, _ = write_inputs(tmp_path, {})
    held = check_offline_bundle(settings, load_inventory(inventory))
    assert held is not None and held.kubernetes_version == "1.36.4"
    assert missing_for(held, settings, None) == []


def test_a_pinned_key_makes_the_source_a_bundle(tmp_path: Path, key_home: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    # A hand-made copy of the layout (no bundle.json) is still an offline source, once it holds what every node
    # reads (docs/offline.md)...
    with pytest.raises(InputError, match=r"lacks what docs/offline.md's layout holds.*kubernetes/v1\.\d+/deb or /rpm"):
        check_offline_bundle(parse_settings({"offline": {"source": str(plain)}}))
    lay_out(plain, parse_settings({"offline": {"source": str(plain)}}))
    assert check_offline_bundle(parse_settings({"offline": {"source": str(plain)}})) is None
    # ... unless the settings say it must be a bundle signed by a key.
    pinned = parse_settings({"offline": {"source": str(plain), "bundle_fingerprint": ensure_key(key_home)}})
    with pytest.raises(InputError, match="not a bundle"):
        check_offline_bundle(pinned)
    other = make_bundle(tmp_path / "other-key", tmp_path / "other-home")
    with pytest.raises(InputError, match="bad signature: signed by"):
        check_offline_bundle(parse_settings({"offline": {"source": str(other),
                                                         "bundle_fingerprint": ensure_key(key_home)}}))


def test_nodes_on_a_platform_the_bundle_lacks_stop_at_preflight_before_prepare(
        tmp_path: Path, key_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the nodes say what they run: a bundle for Rocky 9 alone, Debian 12 nodes (one a GPU node, the bundle
    has no NVIDIA stack), and `prepare` stops at preflight, naming each, before any playbook runs."""
    from provision import phases as phases_module
    from provision.inputs.state import ClusterState
    from provision.nodes.preflight.run import PreflightNode, PreflightReport
    from provision.nodes.sources_check import NodeTarget
    from provision.phases import PhaseContext, run_phases, select_phases

    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    root = make_bundle(tmp_path / "bundle", key_home, contents(platforms=("rocky-9",), gpu=False))
    inventory, _ = write_inputs(tmp_path, {})
    cluster = load_inventory(inventory)
    debian = platform_named("debian-12")
    assert debian is not None

    def fake_preflight(cluster: object, settings: object, *, nodes: list[str] | None = None,
                       **_: object) -> PreflightReport:
        return PreflightReport(tuple(
            PreflightNode(n.name, n.role, n.address, (), 0,
                       sources_target=NodeTarget(n, debian, codename="bookworm", release="12", gpu=n.name == "w1"))
            for n in cluster.nodes), 0.1)  # type: ignore[attr-defined]

    playbooks: list[str] = []
    monkeypatch.setattr(phases_module.preflight, "run_preflight", fake_preflight)
    monkeypatch.setattr(phases_module.engine, "run_playbook", lambda playbook, *a, **k: playbooks.append(playbook))
    settings = parse_settings({"offline": {"source": str(root)}})
    result = run_phases(select_phases(("prepare",)),
                        PhaseContext(cluster=cluster, settings=settings, state=ClusterState.load(cluster)))
    assert [(o.name, o.status) for o in result.outcomes] == [("preflight", "failed"), ("prepare", "not run")]
    said = str(result.error)
    assert "the offline bundle lacks what these nodes need (nothing was changed)" in said
    assert "cp1 runs Debian" in said and "(debian-12), which the bundle does not carry (it holds rocky-9)" in said
    assert "--for rocky-9,debian-12" in said
    assert "w1 is a GPU node and the bundle has no NVIDIA stack: rebuild it with --gpu" in said
    assert playbooks == []


@pytest.mark.parametrize(("args", "says"), [
    (["--for", "centos-7"], "centos-7 is refused"),
    (["--for", "windows-11"], "windows-11 is not a platform"),
    (["--for", "Debian 12"], "is not a platform"),
    (["--for", "debian-12", "--addons", "kubeflow"], "'kubeflow' is not an add-on"),
    (["--for", "debian-12", "--kubernetes", "1.x"], "is not a Kubernetes version"),
])
def test_bundle_build_refuses_bad_flags_in_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    outcome = run_main("bundle", "build", *args, "-o", str(tmp_path / "out"))
    assert outcome.code == 2 and says in outcome.stderr, outcome
    assert len(outcome.lines) == 1 and not (tmp_path / "out").exists()
