"""Mirrors and offline mode are settings: a profile switches every source, an override one, offline all."""
from __future__ import annotations

from dataclasses import fields

import pytest

from provision.errors import InputError
from provision.inputs.settings import parse_settings
from provision.inputs.sources import PROFILES, Sources, resolve_sources


def test_default_profile_uses_upstream_sources() -> None:
    sources = resolve_sources(parse_settings({}))
    assert sources.kubernetes_repo == "https://pkgs.k8s.io/core:/stable:"
    assert sources.image_repository == "registry.k8s.io"
    assert sources.os_repo is None
    assert sources.registry_mirrors == {}


def test_cn_profile_switches_every_online_source_away_from_upstream() -> None:
    default = resolve_sources(parse_settings({}))
    cn = resolve_sources(parse_settings({"mirrors": {"profile": "cn"}}))
    for f in fields(Sources):
        # addon_manifests is set only by an offline source or by hand: no profile renders the add-ons for you.
        if f.name in ("registry_mirrors", "addon_manifests"):
            continue
        assert getattr(cn, f.name) != getattr(default, f.name), f.name
    assert "aliyun" in cn.kubernetes_repo and "aliyun" in cn.image_repository
    assert "tuna.tsinghua" in cn.pip_index
    assert set(cn.registry_mirrors) >= {"docker.io", "registry.k8s.io", "quay.io", "nvcr.io"}


def test_a_single_override_beats_the_profile_and_keeps_the_rest() -> None:
    settings = parse_settings({"mirrors": {"profile": "cn", "image_repository": "harbor.example.com/k8s/"},
                               "container_runtime": {"registry_mirrors": {"docker.io": ["https://hub.example.com"]}}})
    sources = resolve_sources(settings)
    assert sources.image_repository == "harbor.example.com/k8s"
    assert sources.kubernetes_repo == PROFILES["cn"]["kubernetes_repo"]
    assert sources.registry_mirrors["docker.io"] == ["https://hub.example.com"]
    assert sources.registry_mirrors["quay.io"] == ["https://quay.m.daocloud.io"]


def test_offline_source_replaces_every_online_source() -> None:
    settings = parse_settings({"mirrors": {"profile": "cn"},
                               "offline": {"source": "/srv/cb-repo", "image_repository": "10.0.0.5:5000/k8s"}})
    sources = resolve_sources(settings)
    for f in fields(Sources):
        value = getattr(sources, f.name)
        if f.name in ("registry_mirrors", "image_repository"):
            continue
        assert value.startswith("file:///srv/cb-repo/"), f.name
    assert sources.image_repository == "10.0.0.5:5000/k8s"


def test_http_offline_source_keeps_its_scheme() -> None:
    sources = resolve_sources(parse_settings({"offline": {"source": "http://repo.lan/cb/"}}))
    assert sources.kubernetes_repo == "http://repo.lan/cb/kubernetes"


def test_every_mirror_profile_the_settings_accept_names_every_source() -> None:
    from provision.inputs.settings import MirrorProfile

    assert set(PROFILES) == set(MirrorProfile)
    fields = set(Sources.__dataclass_fields__)
    assert all(set(sources) == fields for sources in PROFILES.values())


def test_the_cifar10_archive_follows_the_profile_the_offline_source_and_an_override() -> None:
    assert resolve_sources(parse_settings({})).cifar10_archive == \
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
    assert resolve_sources(parse_settings({"mirrors": {"profile": "cn"}})).cifar10_archive == \
        "https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz"
    assert resolve_sources(parse_settings({"offline": {"source": "/srv/cb"}})).cifar10_archive == \
        "file:///srv/cb/cifar10/cifar-10-python.tar.gz"
    own = parse_settings({"mirrors": {"cifar10_archive": "https://files.lan/cifar-10-python.tar.gz"}})
    assert resolve_sources(own).cifar10_archive == "https://files.lan/cifar-10-python.tar.gz"


def test_add_on_manifests_come_from_github_unless_rendered_ones_are_given() -> None:
    assert resolve_sources(parse_settings({})).addon_manifests is None
    assert resolve_sources(parse_settings({"offline": {"source": "http://repo.lan/cb"}})).addon_manifests == \
        "http://repo.lan/cb/addons"
    mirrored = parse_settings({"mirrors": {"addon_manifests": "https://files.lan/addons/"}})
    assert resolve_sources(mirrored).addon_manifests == "https://files.lan/addons"


def test_a_package_repository_may_be_a_directory_on_the_nodes() -> None:
    # The lab's placeholder Kubernetes repository is one (tests/lab/repos.py), as an air-gapped mirror may be.
    local = parse_settings({"mirrors": {"kubernetes_repo": "file:///srv/cb-offline/kubernetes"}})
    assert resolve_sources(local).kubernetes_repo == "file:///srv/cb-offline/kubernetes"
    with pytest.raises(InputError, match="is not an absolute path on the nodes"):
        parse_settings({"mirrors": {"kubernetes_repo": "file://srv/../etc"}})


# --- a profile names only what its mirrors carry ----------------------------------------------------------------

# Every add-on a Kubernetes 1.36 cluster can run (cert-manager 1.21 stops at 1.36).
CN = {"mirrors": {"profile": "cn"}, "kubernetes": {"version": "1.36"},
      "addons": {"enabled": ["volcano", "training_operator", "trainer", "cert_manager", "kserve", "pipelines",
                             "node_feature_discovery", "gpu_feature_discovery", "dcgm_exporter"]}}


def _repository(image: str) -> tuple[str, str]:
    from provision.inputs.sources import image_repository
    return image_repository(image)


def every_pulled_image(settings) -> list[str]:  # type: ignore[no-untyped-def]
    """Every image a cluster with these settings pulls whose name the settings decide (the control-plane images
    and pause come from image_repository): Calico's, kube-vip, the local API proxy, the device plugin, the DNS
    probe, the smoke test's, and the enabled add-ons'."""
    from provision.inputs import versions
    from provision.inputs.addons import ADDONS
    from provision.render.manifests import calico_images
    gpu, plane = settings.gpu, settings.control_plane
    return [*calico_images(settings), plane.kube_vip_image, plane.proxy_image,
            f"{gpu.device_plugin_image}:{gpu.device_plugin_version}", settings.verify.dns_probe_image,
            *(s.image for s in versions.SMOKE_IMAGES),
            *(image for name in settings.addons.enabled for image in ADDONS[name].images)]


def test_cn_names_no_file_its_mirror_does_not_carry() -> None:
    from provision.inputs.sources import mirror_carries
    from provision.render.addons import part_source
    from provision.render.manifests import calico_source
    settings = parse_settings(CN)
    urls = [calico_source(settings).url, part_source(settings, "volcano", "installer")[1]]
    sources = resolve_sources(settings)
    urls += [sources.os_repo, sources.docker_repo, sources.kubernetes_repo, sources.nvidia_cuda_repo,
             sources.nvidia_toolkit_repo, sources.pip_index, sources.cifar10_archive]
    # Each is under a mirror the table knows, and that mirror carries its path (TUNA's github-raw has neither
    # Calico's manifest nor Volcano's installer).
    assert {url: mirror_carries(url) for url in urls} == dict.fromkeys(urls, True)


def test_cn_mirrors_every_registry_an_image_comes_from_with_a_mirror_that_serves_it() -> None:
    from provision.inputs.sources import registry_mirror_carries
    settings = parse_settings(CN)
    mirrors = resolve_sources(settings).registry_mirrors
    unserved = []
    for image in every_pulled_image(settings):
        registry, repository = _repository(image)
        # kube-vip, the Trainer and the Training Operator come from ghcr.io: kube-vip is pulled before
        # `kubeadm init` can reach the VIP, so without a mirror there the control plane never forms.
        if not any(registry_mirror_carries(m, repository) for m in mirrors.get(registry, [])):
            unserved.append(image)
    assert unserved == []


def test_the_mirror_tables_say_what_they_say() -> None:
    from provision.inputs.sources import mirror_carries, registry_mirror_carries
    assert mirror_carries("https://mirrors.tuna.tsinghua.edu.cn/github-raw/projectcalico/calico/v3.33.1/manifests/"
                          "calico.yaml") is False
    assert mirror_carries("https://mirrors.tuna.tsinghua.edu.cn/github-raw/docker/docker-install/master/install.sh")
    assert mirror_carries("https://example.com/x") is None
    assert registry_mirror_carries("https://ghcr.m.daocloud.io", "kubeflow/training-v1/training-operator")
    assert registry_mirror_carries("https://quay.m.daocloud.io", "calico/node")
    assert registry_mirror_carries("https://quay.m.daocloud.io", "calico/x/y") is False
    assert registry_mirror_carries("https://docker.m.daocloud.io", "library/nginx") is False
    assert registry_mirror_carries("https://hub.example.com", "library/nginx") is None


def test_an_image_no_named_mirror_serves_is_named_with_the_fix() -> None:
    from provision.inputs.sources import unserved_images
    from provision.nodes.sources_check import NodeTarget, pulled_images
    # DaoCloud's ghcr.io mirror alone (a registry_mirrors entry replaces the profile's): SeaweedFS is not on its
    # allow list, so containerd would fall back to ghcr.io itself.
    settings = parse_settings({**CN, "container_runtime": {"registry_mirrors": {
        "ghcr.io": ["https://ghcr.m.daocloud.io"]}}})
    targets: dict[str, NodeTarget] = {}
    lines = unserved_images(settings, pulled_images(settings, targets))
    assert len(lines) == 1 and lines[0].startswith(
        "image ghcr.io/chrislusf/seaweedfs: no mirror of ghcr.io the settings name serves chrislusf/seaweedfs "
        "(https://ghcr.m.daocloud.io): add one that does to container_runtime.registry_mirrors.ghcr.io")
    # Offline, every image comes from the offline registry: nothing to say about mirrors.
    offline = parse_settings({**CN, "offline": {"image_repository": "registry.lan:5000"}})
    assert unserved_images(offline, pulled_images(offline, targets)) == []


def test_the_sources_report_names_unserved_images_with_the_failed_sources() -> None:
    from provision.nodes.sources_check import SourcesReport
    report = SourcesReport(images=("image x/y:1: no mirror ...",))
    assert report.lines() == ["image x/y:1: no mirror ..."]
