"""Reading pods the way the kubelet and the scheduler describe them, for every check that looks at pods.

The reasons a container waits or ended are Kubernetes' words, not one check's: the smoke test and the
cluster verification read the same ones from here. Every attribute of the kubernetes client's models is
Optional, so the accessors answer for a pod with no metadata, spec or status as well (empty, None, Pending).
"""
from __future__ import annotations

from kubernetes import client

# Waiting reasons of a container whose image cannot be pulled.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Of those, the ones a retry by the kubelet never fixes.
HOPELESS_IMAGE_REASONS = frozenset({"InvalidImageName", "ErrImageNeverPull"})
# Waiting reasons of a container whose image is there but that cannot be created or started.
CONFIG_REASONS = frozenset({"CreateContainerConfigError", "CreateContainerError", "RunContainerError"})
CRASH_LOOP = "CrashLoopBackOff"
OOM_KILLED = "OOMKilled"
# The PodScheduled condition's reason when no node fits the pod.
UNSCHEDULABLE = "Unschedulable"
# Where an Indexed Job's pod carries its index: a label from Kubernetes 1.28 on, an annotation before.
COMPLETION_INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# Where the Kubeflow Training Operator's pods say which replica they are (master 0, worker 0, 1, ...).
REPLICA_TYPE_KEY = "training.kubeflow.org/replica-type"
REPLICA_INDEX_KEY = "training.kubeflow.org/replica-index"


def pod_name(pod: client.V1Pod) -> str:
    return (pod.metadata.name if pod.metadata else None) or ""


def pod_namespace(pod: client.V1Pod) -> str:
    return (pod.metadata.namespace if pod.metadata else None) or ""


def pod_labels(pod: client.V1Pod) -> dict[str, str]:
    return (pod.metadata.labels if pod.metadata else None) or {}


def pod_annotations(pod: client.V1Pod) -> dict[str, str]:
    return (pod.metadata.annotations if pod.metadata else None) or {}


def owner_kinds(pod: client.V1Pod) -> list[str]:
    return [ref.kind for ref in (pod.metadata.owner_references if pod.metadata else None) or []]


def completion_index(pod: client.V1Pod) -> str:
    """The pod's index in an Indexed Job; "" for any other pod."""
    return pod_labels(pod).get(COMPLETION_INDEX_KEY) or pod_annotations(pod).get(COMPLETION_INDEX_KEY) or ""


def node_rank(pod: client.V1Pod) -> str:
    """The pod's rank among the nodes of a distributed run: an Indexed Job's index (a TrainJob's pods are one),
    or a PyTorchJob's master (0) and workers (1, 2, ...); "" for any other pod."""
    index = completion_index(pod)
    if index:
        return index
    labels = pod_labels(pod)
    replica, number = labels.get(REPLICA_TYPE_KEY, "").lower(), labels.get(REPLICA_INDEX_KEY, "")
    if replica == "master" and number.isdigit():
        return number
    if replica == "worker" and number.isdigit():
        return str(int(number) + 1)
    return ""


def node_name(pod: client.V1Pod) -> str | None:
    return pod.spec.node_name if pod.spec else None


def pod_phase(pod: client.V1Pod) -> str:
    # A pod the API server has only just accepted may carry no status yet: it is pending.
    return (pod.status.phase if pod.status else None) or "Pending"


def container_statuses(pod: client.V1Pod) -> list[client.V1ContainerStatus]:
    """Init containers first, in the order they run, then the pod's containers."""
    status = pod.status
    if status is None:
        return []
    return [*(status.init_container_statuses or []), *(status.container_statuses or [])]


def scheduling_message(pod: client.V1Pod) -> str | None:
    """What the scheduler says about placing the pod (its PodScheduled condition), if anything."""
    conditions = (pod.status.conditions if pod.status else None) or []
    return next((c.message for c in conditions if c.type == "PodScheduled" and c.message), None)


def unschedulable(pod: client.V1Pod) -> str | None:
    """The scheduler's message while it finds no node for the pod; None once it is placed or still trying."""
    for condition in (pod.status.conditions if pod.status else None) or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason == UNSCHEDULABLE:
            return condition.message or UNSCHEDULABLE
    return None


def waiting_state(pod: client.V1Pod) -> client.V1ContainerStateWaiting | None:
    """The first container waiting with a reason (ContainerCreating, ImagePullBackOff, ...)."""
    for status in container_statuses(pod):
        if status.state and status.state.waiting and status.state.waiting.reason:
            return status.state.waiting
    return None


def terminated_state(pod: client.V1Pod) -> client.V1ContainerStateTerminated | None:
    """The first container that ended, now or in its previous run (a restarted container keeps the reason)."""
    for status in container_statuses(pod):
        for state in (status.state, status.last_state):
            if state and state.terminated:
                return state.terminated
    return None


def terminated_container(pod: client.V1Pod) -> str | None:
    """The name of the container terminated_state() describes."""
    for status in container_statuses(pod):
        for state in (status.state, status.last_state):
            if state and state.terminated:
                return status.name
    return None


def restart_count(pod: client.V1Pod) -> int:
    return sum(status.restart_count for status in container_statuses(pod))


def memory_limit(pod: client.V1Pod) -> str | None:
    """The first container's memory limit, as written in the spec (12Gi); None without one."""
    for container in pod.spec.containers if pod.spec else []:
        limits = container.resources.limits if container.resources else None
        if limits and limits.get("memory"):
            return str(limits["memory"])
    return None
