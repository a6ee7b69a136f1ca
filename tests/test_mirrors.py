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
