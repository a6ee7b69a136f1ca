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


DAOCLOUD_FILES = "https://files.m.daocloud.io"

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
        # TUNA's github-raw carries only a short fixed list (tuna/tunasync-scripts github-raw.py), neither Calico
        # nor Volcano: DaoCloud's file mirror proxies any raw.githubusercontent.com path.
        "calico_manifest": f"{DAOCLOUD_FILES}/raw.githubusercontent.com/projectcalico/calico",
        "pip_index": "https://pypi.tuna.tsinghua.edu.cn/simple",
        # Baidu's copy of the same archive (same md5), the one PaddlePaddle's datasets download.
        "cifar10_archive": "https://dataset.bj.bcebos.com/cifar/cifar-10-python.tar.gz",
        # The mirror calico_manifest uses above. The Kubeflow add-ons come from git (kustomize): the file mirror
        # serves plain GETs, not git's protocol, so they need addon_manifests (docs/addons.md) where GitHub is out
        # of reach.
        "github_raw": f"{DAOCLOUD_FILES}/raw.githubusercontent.com",
        "addon_manifests": None,
        # DaoCloud's registry mirrors, one per upstream registry (DaoCloud/public-image-mirror README); they
        # serve only what its allows.txt lists (REGISTRY_MIRROR_CARRIES below: the paths this release pulls).
        "registry_mirrors": {
            "docker.io": ["https://docker.m.daocloud.io"],
            "quay.io": ["https://quay.m.daocloud.io"],
            "nvcr.io": ["https://nvcr.m.daocloud.io"],
            "registry.k8s.io": ["https://k8s.m.daocloud.io"],
            # kube-vip (pulled before `kubeadm init` can reach a VIP), the Trainer and the Training Operator; then
            # NJU's mirror of the whole of ghcr.io for what DaoCloud's list lacks (Pipelines' SeaweedFS): containerd
            # tries each mirror in turn.
            "ghcr.io": ["https://ghcr.m.daocloud.io", "https://ghcr.nju.edu.cn"],
            # Pipelines' metadata server (gcr.io/tfx-oss-public/ml_metadata_store_server): DaoCloud allows gcr.io/**.
            "gcr.io": ["https://gcr.m.daocloud.io"],
        },
    },
}


# --- what the public mirrors carry ------------------------------------------------------------------------------
# A mirror that lacks a path fails in the middle of `up`; these say what each mirror a profile names is known to
# serve, as read in the mirror's own lists, and the tests hold every source a profile renders to them. The sources
# check (nodes/sources_check.py) proves the same from the nodes before anything changes.

# URL prefix -> the paths under it the mirror serves: "" for every path of the upstream it mirrors whole.
MIRROR_CARRIES: dict[str, tuple[str, ...]] = {
    # Aliyun's and USTC's mirrors of whole repositories (their help pages: docker-ce, kubernetes-new, nvidia-cuda,
    # libnvidia-container), and TUNA's PyPI mirror.
    "https://mirrors.aliyun.com": ("",),
    "https://mirrors.ustc.edu.cn/libnvidia-container": ("",),
    "https://pypi.tuna.tsinghua.edu.cn/simple": ("",),
    "https://dataset.bj.bcebos.com/cifar": ("cifar-10-python.tar.gz",),
    # TUNA's github-raw: the fixed list of tuna/tunasync-scripts github-raw.py (stackage, rosdep, llvm.sh,
    # Docker's install.sh), nothing else.
    "https://mirrors.tuna.tsinghua.edu.cn/github-raw": (
        "fpco/stackage-content/master/stack/", "ros/rosdistro/master/", "opencollab/llvm-jenkins.debian.net/master/",
        "docker/docker-install/master/"),
    # DaoCloud's file mirror: any upstream URL under files.m.daocloud.io/<host>/<path>, fetched on first use
    # (DaoCloud/public-binary-files-mirror; OpenCIDN/httpmirror blocks only listed suffixes).
    DAOCLOUD_FILES: ("raw.githubusercontent.com/", "github.com/"),
}

# Registry mirror -> the repositories it serves, as its allow list spells them (`*`: one path segment, `**`: any
# depth), limited to the ones this release's images live in (DaoCloud/public-image-mirror allows.txt, 2026-08).
REGISTRY_MIRROR_CARRIES: dict[str, tuple[str, ...]] = {
    "https://docker.m.daocloud.io": ("library/busybox", "library/haproxy", "library/mysql", "library/alpine",
                                     "pytorch/*", "volcanosh/*", "nvidia/*", "calico/*", "kubeflow/*", "kserve/*"),
    "https://quay.m.daocloud.io": ("calico/*", "jetstack/*", "argoproj/*", "brancz/*"),
    "https://nvcr.m.daocloud.io": ("**",),
    "https://k8s.m.daocloud.io": ("**",),
    "https://ghcr.m.daocloud.io": ("kube-vip/**", "kubeflow/**"),
    "https://gcr.m.daocloud.io": ("**",),
    # NJU's ghcr.io mirror proxies every repository (mirror.nju.edu.cn, its ghcr help page).
    "https://ghcr.nju.edu.cn": ("**",),
}


def mirror_carries(url: str) -> bool | None:
    """Whether the mirror `url` is under is known to carry its path: True or False, None for a URL under no
    mirror the table knows (an upstream, or the user's own)."""
    for base, paths in MIRROR_CARRIES.items():
        if url == base or url.startswith(base + "/"):
            path = url[len(base):].lstrip("/")
            return any(path.startswith(prefix) for prefix in paths)
    return None


def registry_mirror_carries(mirror: str, repository: str) -> bool | None:
    """Whether registry `mirror` serves `repository` (the image's path on its registry, without tag: library/haproxy,
    kubeflow/trainer/trainer-controller-manager); None for a mirror the table does not know."""
    patterns = REGISTRY_MIRROR_CARRIES.get(mirror.rstrip("/"))
    if patterns is None:
        return None
    parts = repository.split("/")
    for pattern in patterns:
        wanted = pattern.split("/")
        if wanted[-1] == "**":
            if parts[:len(wanted) - 1] == wanted[:-1] and len(parts) >= len(wanted):
                return True
        elif len(parts) == len(wanted) and all(w in ("*", p) for w, p in zip(wanted, parts, strict=True)):
            return True
    return False


def image_repository(image: str) -> tuple[str, str]:
    """'ghcr.io/kube-vip/kube-vip:v1.2.4' -> ('ghcr.io', 'kube-vip/kube-vip'); Docker Hub's short names in full
    ('mysql:8.4', 'docker.io/alpine:3' -> ('docker.io', 'library/mysql'), ('docker.io', 'library/alpine'))."""
    name = image.split("@")[0]
    first, _, rest = name.partition("/")
    registry, path = (first, rest) if rest and ("." in first or ":" in first or first == "localhost") \
        else ("docker.io", name)
    path = path.rsplit(":", 1)[0] if ":" in path.rsplit("/", 1)[-1] else path
    return registry, path if "/" in path or registry != "docker.io" else f"library/{path}"


def unserved_images(settings: Settings, images: list[str]) -> list[str]:
    """One line per image that the registry mirrors the settings name for its registry are known not to serve
    (the mirror tables above): containerd would fall back to the upstream registry, out of reach where the mirror
    was needed. None with offline.image_repository (every image is moved there)."""
    if settings.offline.image_repository:
        return []
    mirrors = resolve_sources(settings).registry_mirrors
    lines = []
    for image in dict.fromkeys(images):
        registry, repository = image_repository(image)
        listed = mirrors.get(registry)
        if not listed or any(registry_mirror_carries(m, repository) is not False for m in listed):
            continue
        lines.append(f"image {image}: no mirror of {registry} the settings name serves {repository} "
                     f"({', '.join(listed)}): add one that does to container_runtime.registry_mirrors.{registry}, "
                     "or pull it offline (`bootstrap bundle build`, offline.image_repository)")
    return lines


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
