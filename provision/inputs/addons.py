"""The cluster add-ons `up` can install after the gpu phase: one table of what each one is and how it is known
to be up.

Every fact the install, the verification, the removal and the docs need lives here, once: the pinned release
(and where that release was confirmed), the manifests applied in order, the namespace, the CRDs that must be
Established, the Deployments that must be Available, and the upstream images (moved to
`offline.image_repository` when one is set). docs/addons.md and the roles are tested against this table.

The upstream manifests are never part of this project: the addon role fetches them on the control plane at
run time (see render/addons.py for where from) and applies them server-side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

AddonName = Literal["volcano", "training_operator", "trainer"]
# The order `up` installs them in: Volcano first, so that the Kubeflow controllers find its PodGroup API when
# they start (Trainer v2 builds PodGroups for runtimes with a volcano podGroupPolicy).
ADDON_ORDER: tuple[AddonName, ...] = ("volcano", "training_operator", "trainer")
VERSION_PATTERN = r"^v\d+\.\d+\.\d+$"


@dataclass(frozen=True)
class Part:
    """One manifest of a release, applied (server-side) after the parts before it are up."""

    name: str
    # "raw": a single YAML file at `{github_raw}/{path}`; "kustomize": a kustomize target in a git repository
    # (`kubectl kustomize` renders it on the control plane; it needs git there).
    kind: Literal["raw", "kustomize"]
    # {version} is replaced by the release tag.
    path: str

    def upstream(self, version: str, github_raw: str) -> str:
        path = self.path.format(version=version)
        return f"{github_raw.rstrip('/')}/{path}" if self.kind == "raw" else path


@dataclass(frozen=True)
class Addon:
    name: AddonName
    title: str
    # What it brings to the smoke test.
    provides: str
    version: str
    # Where the pinned release was confirmed (docs/addons.md lists it).
    version_source: str
    namespace: str
    parts: tuple[Part, ...]
    crds: tuple[str, ...]
    deployments: tuple[str, ...]
    # Upstream image names without tags, as the manifests spell them (Docker Hub ones both ways).
    images: tuple[str, ...]
    # The Kubernetes minors the pinned release is tested or documented with (low, high; high None: no upper bound
    # published), and where that range is written. A minor outside it is installed with a warning naming it.
    kubernetes: tuple[int, int | None] = (0, None)
    kubernetes_source: str = ""
    # Cluster-scoped objects the add-on phase also checks, as (plural.group/version, name).
    objects: tuple[tuple[str, str], ...] = ()

    def kubernetes_text(self) -> str:
        """'1.23-1.35', or '1.31 and newer'."""
        low, high = self.kubernetes
        return f"1.{low}-1.{high}" if high is not None else f"1.{low} and newer"

    def kubernetes_problem(self, minor: int) -> str | None:
        """Why the pinned release is not known to run on Kubernetes 1.<minor> (the range it was tested with), or
        None."""
        low, high = self.kubernetes
        if low <= minor and (high is None or minor <= high):
            return None
        return (f"{self.title} {self.version} is tested with Kubernetes {self.kubernetes_text()} "
                f"({self.kubernetes_source}), not 1.{minor}: it is installed anyway; pin a release whose range covers "
                f"1.{minor} when one exists, or leave {self.name} out of addons.enabled")


ADDONS: dict[AddonName, Addon] = {
    "volcano": Addon(
        name="volcano", title="Volcano", provides="gang scheduling (PodGroup, Queue)",
        version="v1.15.2",
        version_source="https://github.com/volcano-sh/volcano/releases/tag/v1.15.2 (published 2026-08-29)",
        namespace="volcano-system",
        parts=(Part("installer", "raw", "volcano-sh/volcano/{version}/installer/volcano-development.yaml"),),
        crds=("podgroups.scheduling.volcano.sh", "queues.scheduling.volcano.sh", "jobs.batch.volcano.sh"),
        deployments=("volcano-admission", "volcano-controllers", "volcano-scheduler"),
        images=("volcanosh/vc-webhook-manager", "volcanosh/vc-controller-manager", "volcanosh/vc-scheduler",
                "docker.io/volcanosh/vc-webhook-manager", "docker.io/volcanosh/vc-controller-manager",
                "docker.io/volcanosh/vc-scheduler"),
        # The v1.15 row of the README's compatibility table (release-1.15 branch) stops at 1.35; master's adds
        # 1.36, unreleased as v1.16 when this was checked.
        kubernetes=(23, 35),
        kubernetes_source="volcano-sh/volcano README, Kubernetes compatibility, v1.15 row",
    ),
    "training_operator": Addon(
        name="training_operator", title="Kubeflow Training Operator v1", provides="PyTorchJob (kubeflow.org/v1)",
        version="v1.9.4",
        version_source="https://github.com/kubeflow/trainer/releases/tag/v1.9.4 (2026-08-18, release-1.9 "
                       "maintenance: Kubernetes 1.36 dependencies; the repository was renamed from training-operator)",
        namespace="kubeflow",
        parts=(Part("standalone", "kustomize",
                    "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref={version}"),),
        crds=("pytorchjobs.kubeflow.org",),
        deployments=("training-operator",),
        # Since v1.9.2 manifests/base/deployment.yaml names the image under ghcr.io (v1.9.1 and older:
        # kubeflow/training-operator on Docker Hub).
        images=("ghcr.io/kubeflow/training-v1/training-operator",),
        kubernetes=(28, None),
        kubernetes_source="kubeflow/trainer docs/legacy-v1/installation.md: Kubernetes >= 1.28",
    ),
    "trainer": Addon(
        name="trainer", title="Kubeflow Trainer v2", provides="TrainJob, ClusterTrainingRuntime torch-distributed",
        version="v2.3.0",
        version_source="https://github.com/kubeflow/trainer/releases/tag/v2.3.0 (release PR #3859, 2026-08)",
        namespace="kubeflow-system",
        parts=(Part("manager", "kustomize",
                    "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref={version}"),
               # The runtimes are checked by the manager's webhook: applied once the manager is Available.
               Part("runtimes", "kustomize",
                    "https://github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref={version}")),
        crds=("trainjobs.trainer.kubeflow.org", "trainingruntimes.trainer.kubeflow.org",
              "clustertrainingruntimes.trainer.kubeflow.org", "jobsets.jobset.x-k8s.io"),
        deployments=("kubeflow-trainer-controller-manager", "jobset-controller-manager"),
        images=("ghcr.io/kubeflow/trainer/trainer-controller-manager", "registry.k8s.io/jobset/jobset"),
        kubernetes=(31, None),
        kubernetes_source="kubeflow/trainer docs/operator-guides/installation.md: Kubernetes >= 1.31",
        objects=(("clustertrainingruntimes.trainer.kubeflow.org/v1alpha1", "torch-distributed"),),
    ),
}
