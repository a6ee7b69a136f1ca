"""The smoke test's Kubernetes objects, rendered from the templates in manifests/smoke/.

A run is one namespace holding a ConfigMap with the trainer's source, and either a single-pod Job, or an
Indexed Job plus a headless Service for several nodes (torchrun with a c10d rendezvous on pod index 0),
or a PyTorchJob for clusters that run the Kubeflow training operator.
"""
from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

import jinja2
import yaml

from provision.inputs.settings import GPU_RESOURCE
from provision.resources import MANIFESTS_DIR, TRAINER_DIR

TEMPLATES_DIR = MANIFESTS_DIR / "smoke"
TRAINER_FILES = ("train.py", "cifar_data.py", "infer.py")
TRAINER_MOUNT = "/opt/trainer"
RUN_LABEL = "cluster-bootstrap.io/smoke-run"
RDZV_PORT = 29500
# How many times a pod polls DNS (2 s apart) for the rendezvous host before giving up.
RDZV_DNS_TRIES = 150

Variant = Literal["job", "pytorchjob"]


@dataclass(frozen=True)
class SmokeSpec:
    """What one smoke-test run asks of the cluster."""

    namespace: str
    image: str
    name: str = "cifar10-smoke"
    gpus: int = 1            # GPUs per pod (per node); 0 runs on CPU
    nodes: int = 1
    epochs: int | None = None  # None: the trainer's own default for its device
    dataset: Literal["synthetic", "cifar10"] = "synthetic"
    timeout_s: int = 900
    # Given to the pods as PIP_INDEX_URL (mirrors.pip_index), for images or commands that install packages.
    pip_index: str | None = None
    # A kept run (--keep) is removed by the TTL controller a day after it ends.
    ttl_s: int = 86_400
    trainer_files: dict[str, str] = field(default_factory=dict)
    # Set when the NVIDIA runtime is not containerd's default: GPU pods then opt in through this RuntimeClass.
    runtime_class: str | None = None

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


def read_trainer_files() -> dict[str, str]:
    return {name: (TRAINER_DIR / name).read_text() for name in TRAINER_FILES}


def trainer_args(spec: SmokeSpec) -> list[str]:
    args = ["--device", "cpu" if spec.cpu else "cuda", "--data-dir", "/work/data", "--output-dir", "/work/out"]
    if spec.epochs is not None:
        args += ["--epochs", str(spec.epochs)]
    args.append("--synthetic" if spec.dataset == "synthetic" else "--download")
    return args


def _commands(spec: SmokeSpec) -> dict[str, str]:
    args = shlex.join(trainer_args(spec))
    per_node = max(1, spec.gpus)
    if per_node == 1:
        single = f"exec python train.py {args}"
    else:
        single = f"exec torchrun --standalone --nnodes 1 --nproc-per-node {per_node} train.py {args}"
    host = spec.rendezvous_host
    # The other pods may start before pod 0 has an address: wait for its DNS record (bounded), then meet there.
    multi = "\n".join([
        f"host={host}",
        "tries=0",
        'until python -c "import socket, sys; socket.gethostbyname(sys.argv[1])" "$host" 2>/dev/null; do',
        f'  tries=$((tries + 1)); if [ "$tries" -ge {RDZV_DNS_TRIES} ]; then',
        '    echo "rendezvous host $host never resolved: is cluster DNS working?" >&2; exit 1; fi',
        "  sleep 2",
        "done",
        'if [ "$JOB_COMPLETION_INDEX" = 0 ]; then is_host=1; else is_host=0; fi',
        f"exec torchrun --nnodes {spec.nodes} --nproc-per-node {per_node} --rdzv-backend c10d "
        f'--rdzv-endpoint "$host:{RDZV_PORT}" --rdzv-id {spec.name} '
        '--rdzv-conf "is_host=$is_host,read_timeout=300,join_timeout=600" --max-restarts 0 '
        f"train.py {args}",
    ])
    pytorchjob = (f"exec torchrun --nnodes {spec.nodes} --nproc-per-node {per_node} --node-rank \"$RANK\" "
                  f'--master-addr "$MASTER_ADDR" --master-port "$MASTER_PORT" --max-restarts 0 train.py {args}')
    return {"single_node_command": single, "multi_node_command": multi, "pytorchjob_command": pytorchjob}


def _environment() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES_DIR), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False)


def _context(spec: SmokeSpec) -> dict[str, Any]:
    gpus = 0 if spec.cpu else spec.gpus
    return {
        "name": spec.name,
        "namespace": spec.namespace,
        "image": spec.image,
        "gpus": gpus,
        "gpu_resource": GPU_RESOURCE,
        "runtime_class": None if spec.cpu else spec.runtime_class,
        "pip_index": spec.pip_index,
        "nodes": spec.nodes,
        "timeout_s": spec.timeout_s,
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
        **_commands(spec),
    }


def render_template(template: str, spec: SmokeSpec) -> str:
    return _environment().get_template(template).render(_context(spec))


def render(spec: SmokeSpec, variant: Variant = "job") -> list[dict[str, Any]]:
    """The objects of one run, in the order they are applied: Namespace, ConfigMap, [Service], Job."""
    if variant == "pytorchjob":
        workload = "pytorchjob.yaml.j2"
    else:
        workload = "job-multinode.yaml.j2" if spec.multi_node else "job.yaml.j2"
    objects: list[dict[str, Any]] = []
    for template in ("namespace.yaml.j2", "trainer-configmap.yaml.j2", workload):
        objects += [doc for doc in yaml.safe_load_all(render_template(template, spec)) if doc]
    return objects


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (the trainer's source, the pod scripts) as readable `|` blocks."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def to_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, width=120)
