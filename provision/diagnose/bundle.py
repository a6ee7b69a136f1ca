"""`bootstrap support-bundle`: one archive with what a maintainer needs to tell what went wrong, secrets removed.

From each node (one SSH command, through sudo, reading only): the journals of the kubelet, containerd, Docker,
chrony and of what Ansible ran there since boot, the kubeadm, kubelet and containerd configurations, `crictl`'s
view, addresses, routes and firewall rules, os-release, the kernel, the kernel log and `nvidia-smi -q` where there
is one. From the API, where it answers: the nodes, the events, kube-system's pods with their descriptions and
logs, and the pods of the last smoke test. From this machine: the inventory and settings, the cluster's state and
the last runs' logs (never the admin kubeconfig). And the doctor's report, which the caller passes in.

Every text goes through the redaction pass (redact.py) before it is written. Each file is cut at a size limit,
and the whole at another; what was cut or left out, and why, is listed in the archive's MANIFEST.txt. A part
that cannot be collected (a node unreachable, the API down) is named there and the rest is collected.
"""
from __future__ import annotations

import io
import os
import secrets
import shlex
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from provision.diagnose.redact import redact
from provision.errors import BootstrapError, InputError
from provision.inputs.inventory import Cluster
from provision.inputs.settings import Settings
from provision.inputs.state import cluster_dir, runs_root
from provision.inputs.values import creatable_directory_problem
from provision.kube.client import ApiUnreachable, call_api, load_api_client
from provision.kube.pods import container_statuses, node_name, pod_labels, pod_name, pod_namespace
from provision.nodes.probe import NodeProbe, Reading, probe_nodes
from provision.render.node_paths import KUBEADM_CONFIG, KUBELET_CONF, STATIC_POD_DIR
from provision.smoke.manifests import RUN_LABEL

COLLECT_TIMEOUT_S = 180
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """How much goes in: per file, in all, and how far back journals, the kernel log and pod logs reach."""

    file_bytes: int = MIB
    total_bytes: int = 100 * MIB
    journal_lines: int = 5000
    dmesg_lines: int = 2000
    log_lines: int = 2000
    runs: int = 10


# What is read on each node: (file in the bundle, shell command). Commands are fixed here; nothing from the user
# reaches them.
def node_items(limits: Limits) -> tuple[tuple[str, str], ...]:
    journal = f"journalctl -b --no-pager -o short-iso -n {limits.journal_lines}"
    return (
        ("os-release.txt", "cat /etc/os-release"),
        ("kernel.txt", "uname -a; cat /proc/cmdline"),
        ("journal/kubelet.txt", f"{journal} -u kubelet"),
        ("journal/containerd.txt", f"{journal} -u containerd"),
        ("journal/docker.txt", f"{journal} -u docker"),
        ("journal/chrony.txt", f"{journal} -u chrony -u chronyd"),
        # What the roles did on the node: Ansible's modules log each invocation (no_log ones censored).
        ("journal/ansible.txt", f"journalctl -b --no-pager -o short-iso | grep -F ' ansible-' | "
                                f"tail -n {limits.journal_lines}"),
        ("dmesg.txt", f"dmesg -T 2>/dev/null | tail -n {limits.dmesg_lines}"),
        ("containerd-config-dump.toml", "containerd config dump"),
        ("crictl-ps.txt", "crictl ps -a"),
        ("crictl-pods.txt", "crictl pods"),
        ("crictl-info.json", "crictl info"),
        ("ip-addr.txt", "ip addr"),
        ("ip-route.txt", "ip route; ip -6 route; ip rule"),
        ("iptables.txt", "iptables-save; ip6tables-save"),
        ("nftables.txt", "nft list ruleset"),
        ("systemctl-status.txt", "systemctl status --no-pager --full kubelet containerd docker"),
        ("units-failed.txt", "systemctl --failed --no-pager"),
        ("disk.txt", "df -h; df -i"),
        ("memory.txt", "free -m"),
        ("certs.txt", "for f in /etc/kubernetes/pki/*.crt /etc/kubernetes/pki/etcd/*.crt; do [ -f \"$f\" ] && "
                      "echo \"$f $(openssl x509 -noout -enddate -in \"$f\")\"; done"),
        ("nvidia-smi-q.txt", "command -v nvidia-smi >/dev/null && timeout 60 nvidia-smi -q"),
    )


# Files copied as they are (globs expanded on the node); the admin kubeconfigs and private keys are not among them.
NODE_FILES = (
    KUBEADM_CONFIG, KUBELET_CONF, f"{STATIC_POD_DIR}/*.yaml", "/var/lib/kubelet/config.yaml",
    "/var/lib/kubelet/kubeadm-flags.env", "/etc/default/kubelet", "/etc/sysconfig/kubelet",
    "/etc/systemd/system/kubelet.service.d/*.conf", "/usr/lib/systemd/system/kubelet.service.d/*.conf",
    "/etc/containerd/config.toml", "/etc/containerd/conf.d/*.toml", "/etc/crictl.yaml", "/etc/hosts",
    "/etc/resolv.conf", "/etc/fstab", "/etc/sysctl.d/99-cluster-bootstrap.conf",
    "/etc/modules-load.d/cluster-bootstrap.conf", "/etc/apt/sources.list.d/cb-*", "/etc/yum.repos.d/cb-*",
)


def collect_script(boundary: str, limits: Limits) -> str:
    """One script for a node: each item headed by `<boundary> <file>`, each cut one byte past the limit (so the
    reader can tell it was cut)."""
    cut = f"head -c {limits.file_bytes + 1}"
    lines = [f"b={shlex.quote(boundary)}"]
    for name, command in node_items(limits):
        lines.append(f"echo \"$b {name}\"; {{ {command} ; }} 2>&1 | {cut}; echo")
    lines.append(f"for f in {' '.join(NODE_FILES)}; do [ -f \"$f\" ] || continue; echo \"$b files$f\"; "
                 f"{cut} \"$f\"; echo; done")
    lines.append('echo "$b end"')
    return "\n".join(lines) + "\n"


def split_output(text: str, boundary: str) -> dict[str, str]:
    """The collect script's output -> file in the bundle -> its text (each without the newline the script adds)."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.split("\n"):
        if line.startswith(boundary + " "):
            name = line[len(boundary) + 1:].strip()
            current = None if name == "end" else found.setdefault(name, [])
            continue
        if current is not None:
            current.append(line)
    return {name: "\n".join(lines[:-1] if lines and lines[-1] == "" else lines) for name, lines in found.items()}


@dataclass
class Entry:
    path: str
    size: int  # bytes as read (a file cut on the node: one byte past the limit, so "more than the limit")
    kept: int  # bytes written, redacted and cut
    redactions: int
    cut: bool = False


@dataclass
class BundleResult:
    path: Path
    limits: Limits
    entries: list[Entry] = field(default_factory=list)
    # What could not be collected or was left out, and why.
    missing: list[str] = field(default_factory=list)
    archive_bytes: int = 0
    elapsed_s: float = 0.0

    @property
    def text_bytes(self) -> int:
        return sum(e.kept for e in self.entries)

    @property
    def redactions(self) -> int:
        return sum(e.redactions for e in self.entries)


class _Builder:
    """The archive's files in memory, redacted and cut as they are added."""

    def __init__(self, limits: Limits, known_secrets: Iterable[str]) -> None:
        self.limits = limits
        self.known = tuple(known_secrets)
        self.files: dict[str, bytes] = {}
        self.entries: list[Entry] = []
        self.missing: list[str] = []
        self.total = 0

    def add(self, path: str, text: str) -> None:
        size = len(text.encode("utf-8", "replace"))
        clean, count = redact(text, self.known)
        data = clean.encode("utf-8", "replace")
        # Cut here, or on the node (which reads one byte past the limit to tell).
        cut = len(data) > self.limits.file_bytes or size > self.limits.file_bytes
        data = data[:self.limits.file_bytes]
        if self.total + len(data) > self.limits.total_bytes:
            self.missing.append(f"{path}: left out, the bundle reached its limit of {shown_size(self.limits.total_bytes)}")
            return
        self.files[path] = data
        self.total += len(data)
        self.entries.append(Entry(path, size, len(data), count, cut))


def shown_size(count: int) -> str:
    return f"{count / MIB:.1f} MiB" if count >= MIB else f"{count / 1024:.0f} KiB"


# --- the nodes ------------------------------------------------------------------------------------------------

def collect_probe(limits: Limits) -> NodeProbe[dict[str, str]]:
    """The bundle's probe: the collect script (its boundary new for each bundle: a collected file cannot fake a
    header), read into file -> text."""
    boundary = f"@@cb-bundle-{secrets.token_hex(8)}@@"

    def parse(reading: Reading) -> dict[str, str]:
        found = split_output(reading.stdout, boundary)
        if not found:
            raise ValueError("the collection printed nothing")
        return found

    return NodeProbe("collect", lambda _: collect_script(boundary, limits), parse, timeout_s=COLLECT_TIMEOUT_S)


# --- the API --------------------------------------------------------------------------------------------------

def _plain(api: client.ApiClient, obj: Any) -> Any:
    """An API object as the API serves it (camelCase), without the managedFields noise."""
    data = api.sanitize_for_serialization(obj)
    for item in data if isinstance(data, list) else [data]:
        if isinstance(item, dict):
            item.get("metadata", {}).pop("managedFields", None)
    return data


def _yaml(data: Any) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)


def _event_line(event: client.CoreV1Event) -> str:
    when = event.last_timestamp or event.event_time or (event.metadata.creation_timestamp if event.metadata else None)
    obj = event.involved_object
    what = f"{obj.kind}/{obj.name}" if obj else "-"
    return f"{when or '-'} {event.type or '-'} {event.reason or '-'} {pod_namespace_of(event)}{what}: {event.message or ''}"


def pod_namespace_of(event: client.CoreV1Event) -> str:
    namespace = event.involved_object.namespace if event.involved_object else None
    return f"{namespace}/" if namespace else ""


def _pod_files(api: client.ApiClient, pod: client.V1Pod, events: list[client.CoreV1Event], where: str,
               limits: Limits, add: Callable[[str, str], None]) -> None:
    core = client.CoreV1Api(api)
    name, namespace = pod_name(pod), pod_namespace(pod)
    own = [e for e in events if e.involved_object and e.involved_object.name == name
           and e.involved_object.namespace == namespace]
    add(f"{where}/describe/{name}.txt", _yaml(_plain(api, pod)) + "\n# events\n" +
        "\n".join(_event_line(e) for e in own) + "\n")
    restarted = {status.name for status in container_statuses(pod) if status.restart_count}
    for container in (pod.spec.containers if pod.spec else []):
        # The run before the last, where there was one (a crash loop's cause is often only there).
        for previous in (False, True) if container.name in restarted else (False,):
            try:
                log = call_api(api, core.read_namespaced_pod_log, name, namespace, container=container.name,
                               tail_lines=limits.log_lines, previous=previous)
            except ApiException:
                continue
            add(f"{where}/logs/{name}/{container.name}{'.previous' if previous else ''}.log", str(log))


def collect_api(api: client.ApiClient, limits: Limits, add: Callable[[str, str], None]) -> None:
    """Nodes, events, kube-system's pods (descriptions and logs) and the last smoke test's pods."""
    core = client.CoreV1Api(api)
    nodes = call_api(api, core.list_node)
    add("api/nodes.yaml", _yaml(_plain(api, nodes.items)))
    events = list(call_api(api, core.list_event_for_all_namespaces).items)
    events.sort(key=lambda e: str(e.last_timestamp or e.event_time or ""))
    add("api/events.txt", "\n".join(_event_line(e) for e in events[-limits.log_lines:]) + "\n")
    pods = list(call_api(api, core.list_namespaced_pod, "kube-system").items)
    add("api/kube-system/pods.txt", "\n".join(f"{pod_name(p)} {node_name(p) or '-'} "
                                              f"{(p.status.phase if p.status else None) or '-'}" for p in pods) + "\n")
    for pod in pods:
        _pod_files(api, pod, events, "api/kube-system", limits, add)
    smoke = list(call_api(api, core.list_pod_for_all_namespaces, label_selector=RUN_LABEL).items)
    if smoke:
        # The last run: the one whose newest pod is the newest.
        newest = max(smoke, key=lambda p: str(p.metadata.creation_timestamp if p.metadata else ""))
        last = pod_labels(newest).get(RUN_LABEL)
        for pod in (p for p in smoke if pod_labels(p).get(RUN_LABEL) == last):
            _pod_files(api, pod, events, f"api/smoke/{pod_namespace(pod)}", limits, add)


# --- this machine ------------------------------------------------------------------------------------------------

def local_files(cluster: Cluster, config: Path | None, limits: Limits) -> dict[str, Path]:
    """The inputs, the cluster's state and the last runs' logs; the admin kubeconfig stays out (it is the cluster's
    key)."""
    chosen = {f"local/inputs/{cluster.inventory_path.name}": cluster.inventory_path}
    if config is not None:
        chosen[f"local/inputs/{config.name}"] = config
    state = cluster_dir(cluster, create=False) / "state.json"
    if state.is_file():
        chosen["local/state.json"] = state
    runs = sorted((p for p in runs_root().glob("*/run.log") if p.is_file()), key=lambda p: p.parent.name)
    for log in runs[-limits.runs:]:
        chosen[f"local/runs/{log.parent.name}/run.log"] = log
    return chosen


# --- the archive ----------------------------------------------------------------------------------------------------

def check_output_path(out: Path) -> Path:
    """Where the archive goes: a new file in a directory that exists and this user writes in (refused before
    anything is collected)."""
    if out.exists() or out.is_symlink():
        raise InputError(f"{out} exists: `bootstrap support-bundle` never overwrites; pass another -o FILE")
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: no such directory: pass -o FILE in a directory that exists")
    problem = creatable_directory_problem(out.parent)
    if problem:
        raise InputError(f"-o {out}: {problem}")
    return out


def _manifest(result: BundleResult, started: datetime) -> str:
    limits = result.limits
    lines = [f"cluster-bootstrap support bundle, {started:%Y-%m-%d %H:%M:%S %z}",
             f"limits: {shown_size(limits.file_bytes)} per file, {shown_size(limits.total_bytes)} in all; journals "
             f"{limits.journal_lines} lines, kernel log {limits.dmesg_lines} lines, pod logs {limits.log_lines} lines, "
             f"the last {limits.runs} runs",
             "every file went through the redaction pass: secrets read REDACTED", "",
             "file  bytes kept / before  redactions"]
    for entry in result.entries:
        cut = f" (cut at {shown_size(limits.file_bytes)})" if entry.cut else ""
        lines.append(f"{entry.path}  {entry.kept} / {entry.size}{cut}  {entry.redactions}")
    if result.missing:
        lines += ["", "not collected:", *(f"  {line}" for line in result.missing)]
    return "\n".join(lines) + "\n"


def write_archive(out: Path, top: str, files: Mapping[str, bytes]) -> int:
    """A tar.gz of `files` under `top/`, mode 0600, made beside `out` and linked into place (never over a file
    that appeared meanwhile). Returns its size."""
    fd, scratch = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as handle, tarfile.open(fileobj=handle, mode="w:gz") as archive:
            for path, data in files.items():
                info = tarfile.TarInfo(f"{top}/{path}")
                info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
                archive.addfile(info, io.BytesIO(data))
        try:
            os.link(scratch, out)
        except FileExistsError:
            raise InputError(f"{out} appeared while the bundle was made: pass another -o FILE") from None
        return out.stat().st_size
    finally:
        Path(scratch).unlink(missing_ok=True)


def collect_bundle(cluster: Cluster, settings: Settings, out: Path, *, config: Path | None = None,
                   kubeconfig: Path, reports: Mapping[str, str] | None = None, become_password: str | None = None,
                   limits: Limits = Limits(), now: datetime | None = None) -> BundleResult:
    """Collect, redact, cut and write the archive to `out` (which must not exist). `reports`: texts made by the
    caller (the doctor's report) -> their file in the bundle."""
    started = time.monotonic()
    moment = now or datetime.now().astimezone()
    check_output_path(out)
    known = [become_password] if become_password else []
    builder = _Builder(limits, known)
    for path, text in (reports or {}).items():
        builder.add(path, text)
    collected = probe_nodes(cluster.nodes, collect_probe(limits), settings.ssh, become_password=become_password)
    for name, outcome in collected.items():
        if outcome.value is None:
            why = outcome.problems[0]
            builder.missing.append(f"nodes/{name}: not collected: {why.detail}" + (f" ({why.fix})" if why.fix else ""))
            continue
        for item, text in outcome.value.items():
            builder.add(f"nodes/{name}/{item}", text)
    if kubeconfig.is_file():
        try:
            collect_api(load_api_client(kubeconfig), limits, builder.add)
        except (ApiUnreachable, BootstrapError, ApiException) as exc:
            builder.missing.append(f"api: not collected (the node-side parts are): {exc}")
    else:
        builder.missing.append(f"api: not collected: no admin kubeconfig at {kubeconfig}")
    for path, source in local_files(cluster, config, limits).items():
        try:
            builder.add(path, source.read_text(errors="replace"))
        except OSError as exc:
            builder.missing.append(f"{path}: not read ({exc.strerror})")
    result = BundleResult(out, limits, builder.entries, builder.missing)
    result.elapsed_s = time.monotonic() - started
    files = {"MANIFEST.txt": _manifest(result, moment).encode(), **builder.files}
    result.archive_bytes = write_archive(out, f"cluster-bootstrap-support-{moment:%Y%m%d-%H%M%S}", files)
    return result
