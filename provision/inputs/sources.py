"""Where packages and images come from: a named profile, per-source overrides, or one offline source.

Each source is a base URL; the roles append the per-OS part (`/v1.31/deb/`, `/rhel9/x86_64/`, ...), so
one base serves every distribution. The offline source replaces every online one with a fixed layout
under it (docs/offline.md).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import cast

from provision.inputs.settings import MirrorProfile, Settings


@dataclass(frozen=True)
class Sources:
    # None: keep the distribution's own OS repositories.
    os_repo: str | None
    # + /<debian|ubuntu>, or /<rhel|centos>/<release> (the platform table's docker_repo)
    docker_repo: str
    # + /v<minor>/<deb|rpm>/  (the pkgs.k8s.io layout)
    kubernetes_repo: str
    # + /<rhel8|rhel9|ubuntu2204|ubuntu2404|debian12|debian13>/x86_64/ (the platform table's cuda)
    nvidia_cuda_repo: str
    # + /<deb|rpm>   (libnvidia-container stable)
    nvidia_toolkit_repo: str
    # registry for kubeadm's control-plane images (kubeadm's imageRepository)
    image_repository: str
    # + /<calico version>/manifests/calico.yaml
    calico_manifest: str
    pip_index: str
    # the CIFAR-10 python archive (a full URL; its md5 is smoke_test.cifar10_md5)
    cifar10_archive: str
    # + /<owner>/<repo>/<tag>/<path>   (raw GitHub files: Volcano's installer)
    github_raw: str
    # + /<addon>/<version>/<part>.yaml (add-on manifests rendered beforehand); None: from GitHub
    addon_manifests: str | None
    # registry host -> mirror endpoints for containerd (docker.io, quay.io, nvcr.io, ...)
    registry_mirrors: dict[str, list[str]]

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


PROFILES: dict[MirrorProfile, dict[str, object]] = {
    MirrorProfile.default: {
        "os_repo": None,
        "docker_repo": "https://download.docker.com/linux",
        "kubernetes_repo": "https://pkgs.k8s.io/core:/stable:",
        "nvidia_cuda_repo": "https://developer.download.nvidia.com/compute/cuda/repos",
        "nvidia_toolkit_repo": "https://nvidia.github.io/libnvidia-container/stable",
        "image_repository": "registry.k8s.io",
        "calico_manifest": "https://raw.githubusercontent.com/projectcalico/calico",
        "pip_index": "https://pypi.org/simple",
        "cifar10_archive": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
        "github_raw": "https://raw.githubusercontent.com",
        "addon_manifests": None,
        "registry_mirrors": {},
    },
    # Mirrors reachable from mainland China (Aliyun, Tsinghua, USTC, DaoCloud).
    MirrorProfile.cn: {
        "os_repo": "https://mirrors.aliyun.com",
        "docker_repo": "https://mirrors.aliyun.com/docker-ce/linux",
        "kubernetes_repo": "https://mirrors.aliyun.com/kubernetes-new/core/stable",
        "nvidia_cuda_repo": "https://mirrors.aliyun.com/nvidia-cuda",
        "nvidia_toolkit_repo": "https://mirrors.ustc.edu.cn/libnvidia-container/stable",
        "image_repository": "registry.aliyuncs.com/google_containers",
        "calico_manifest": "https://mirrors.tuna.tsinghua.edu.cn/github-raw/projectcalico/calico",
        "pip_index": "https://pypi.tuna.tsinghua.edu.cn/simple",
        # Baidu's copy of the same archive (same md5), the one PaddlePaddle's datasets download.
        "cifar10_archive": "https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz",
        # The host calico_manifest uses above. The Kubeflow add-ons come from git (kustomize): no mirror of
        # github.com is known here, so they need addon_manifests (docs/addons.md) where GitHub is out of reach.
        "github_raw": "https://mirrors.tuna.tsinghua.edu.cn/github-raw",
        "addon_manifests": None,
        "registry_mirrors": {
            "docker.io": ["https://docker.m.daocloud.io"],
            "quay.io": ["https://quay.m.daocloud.io"],
            "nvcr.io": ["https://nvcr.m.daocloud.io"],
            "registry.k8s.io": ["https://k8s.m.daocloud.io"],
        },
    },
}


def resolve_sources(settings: Settings) -> Sources:
    """The sources a run uses: offline beats overrides, overrides beat the profile."""
    offline = settings.offline
    if offline.source:
        base = offline.source
        return Sources(
            os_repo=f"{base}/os",
            docker_repo=f"{base}/docker",
            kubernetes_repo=f"{base}/kubernetes",
            nvidia_cuda_repo=f"{base}/nvidia-cuda",
            nvidia_toolkit_repo=f"{base}/nvidia-container-toolkit",
            image_repository=offline.image_repository or settings.mirrors.image_repository or "registry.k8s.io",
            calico_manifest=f"{base}/calico",
            pip_index=f"{base}/pypi/simple",
            cifar10_archive=f"{base}/cifar10/cifar-10-python.tar.gz",
            github_raw=f"{base}/github-raw",
            addon_manifests=f"{base}/addons",
            registry_mirrors=dict(settings.container_runtime.registry_mirrors),
        )
    chosen = dict(PROFILES[settings.mirrors.profile])
    for key, value in settings.mirrors.model_dump(exclude={"profile"}).items():
        if value is not None:
            chosen[key] = value.rstrip("/")
    mirrors = dict(cast(dict[str, list[str]], chosen.pop("registry_mirrors")))
    mirrors.update(settings.container_runtime.registry_mirrors)
    return Sources(registry_mirrors=mirrors, **chosen)  # type: ignore[arg-type]
