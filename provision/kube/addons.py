"""Is an add-on up (or gone)? Asked through the Kubernetes API, the way `verify` asks about the cluster.

Up: every CRD of the release Established, every Deployment Available with all its replicas ready, and the
objects the smoke test relies on present (the torch-distributed ClusterTrainingRuntime, the Volcano queue).
A Deployment that is not Available is explained by its pods (image pulls, crash loops), as `verify` does.
Gone: none of its CRDs and no namespace left. Both poll until they hold or the time is up.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.inputs.addons import ADDONS, Addon, AddonName
from provision.inputs.settings import Settings
from provision.kube.client import ApiUnreachable, call_api
from provision.kube.pods import pod_name
from provision.kube.verify import Expectations, Problem, pod_problem

# Where the Volcano queue lives in the API (group/version, plural).
QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")


@dataclass
class AddonStatus:
    name: AddonName
    # CRD -> Established; absent CRDs are not in the map.
    crds: dict[str, bool] = field(default_factory=dict)
    # Deployment -> "ready/wanted"; absent Deployments are not in the map.
    deployments: dict[str, str] = field(default_factory=dict)
    # DaemonSet -> "ready/scheduled"; absent DaemonSets are not in the map.
    daemonsets: dict[str, str] = field(default_factory=dict)
    # The release the controllers run, read from the first Deployment's image tag.
    version: str | None = None
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def installed(self) -> bool:
        return bool(self.crds) or bool(self.deployments) or bool(self.daemonsets)

    def summary(self) -> str:
        addon = ADDONS[self.name]
        parts = [f"{sum(self.crds.values())} CRDs Established"] if addon.crds else []
        parts += [f"{len(self.deployments)} controllers Available"] if addon.deployments else []
        parts += [f"{name} ready on {ready} nodes" for name, ready in self.daemonsets.items()]
        return f"{addon.title} {self.version or '(version unknown)'}: {', '.join(parts)}"


def expected_objects(addon: Addon, settings: Settings) -> list[tuple[str, str, str, str]]:
    """(group, version, plural, name) of the cluster-scoped objects the add-on must hold for the smoke test."""
    objects = []
    for resource, name in addon.objects:
        plural_group, version = resource.split("/")
        plural, group = plural_group.split(".", 1)
        objects.append((group, version, plural, name))
    if addon.name == "volcano":
        objects.append((*QUEUES[:2], QUEUES[2], settings.addons.volcano_queue))
    return objects


def _condition(obj: object, kind: str) -> tuple[str, str] | None:
    """(status, reason: message) of a condition of `kind` on a CRD or Deployment; None when it has none."""
    status = getattr(obj, "status", None)
    for condition in (getattr(status, "conditions", None) or []):
        if condition.type == kind:
            return condition.status, f"{condition.reason or ''}: {condition.message or ''}".strip(": ")
    return None


def _image_tag(deployment: client.V1Deployment | client.V1DaemonSet) -> str | None:
    containers = deployment.spec.template.spec.containers if deployment.spec and deployment.spec.template and \
        deployment.spec.template.spec else []
    image = containers[0].image if containers else None
    if not image or ":" not in image.rsplit("/", 1)[-1]:
        return None
    return image.rsplit(":", 1)[1]


def addon_status(api: client.ApiClient, addon: Addon, settings: Settings) -> AddonStatus:
    """One look at the add-on through the API."""
    status = AddonStatus(addon.name)
    _look_at_crds(api, addon, status)
    _look_at_workloads(api, addon, status)
    _look_at_config_maps(api, addon, status)
    _look_at_objects(api, addon, settings, status)
    return status


def _look_at_crds(api: client.ApiClient, addon: Addon, status: AddonStatus) -> None:
    """Each of the add-on's CRDs is there and Established."""
    extensions = client.ApiextensionsV1Api(api)
    for name in addon.crds:
        try:
            crd = call_api(api, extensions.read_custom_resource_definition, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            status.problems.append(Problem(name, "CRD not found", f"the {addon.title} release was not applied: "
                                           f"`bootstrap addons install {addon.name}`", settled=True))
            continue
        established = _condition(crd, "Established")
        status.crds[name] = bool(established and established[0] == "True")
        if not status.crds[name]:
            status.problems.append(Problem(name, "CRD not Established",
                                           (established[1] if established else "") or "the API server has not "
                                           "accepted its names yet"))


def _look_at_workloads(api: client.ApiClient, addon: Addon, status: AddonStatus) -> None:
    """Each Deployment Available and each DaemonSet ready on every node; what is not is explained by its pods'
    trouble (the namespace's pods are listed once, and only when something is not ready)."""
    apps = client.AppsV1Api(api)
    pods: list[client.V1Pod] | None = None
    for name in addon.deployments:
        subject = f"{addon.namespace}/{name}"
        try:
            deployment = call_api(api, apps.read_namespaced_deployment, name, addon.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            status.problems.append(Problem(subject, "Deployment not found", f"the {addon.title} release was not "
                                           f"applied: `bootstrap addons install {addon.name}`", settled=True))
            continue
        wanted = (deployment.spec.replicas if deployment.spec and deployment.spec.replicas is not None else 1)
        ready = (deployment.status.ready_replicas if deployment.status else None) or 0
        status.deployments[name] = f"{ready}/{wanted}"
        status.version = status.version or _image_tag(deployment)
        available = _condition(deployment, "Available")
        if available and available[0] == "True" and ready >= wanted:
            continue
        if pods is None:
            pods = call_api(api, client.CoreV1Api(api).list_namespaced_pod, addon.namespace).items
        why = next((p for p in (pod_problem(pod, Expectations(nodes=())) for pod in pods
                                if pod_name(pod).startswith(f"{name}-")) if p), None)
        status.problems.append(Problem(subject, f"not Available ({ready}/{wanted} ready)",
                                       why.describe() if why else (available[1] if available else "starting"),
                                       settled=bool(why and why.settled)))
    for name in addon.daemonsets:
        subject = f"{addon.namespace}/{name}"
        try:
            daemon_set = call_api(api, apps.read_namespaced_daemon_set, name, addon.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            status.problems.append(Problem(subject, "DaemonSet not found", f"the {addon.title} release was not "
                                           f"applied: `bootstrap addons install {addon.name}`", settled=True))
            continue
        ds_status = daemon_set.status
        wanted = (ds_status.desired_number_scheduled if ds_status else 0) or 0
        ready = (ds_status.number_ready if ds_status else 0) or 0
        status.daemonsets[name] = f"{ready}/{wanted}"
        status.version = status.version or _image_tag(daemon_set)
        if ready >= wanted:
            continue
        if pods is None:
            pods = call_api(api, client.CoreV1Api(api).list_namespaced_pod, addon.namespace).items
        why = next((p for p in (pod_problem(pod, Expectations(nodes=())) for pod in pods
                                if pod_name(pod).startswith(f"{name}-")) if p), None)
        status.problems.append(Problem(subject, f"not ready on every node ({ready}/{wanted})",
                                       why.describe() if why else "its pods are starting",
                                       settled=bool(why and why.settled)))


def _look_at_config_maps(api: client.ApiClient, addon: Addon, status: AddonStatus) -> None:
    """Each ConfigMap the add-on's configuration lives in is there with its keys."""
    for config_map, keys in addon.config_keys:
        subject = f"{addon.namespace}/{config_map}"
        try:
            found = call_api(api, client.CoreV1Api(api).read_namespaced_config_map, config_map, addon.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            status.problems.append(Problem(subject, "ConfigMap not found", f"the {addon.title} release was not "
                                           f"applied: `bootstrap addons install {addon.name}`", settled=True))
            continue
        missing = [key for key in keys if key not in (found.data or {})]
        if missing:
            status.problems.append(Problem(subject, f"lacks {', '.join(missing)}", "the release's configuration was "
                                           f"overwritten: re-run `bootstrap addons install {addon.name}`",
                                           settled=True))


def _look_at_objects(api: client.ApiClient, addon: Addon, settings: Settings, status: AddonStatus) -> None:
    """The cluster-scoped objects the add-on must hold for the smoke test (expected_objects) exist."""
    objects = client.CustomObjectsApi(api)
    for group, version, plural, name in expected_objects(addon, settings):
        try:
            call_api(api, objects.get_cluster_custom_object, group, version, plural, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            status.problems.append(Problem(f"{plural}.{group}/{name}", "not found",
                                           f"{addon.title} came without it: re-run `bootstrap addons install "
                                           f"{addon.name}`", settled=bool(status.crds) and all(status.crds.values())))


def crd_exists(api: client.ApiClient, name: str) -> bool:
    """Whether the cluster serves a CRD (the Prometheus Operator's ServiceMonitor, say)."""
    try:
        call_api(api, client.ApiextensionsV1Api(api).read_custom_resource_definition, name)
    except ApiException as exc:
        if exc.status != 404:
            raise
        return False
    return True


def _wait(check: Callable[[], AddonStatus], timeout_s: float, poll_s: float,
          sleep: Callable[[float], None]) -> AddonStatus:
    deadline = time.monotonic() + timeout_s
    while True:
        status = check()
        if status.ok or time.monotonic() >= deadline:
            return status
        sleep(poll_s)


def wait_for_addon(api: client.ApiClient, name: AddonName, settings: Settings, *, timeout_s: float,
                   poll_s: float = 2.0, sleep: Callable[[float], None] = time.sleep) -> AddonStatus:
    """Poll until the add-on is up or timeout_s is spent; the status lists what is still missing."""
    addon = ADDONS[name]

    def check() -> AddonStatus:
        try:
            return addon_status(api, addon, settings)
        except ApiUnreachable as exc:
            return AddonStatus(name, problems=[Problem("control plane", "the Kubernetes API does not answer",
                                                       str(exc))])
    return _wait(check, timeout_s, poll_s, sleep)


def wait_for_removal(api: client.ApiClient, name: AddonName, *, timeout_s: float, poll_s: float = 2.0,
                     sleep: Callable[[float], None] = time.sleep) -> AddonStatus:
    """Poll until none of the add-on's CRDs and not its namespace are left."""
    addon = ADDONS[name]
    extensions = client.ApiextensionsV1Api(api)
    core = client.CoreV1Api(api)

    def check() -> AddonStatus:
        status = AddonStatus(name)
        for crd in addon.crds:
            try:
                call_api(api, extensions.read_custom_resource_definition, crd)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            status.crds[crd] = True
            status.problems.append(Problem(crd, "CRD still there", "its objects may carry finalizers that no "
                                           f"controller removes any more: `kubectl get {crd} -A`"))
        try:
            call_api(api, core.read_namespace, addon.namespace)
            status.problems.append(Problem(addon.namespace, "namespace still there",
                                           f"see `kubectl get all -n {addon.namespace}`"))
        except ApiException as exc:
            if exc.status != 404:
                raise
        return status
    return _wait(check, timeout_s, poll_s, sleep)


def installed_addons(api: client.ApiClient, settings: Settings) -> list[AddonStatus]:
    """One look at every known add-on (for `bootstrap addons list`)."""
    return [addon_status(api, ADDONS[name], settings) for name in ADDONS]
