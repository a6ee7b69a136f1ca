"""What the smoke-test driver saw of a run at one poll, as plain data.

The driver (smoke.py) builds an Observation from the API's objects after every poll: the workload's
conditions (a Job's, a TrainJob's or a PyTorchJob's), the Volcano PodGroup's when the run is a gang, each
pod's state, the trainer's log so far, and how long each trouble has lasted. The verdict (verdict.py)
is a pure function of it, so a run can be recorded as JSON and judged again in a test.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Mode = Literal["gpu", "cpu"]
# The trainer's progress line, e.g. "epoch 3/10  loss 1.0 ...".
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+)\b")


@dataclass(frozen=True)
class Condition:
    """One of the workload's conditions (Complete, Succeeded, Failed, FailureTarget, ...) or the PodGroup's
    (Unschedulable, Scheduled), as the API states it."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None


@dataclass(frozen=True)
class Waiting:
    """A container that has not started: ContainerCreating, ImagePullBackOff, CreateContainerConfigError, ..."""

    reason: str
    message: str | None = None


@dataclass(frozen=True)
class Terminated:
    """A container that ended, now or in its previous run."""

    exit_code: int
    reason: str | None = None
    # The trainer writes its metrics (or its error) here; with FallbackToLogsOnError, the end of its log.
    message: str | None = None
    # Which container it was (the trainer, or the init container that fetches the data).
    container: str | None = None


@dataclass(frozen=True)
class PodObservation:
    name: str
    phase: str = "Pending"
    # The pod's index in an Indexed Job; "" for a single-pod Job.
    index: str = ""
    node: str | None = None
    # The pod's own reason and message, set when it failed as a whole (Evicted, DeadlineExceeded).
    reason: str | None = None
    message: str | None = None
    # The scheduler's message while it finds no node for the pod.
    unschedulable: str | None = None
    waiting: Waiting | None = None
    terminated: Terminated | None = None
    memory_limit: str | None = None
    restarts: int = 0
    # Seconds into the run when the driver first saw the pod unschedulable, and first saw it waiting for
    # its image: both troubles are only final once they have lasted their grace period.
    unschedulable_since: float | None = None
    image_pull_since: float | None = None

    @property
    def state(self) -> str:
        """The pod in a few words, for the live view and the verdict: Running, Pending (ImagePullBackOff), ..."""
        if self.phase == "Pending":
            if self.unschedulable:
                return "Pending (Unschedulable)"
            return f"Pending ({self.waiting.reason})" if self.waiting else "Pending"
        if self.phase == "Failed" and self.terminated:
            return f"Failed ({self.terminated.reason or f'exit {self.terminated.exit_code}'})"
        return self.phase


@dataclass(frozen=True)
class PodGroupObservation:
    """Volcano's PodGroup of the run: the gang that is scheduled whole or not at all."""

    name: str
    phase: str | None = None
    min_member: int = 0
    queue: str | None = None
    conditions: tuple[Condition, ...] = ()
    # Seconds into the run when the driver first saw the gang unschedulable.
    unschedulable_since: float | None = None

    @property
    def unschedulable(self) -> str | None:
        """Volcano's message while it cannot place the whole gang; None once it could."""
        if self.phase in ("Running", "Completed"):
            return None
        found = next((c for c in self.conditions if c.type == "Unschedulable" and c.status == "True"), None)
        return (found.message or found.reason or "Unschedulable") if found else None


@dataclass(frozen=True)
class Observation:
    namespace: str
    mode: Mode
    # Seconds since the run began (before its objects were created).
    elapsed_s: float
    # The workload's conditions; `workload` is its kind (Job, TrainJob, PyTorchJob).
    job_conditions: tuple[Condition, ...] = ()
    workload: str = "Job"
    podgroup: PodGroupObservation | None = None
    # Ordered by Job index, then name: the first pod is the one whose log is followed.
    pods: tuple[PodObservation, ...] = ()
    # The followed pod's log, every line so far.
    log_lines: tuple[str, ...] = ()
    # Polls in a row that the API server did not answer, and what went wrong with the last one. While it
    # does not answer, the job, pods and log are those of the last poll it answered.
    api_errors: int = 0
    api_error: str | None = None

    def pods_summary(self) -> str:
        return ", ".join(f"{pod.name} {pod.state}" for pod in self.pods) or "none created"


def epoch_reached(lines: Iterable[str]) -> tuple[int, int] | None:
    """The last (epoch, epochs) the trainer reported in these lines; None when it reported none."""
    reached = None
    for line in lines:
        match = EPOCH_LINE.match(line)
        if match:
            reached = int(match.group(1)), int(match.group(2))
    return reached
