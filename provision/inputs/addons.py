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

AddonName = Literal["volcano", "training_operator", "trainer", "cert_manager", "kserve", "pipelines",
                    "node_feature_discovery", "gpu_feature_discovery", "dcgm_exporter"]
# The order `up` installs them in: Volcano first, so that the Kubeflow controllers find its PodGroup API when
# they start (Trainer v2 builds PodGroups for runtimes with a volcano podGroupPolicy); cert-manager before KServe,
# whose webhook certificates it issues; Node Feature Discovery before GPU Feature Discovery, which writes its
# features for NFD to turn into labels.
ADDON_ORDER: tuple[AddonName, ...] = ("volcano", "training_operator", "trainer", "cert_manager", "kserve",
                                      "pipelines", "node_feature_discovery", "gpu_feature_discovery",
                                      "dcgm_exporter")
VERSION_PATTERN = r"^v\d+\.\d+\.\d+$"
# Kubeflow Pipelines tags its releases without the v (2.17.0).
BARE_VERSION_PATTERN = r"^\d+\.\d+\.\d+$"
# DCGM exporter's tags pair the exporter's version with DCGM's (4.5.3-4.8.2).
DCGM_VERSION_PATTERN = r"^\d+\.\d+\.\d+-\d+\.\d+\.\d+$"
GITHUB = "https://github.com"


@dataclass(frozen=True)
class Part:
    """One manifest of a release, applied (server-side) after the parts before it are up."""

    name: str
    # "raw": a single YAML file at `{github_raw}/{path}`; "release": a file attached to a GitHub release
    # (`https://github.com/{path}`); "kustomize": a kustomize target in a git repository (`kubectl kustomize`
    # renders it on the control plane; it needs git there).
    kind: Literal["raw", "release", "kustomize"]
    # {version} is replaced by the release tag.
    path: str
    # The namespace the part's objects are put in (kustomize's `namespace:`), for releases that name none.
    namespace: str | None = None

    def upstream(self, version: str, github_raw: str) -> str:
        path = self.path.format(version=version)
        if self.kind == "raw":
            return f"{github_raw.rstrip('/')}/{path}"
        return f"{GITHUB}/{path}" if self.kind == "release" else path


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
    # The upstream images the release's controllers and their sidecars run, and those the controllers start (named
    # in env values, args and ConfigMaps), without tags, as the manifests spell them (Docker Hub ones both ways).
    # What `config check-sources` holds the registry mirrors to; what is pulled is read from the rendered manifests
    # themselves (module_utils/cb_images.py), and tests/test_addon_conformance.py holds this list to them.
    images: tuple[str, ...]
    # The Kubernetes minors the pinned release is tested or documented with (low, high; high None: no upper bound
    # published), and where that range is written. A minor outside it is installed with a warning naming it,
    # unless the range is the release's stated support (kubernetes_required), outside which it is refused.
    kubernetes: tuple[int, int | None] = (0, None)
    kubernetes_source: str = ""
    kubernetes_required: bool = False
    # Cluster-scoped objects the add-on phase also checks, as (plural.group/version, name).
    objects: tuple[tuple[str, str], ...] = ()
    # DaemonSets that must have a ready pod on every node they are scheduled to.
    daemonsets: tuple[str, ...] = ()
    # Add-ons it needs installed first (enabling it enables them).
    requires: tuple[AddonName, ...] = ()
    # The shape of its release tags (an addons.<name>_version is held to it).
    version_pattern: str = VERSION_PATTERN
    # Its namespace is created by cluster-bootstrap (the release does not ship one).
    own_namespace: bool = False
    # ConfigMaps in its namespace, each with keys it must hold once up: the release's and ours side by side.
    config_keys: tuple[tuple[str, tuple[str, ...]], ...] = ()

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
        if self.kubernetes_required:
            return f"{self.name} {self.version} supports Kubernetes {self.kubernetes_text()}, not 1.{minor}"
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
        # The manager and JobSet, then what the runtimes part's ClusterTrainingRuntimes start (torch-distributed:
        # pytorch/pytorch; the others only when a TrainJob names them).
        images=("ghcr.io/kubeflow/trainer/trainer-controller-manager", "registry.k8s.io/jobset/jobset",
                "pytorch/pytorch", "docker.io/pytorch/pytorch", "ghcr.io/kubeflow/trainer/dataset-initializer",
                "ghcr.io/kubeflow/trainer/model-initializer", "ghcr.io/kubeflow/trainer/deepspeed-runtime",
                "ghcr.io/kubeflow/trainer/mlx-runtime", "ghcr.io/kubeflow/trainer/torchtune-trainer",
                "ghcr.io/kubeflow/trainer/xgboost-runtime", "nvcr.io/nvidia/jax"),
        kubernetes=(31, None),
        kubernetes_source="kubeflow/trainer docs/operator-guides/installation.md: Kubernetes >= 1.31",
        objects=(("clustertrainingruntimes.trainer.kubeflow.org/v1alpha1", "torch-distributed"),),
    ),
    "cert_manager": Addon(
        name="cert_manager", title="cert-manager", provides="certificates for KServe's webhooks",
        version="v1.21.2",
        version_source="https://github.com/cert-manager/cert-manager/releases/tag/v1.21.2 (1.21: Kubernetes "
                       "1.33-1.36 on cert-manager.io/docs/releases; v1.21.1 tagged 2026-08)",
        namespace="cert-manager",
        parts=(Part("release", "release", "cert-manager/cert-manager/releases/download/{version}/cert-manager.yaml"),),
        crds=("certificates.cert-manager.io", "issuers.cert-manager.io", "clusterissuers.cert-manager.io"),
        deployments=("cert-manager", "cert-manager-cainjector", "cert-manager-webhook"),
        images=("quay.io/jetstack/cert-manager-controller", "quay.io/jetstack/cert-manager-cainjector",
                "quay.io/jetstack/cert-manager-webhook", "quay.io/jetstack/cert-manager-startupapicheck"),
        kubernetes=(33, 36),
        kubernetes_source="cert-manager.io/docs/releases: 1.21 supports 1.33-1.36; no release lists 1.37 yet",
        kubernetes_required=True,
    ),
    "kserve": Addon(
        name="kserve", title="KServe", provides="InferenceService (serving.kserve.io/v1beta1), Standard mode",
        version="v0.21.0",
        version_source="https://github.com/kserve/kserve/releases/tag/v0.21.0 (the kserve package 0.21.0 on PyPI; "
                       "v0.20.0 tagged 2026-08-06)",
        namespace="kserve",
        # The release's kserve.yaml leaves its Namespace out (hack/release/generate-install.sh): ours comes first.
        parts=(Part("release", "release", "kserve/kserve/releases/download/{version}/kserve.yaml"),
               # The ClusterServingRuntimes, checked by the controller's webhook: applied once it is up.
               Part("runtimes", "release", "kserve/kserve/releases/download/{version}/kserve-cluster-resources.yaml")),
        crds=("inferenceservices.serving.kserve.io", "servingruntimes.serving.kserve.io",
              "clusterservingruntimes.serving.kserve.io"),
        deployments=("kserve-controller-manager",),
        # kserve.yaml: the controllers (the LLM and local-model ones included) and the kube-rbac-proxy sidecar; its
        # inferenceservice-config: the storage initializer, agent and router the controller injects.
        images=("kserve/kserve-controller", "docker.io/kserve/kserve-controller", "kserve/llmisvc-controller",
                "docker.io/kserve/llmisvc-controller", "kserve/kserve-localmodel-controller",
                "docker.io/kserve/kserve-localmodel-controller", "kserve/kserve-localmodelnode-agent",
                "docker.io/kserve/kserve-localmodelnode-agent", "quay.io/brancz/kube-rbac-proxy",
                "kserve/storage-initializer", "docker.io/kserve/storage-initializer", "kserve/agent",
                "docker.io/kserve/agent", "kserve/router", "docker.io/kserve/router"),
        requires=("cert_manager",),
        own_namespace=True,
        # The controller reads its configuration from here: `deploy` is ours (Standard mode), the rest the
        # release's (config/configmap/inferenceservice.yaml): without them no InferenceService is reconciled.
        config_keys=(("inferenceservice-config", ("deploy", "ingress", "storageInitializer", "credentials",
                                                  "agent", "router")),),
        kubernetes=(33, 37),
        kubernetes_source="no published range: the minors its go.mod's client-go (0.35-0.36) and release date cover",
    ),
    "pipelines": Addon(
        name="pipelines", title="Kubeflow Pipelines", provides="pipeline runs (standalone, platform-agnostic)",
        version="2.17.0",
        version_source="https://github.com/kubeflow/pipelines/releases/tag/2.17.0 (tagged 2026-07-09; the kfp SDK "
                       "2.17.3 on PyPI compiles for it)",
        namespace="kubeflow",
        parts=(Part("cluster-scoped", "kustomize", "https://github.com/kubeflow/pipelines.git/manifests/kustomize/"
                    "cluster-scoped-resources?ref={version}"),
               Part("platform-agnostic", "kustomize", "https://github.com/kubeflow/pipelines.git/manifests/kustomize/"
                    "env/platform-agnostic?ref={version}")),
        crds=("workflows.argoproj.io", "scheduledworkflows.kubeflow.org", "applications.app.k8s.io"),
        deployments=("ml-pipeline", "ml-pipeline-persistenceagent", "ml-pipeline-scheduledworkflow",
                     "workflow-controller", "mysql", "metadata-grpc-deployment"),
        images=("ghcr.io/kubeflow/kfp-api-server", "ghcr.io/kubeflow/kfp-frontend",
                "ghcr.io/kubeflow/kfp-persistence-agent", "ghcr.io/kubeflow/kfp-scheduled-workflow-controller",
                "ghcr.io/kubeflow/kfp-metadata-writer", "ghcr.io/kubeflow/kfp-metadata-envoy",
                "ghcr.io/kubeflow/kfp-cache-server", "ghcr.io/kubeflow/kfp-cache-deployer",
                "ghcr.io/kubeflow/kfp-viewer-crd-controller", "ghcr.io/kubeflow/kfp-visualization-server",
                "ghcr.io/kubeflow/kfp-launcher", "ghcr.io/kubeflow/kfp-driver", "quay.io/argoproj/workflow-controller",
                "quay.io/argoproj/argoexec", "gcr.io/tfx-oss-public/ml_metadata_store_server",
                "ghcr.io/chrislusf/seaweedfs", "mysql", "docker.io/library/mysql", "docker.io/alpine"),
        version_pattern=BARE_VERSION_PATTERN,
        kubernetes=(33, 37),
        kubernetes_source="no published range: the minors its go.mod's client-go (0.35-0.36) and release date cover",
    ),
    "node_feature_discovery": Addon(
        name="node_feature_discovery", title="Node Feature Discovery", provides="node labels from hardware features",
        version="v0.19.0",
        version_source="https://github.com/kubernetes-sigs/node-feature-discovery/releases/tag/v0.19.0 "
                       "(tagged 2026-07-10)",
        namespace="node-feature-discovery",
        parts=(Part("default", "kustomize", "https://github.com/kubernetes-sigs/node-feature-discovery.git/"
                    "deployment/overlays/default?ref={version}"),),
        crds=("nodefeatures.nfd.k8s-sigs.io", "nodefeaturerules.nfd.k8s-sigs.io"),
        deployments=("nfd-master", "nfd-gc"),
        daemonsets=("nfd-worker",),
        images=("registry.k8s.io/nfd/node-feature-discovery",),
        kubernetes=(33, 37),
        kubernetes_source="no published range: the minors its go.mod's client-go (0.35-0.36) and release date cover",
    ),
    "gpu_feature_discovery": Addon(
        name="gpu_feature_discovery", title="GPU Feature Discovery",
        provides="GPU node labels: product, memory, compute capability, MIG",
        version="v0.20.1",
        version_source="https://github.com/NVIDIA/k8s-device-plugin/releases/tag/v0.20.1 (GFD ships with the device "
                       "plugin, NVIDIA/k8s-device-plugin #2057)",
        namespace="node-feature-discovery",
        parts=(Part("daemonset", "raw", "NVIDIA/k8s-device-plugin/{version}/deployments/static/"
                    "gpu-feature-discovery-daemonset.yaml", namespace="node-feature-discovery"),),
        crds=(),
        deployments=(),
        daemonsets=("gpu-feature-discovery",),
        images=("nvcr.io/nvidia/k8s-device-plugin",),
        requires=("node_feature_discovery",),
        kubernetes=(33, 37),
        kubernetes_source="no published range: the minors its go.mod's client-go (0.35-0.36) and release date cover",
    ),
    "dcgm_exporter": Addon(
        name="dcgm_exporter", title="NVIDIA DCGM exporter", provides="GPU metrics (utilisation, memory, power) for "
        "Prometheus on port 9400",
        version="4.5.3-4.8.2",
        version_source="https://github.com/NVIDIA/dcgm-exporter/releases/tag/4.5.3-4.8.2 (tagged 2026-05-06)",
        namespace="gpu-monitoring",
        parts=(Part("release", "raw", "NVIDIA/dcgm-exporter/{version}/dcgm-exporter.yaml", namespace="gpu-monitoring"),),
        crds=(),
        deployments=(),
        daemonsets=("dcgm-exporter",),
        images=("nvcr.io/nvidia/k8s/dcgm-exporter",),
        version_pattern=DCGM_VERSION_PATTERN,
        own_namespace=True,
        kubernetes=(33, 37),
        kubernetes_source="no published range: the minors its go.mod's client-go (0.35-0.36) and release date cover",
    ),
}
