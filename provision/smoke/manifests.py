"""The smoke test's Kubernetes objects, rendered from the templates in manifests/smoke/.

A run is one namespace holding a ConfigMap with the trainer's source and one workload: a single-pod Job, or
an Indexed Job plus a headless Service for several nodes (torchrun with a c10d rendezvous on pod index 0), a
PyTorchJob (Kubeflow Training Operator v1), or a TrainJob with its own TrainingRuntime (Kubeflow Trainer
v2). Under Volcano the pods are one gang: a PodGroup whose minMember is the number of pods. A multi-node
run times an all-reduce (bandwidth.py) before training. With dataset cifar10 and a cache, an init container
fetches the archive into a hostPath or a PVC once; with --save, rank 0's model is left there for the driver.
"""
from __future__ import annotations

import functools
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any, Literal

import jinja2
import yaml

from provision.inputs.settings import CACHE_MARKER
from provision.resources import MANIFESTS_DIR, TRAINER_DIR
from provision.smoke.kinds import Cache, Scheduler, Workload

TEMPLATES_DIR = MANIFESTS_DIR / "smoke"
TRAINER_MOUNT = "/opt/trainer"
RUN_LABEL = "cluster-bootstrap.io/smoke-run"
RDZV_PORT = 29500
# How many times a pod polls DNS (2 s apart) for the rendezvous host before giving up.
RDZV_DNS_TRIES = 150
# The cache volume (a hostPath or a PVC) holds cifar10/ (the archive, unpacked) and runs/<name>/ (a run's
# model and metrics, until `smoke-test --save` has copied them back).
CACHE_MOUNT = "/cache"
DATA_DIR = f"{CACHE_MOUNT}/cifar10"
RUNS_DIR = f"{CACHE_MOUNT}/runs"
# The init container that fills the cache, and the one that serves a run's results for --save.
FETCH_CONTAINER = "fetch-data"
COLLECTOR_PORT = 8000
# Kubeflow Trainer v2: the replicated job and container its torch plugin configures (PET_* variables).
TRAINER_STEP_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_NODE = "node"
# Volcano: the annotation that ties a pod to its PodGroup, and the one that names a TrainJob's queue.
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_NAME_ANNOTATION = "scheduling.volcano.sh/queue-name"

# Workload, Scheduler and Cache live in kinds.py (the command line reads them there); re-exported here.
# The API each custom workload lives in: (group, version, plural).
CUSTOM_KINDS: dict[str, tuple[str, str, str]] = {
    "TrainJob": ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
    "TrainingRuntime": ("trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups"),
}
WORKLOAD_KINDS: dict[Workload, str] = {"job": "Job", "pytorchjob": "PyTorchJob", "trainjob": "TrainJob"}


@dataclass(frozen=True)
class SmokeSpec:
    """What one smoke-test run asks of the cluster and is held to. Built in one place, from the settings and the
    command's arguments (driver.build_spec); the settings' defaults are not restated here, so every field that a
    setting decides has no default."""

    namespace: str
    name: str
    image: str
    gpus: int                # GPUs per pod (per node); 0 runs on CPU
    nodes: int
    epochs: int | None       # None: the trainer's own default for its device
    dataset: Literal["synthetic", "cifar10"]
    timeout_s: int
    # Given to the pods as PIP_INDEX_URL (mirrors.pip_index), for images or commands that install packages.
    pip_index: str | None
    # Set when the NVIDIA runtime is not containerd's default: GPU pods then opt in through this RuntimeClass.
    runtime_class: str | None
    # What runs the pods, and who schedules them (volcano: one PodGroup, minMember = the pods, in `queue`).
    workload: Workload
    scheduler: Scheduler
    queue: str
    gpu_resource: str
    # The seeds' knobs: extra environment, the host's network, /dev/shm, extra resources, IPC_LOCK.
    env: Mapping[str, str]
    host_network: bool
    shm_size: str
    extra_resources: Mapping[str, str]
    ipc_lock: bool
    # The CIFAR-10 archive (dataset cifar10) and the cache it is kept in between runs.
    cifar10_url: str
    cifar10_md5: str
    cache: Cache
    cache_path: str
    cache_size: str
    # The fetch into the cache has its own deadline; the run's deadline is timeout_s plus this one.
    data_timeout_s: int
    # What the verdict holds the run to: the accuracy for its dataset, the steady images/s one GPU of each model
    # must reach, the registries' mirrors its image may come through, the link speed multi-node training needs.
    min_accuracy: float
    throughput_floors: Mapping[str, float]
    registry_mirrors: Mapping[str, Sequence[str]]
    min_link_gbps: float
    # Leave the model and metrics in the cache under runs/<name>/ for `smoke-test --save` to copy back.
    keep_results: bool = False
    # With gpu.sharing: this many single-GPU pods train at once (an Indexed Job), each on a shared replica.
    shared_pods: int = 1
    # A kept run (--keep) is removed by the TTL controller a day after it ends.
    ttl_s: int = 86_400
    cache_claim: str = "cifar10-smoke-cache"
    # The data set is already in the cache's data folder (the pipeline's prepare-data step wrote it there): the
    # trainer reads it, neither generating nor fetching it.
    data_prepared: bool = False
    # The trainer's files (none: trainer/ as the package holds it).
    trainer_files: Mapping[str, str] = field(default_factory=dict)

    @property
    def cpu(self) -> bool:
        return self.gpus == 0

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    @property
    def labels(self) -> dict[str, str]:
        return {"app.kubernetes.io/name": "cifar10-smoke", "app.kubernetes.io/managed-by": "cluster-bootstrap",
                RUN_LABEL: self.name}

    @property
    def rendezvous_host(self) -> str:
        return f"{self.name}-0.{self.name}"

    @property
    def fetches_data(self) -> bool:
        """An init container fills the cache with the archive (once per node, or once for the PVC)."""
        return self.dataset == "cifar10" and self.cache != "none" and not self.data_prepared

    @property
    def deadline_s(self) -> int:
        """The workload's activeDeadlineSeconds: training's timeout, plus the fetch's when there is one."""
        return self.timeout_s + (self.data_timeout_s if self.fetches_data else 0)

    @property
    def results_dir(self) -> str:
        return f"{RUNS_DIR}/{self.name}"

    @property
    def kind(self) -> str:
        return WORKLOAD_KINDS[self.workload]


def read_trainer_files() -> dict[str, str]:
    """Every module of trainer/ (the recipe and the modules beside it), as the pods mount them."""
    return {path.name: path.read_text() for path in sorted(TRAINER_DIR.glob("*.py"))}


def trainer_args(spec: SmokeSpec) -> list[str]:
    data_dir = DATA_DIR if spec.fetches_data or spec.data_prepared else "/work/data"
    args = ["--device", "cpu" if spec.cpu else "cuda", "--data-dir", data_dir, "--output-dir", "/work/out"]
    if spec.epochs is not None:
        args += ["--epochs", str(spec.epochs)]
    if spec.data_prepared:
        pass
    elif spec.dataset == "synthetic":
        args.append("--synthetic")
    elif not spec.fetches_data:
        # Without a cache every pod fetches the archive itself.
        args += ["--download", "--download-url", spec.cifar10_url, "--md5", spec.cifar10_md5]
    return args


def fetch_command(spec: SmokeSpec) -> str:
    """The init container's script: the archive into the cache, once; pods on one node take turns (a lock)."""
    fetch = "\n".join([
        "import fcntl, pathlib, sys, cifar_data",
        "root = pathlib.Path(sys.argv[1]); root.mkdir(parents=True, exist_ok=True)",
        'with open(root / ".lock", "w") as lock:',
        "    fcntl.flock(lock, fcntl.LOCK_EX)",
        "    try:",
        "        folder = cifar_data.locate(root, download_missing=True, url=sys.argv[2], md5=sys.argv[3])",
        "    except cifar_data.DataError as exc:",
        '        sys.exit(f"error: {exc}")',
        'print(f"CIFAR-10 ready in {folder}", flush=True)',
    ])
    claim = f"{claim_cache(f'$(dirname {shlex.quote(DATA_DIR)})')}\n" if spec.cache == "hostpath" else ""
    return (f"{claim}exec timeout {spec.data_timeout_s} python -c {shlex.quote(fetch)} "
            f"{shlex.join([DATA_DIR, spec.cifar10_url, spec.cifar10_md5])}")


def claim_cache(root: str) -> str:
    """Shell that makes the node's cache folder (a hostPath: smoke_test.cache_path) the smoke test's own before
    anything is written there: a folder that is new or empty gets CACHE_MARKER, which `reset` looks for before it
    removes the folder; one that holds other files without the mark is not used (and never removed)."""
    # Listed before the mark is looked for: a pod beside it writes the mark before anything else, so files seen
    # without the mark after them are not the smoke test's.
    return "\n".join([
        f"cache={root}; marker=\"$cache/{CACHE_MARKER}\"",
        'found=$(ls -A "$cache" 2>/dev/null)',
        'if [ ! -e "$marker" ]; then',
        '  if [ -n "$found" ]; then',
        '    echo "error: smoke_test.cache_path holds files the smoke test did not put there: choose an empty or new '
        'folder" >&2; exit 3',
        "  fi",
        '  mkdir -p "$cache" && echo "the smoke test\'s data cache (cluster-bootstrap); bootstrap reset removes this '
        'folder" > "$marker"',
        "fi",
    ])


def _bandwidth_args(spec: SmokeSpec) -> str:
    return shlex.join(["bandwidth.py", "--device", "cpu" if spec.cpu else "cuda"])


def _then_keep_results(spec: SmokeSpec, train: str) -> str:
    """Run `train` (a shell command); when results are kept, copy the model rank 0 wrote into the cache."""
    if not spec.keep_results:
        return f"exec {train}"
    return "\n".join([
        *([claim_cache(CACHE_MOUNT)] if spec.cache == "hostpath" else []),
        train,
        "status=$?",
        f'if [ "$status" = 0 ] && [ -f /work/out/model.pt ]; then mkdir -p {spec.results_dir} && '
        f"cp -p /work/out/* {spec.results_dir}/; fi",
        'exit "$status"',
    ])


def _commands(spec: SmokeSpec) -> dict[str, str]:
    args = shlex.join(trainer_args(spec))
    per_node = max(1, spec.gpus)
    if per_node == 1:
        single = _then_keep_results(spec, f"python train.py {args}")
    else:
        single = _then_keep_results(spec, f"torchrun --standalone --nnodes 1 --nproc-per-node {per_node} "
                                          f"train.py {args}")
    host = spec.rendezvous_host
    rendezvous = (f"--nnodes {spec.nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
                  f'--rdzv-endpoint "$host:{RDZV_PORT}" '
                  '--rdzv-conf "is_host=$is_host,read_timeout=300,join_timeout=600" --max-restarts 0')
    # The other pods may start before pod 0 has an address: wait for its DNS record (bounded), then meet there.
    # Before training, every process takes part in a timed all-reduce (bandwidth.py): the bus bandwidth goes
    # into the log, and a network that cannot carry NCCL fails here, by name, before any epoch.
    multi = "\n".join([
        "set -e",
        f"host={host}",
        "tries=0",
        'until python -c "import socket, sys; socket.gethostbyname(sys.argv[1])" "$host" 2>/dev/null; do',
        f'  tries=$((tries + 1)); if [ "$tries" -ge {RDZV_DNS_TRIES} ]; then',
        '    echo "rendezvous host $host never resolved: is cluster DNS working?" >&2; exit 1; fi',
        "  sleep 2",
        "done",
        'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then is_host=1; else is_host=0; fi',
        f"torchrun {rendezvous} --rdzv-id {spec.name}-bandwidth {_bandwidth_args(spec)}",
        "set +e",
        _then_keep_results(spec, f"torchrun {rendezvous} --rdzv-id {spec.name} train.py {args}"),
    ])
    static = (f"--nnodes {spec.nodes} --nproc-per-node {per_node} --node-rank \"$RANK\" "
              '--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --max-restarts 0')
    pytorchjob = "\n".join([
        *([f"torchrun {static} {_bandwidth_args(spec)} || exit $?"] if spec.multi_node else []),
        _then_keep_results(spec, f"torchrun {static} train.py {args}"),
    ])
    # Kubeflow Trainer's torch plugin passes the node count, rank and master as PET_* variables, which
    # torchrun reads; the processes per node come from the TrainJob.
    trainjob = "\n".join([
        *([f"torchrun --max-restarts 0 {_bandwidth_args(spec)} || exit $?"] if spec.multi_node else []),
        _then_keep_results(spec, f"torchrun --max-restarts 0 train.py {args}"),
    ])
    return {"single_node_command": single, "multi_node_command": multi, "pytorchjob_command": pytorchjob,
            "trainjob_command": trainjob, "fetch_command": fetch_command(spec)}


@functools.cache
def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def _source_dir(spec: SmokeSpec) -> str | None:
    """The directory on the nodes that holds a file:// archive (an offline source), mounted into the fetch."""
    if spec.fetches_data and spec.cifar10_url.startswith("file://"):
        return str(PurePosixPath(spec.cifar10_url.removeprefix("file://")).parent)
    return None


def _context(spec: SmokeSpec) -> dict[str, Any]:
    gpus = 0 if spec.cpu else spec.gpus
    volcano = spec.scheduler == "volcano"
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "image": spec.image,
        "gpus": gpus,
        "gpu_resource": spec.gpu_resource,
        "runtime_class": None if spec.cpu else spec.runtime_class,
        "pip_index": spec.pip_index,
        "nodes": spec.nodes,
        "per_node": max(1, spec.gpus),
        "timeout_s": spec.deadline_s,
        "ttl_s": spec.ttl_s,
        "labels": yaml.safe_dump(spec.labels, default_flow_style=False).strip(),
        "run_label": RUN_LABEL,
        "rdzv_port": RDZV_PORT,
        "trainer_mount": TRAINER_MOUNT,
        "trainer_files": spec.trainer_files or read_trainer_files(),
        "cpu_request": "1" if spec.cpu else "2",
        "cpu_threads": 2,
        "memory_request": "1Gi" if spec.cpu else "4Gi",
        "memory_limit": "4Gi" if spec.cpu else f"{8 + 4 * gpus}Gi",
        "env": spec.env,
        "host_network": spec.host_network,
        "shm_size": spec.shm_size,
        "extra_resources": spec.extra_resources,
        "ipc_lock": spec.ipc_lock,
        "scheduler_name": "volcano" if volcano else None,
        # Our own PodGroup for a Job or PyTorchJob; Kubeflow Trainer makes the TrainJob's from its runtime.
        "group_name": spec.name if volcano and spec.workload != "trainjob" else None,
        "volcano": volcano,
        "queue": spec.queue,
        "queue_annotation": QUEUE_NAME_ANNOTATION,
        "group_annotation": GROUP_NAME_ANNOTATION,
        "cache": spec.cache if (spec.fetches_data or spec.keep_results) else "none",
        "cache_path": spec.cache_path,
        "cache_claim": spec.cache_claim,
        "cache_size": spec.cache_size,
        "cache_mount": CACHE_MOUNT,
        "fetches_data": spec.fetches_data,
        "fetch_container": FETCH_CONTAINER,
        "source_dir": _source_dir(spec),
        "trainer_step_label": TRAINER_STEP_LABEL,
        "trainer_node": TRAINER_NODE,
        "collector_port": COLLECTOR_PORT,
        "results_dir": spec.results_dir,
        "shared_pods": spec.shared_pods,
        **_commands(spec),
    }


def render_template(template: str, spec: SmokeSpec, **extra: object) -> str:
    return _environment().get_template(template).render(_context(spec) | extra)


def render(spec: SmokeSpec, workload: Workload | None = None) -> list[dict[str, Any]]:
    """The objects of one run, in the order they are applied: Namespace, ConfigMap, [PersistentVolumeClaim],
    then the workload: [Service,] Job; PyTorchJob; or TrainingRuntime and TrainJob; with Volcano, a PodGroup
    ahead of a Job or PyTorchJob. `workload` overrides the spec's."""
    if workload is not None:
        spec = replace(spec, workload=workload)
    templates = ["namespace.yaml.j2", "trainer-configmap.yaml.j2"]
    if _context(spec)["cache"] == "pvc":
        templates.append("cache-pvc.yaml.j2")
    if spec.scheduler == "volcano" and spec.workload != "trainjob":
        templates.append("podgroup.yaml.j2")
    if spec.workload == "pytorchjob":
        templates.append("pytorchjob.yaml.j2")
    elif spec.workload == "trainjob":
        templates.append("trainjob.yaml.j2")
    else:
        templates.append("job-multinode.yaml.j2" if spec.multi_node else "job.yaml.j2")
    objects: list[dict[str, Any]] = []
    for template in templates:
        objects += [doc for doc in yaml.safe_load_all(render_template(template, spec)) if doc]
    return objects


def collector_pod(spec: SmokeSpec, node: str | None) -> dict[str, Any]:
    """A pod that serves one run's results from the cache (on the node rank 0 ran on, for a hostPath) so that
    `smoke-test --save` can copy them through the API server; it removes them when it is deleted."""
    return yaml.safe_load(render_template("collector.yaml.j2", spec, node=node))


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the trainer's source, the pod scripts) as readable `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, width=120)
