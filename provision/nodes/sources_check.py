"""Sources proven before any change: the index file of every package repository and manifest a run will use,
requested from the nodes themselves (the network path the packages will take), each failure named with the
setting that changes it.

`source_indexes` lists what one node will fetch (its platform's repository layouts, the GPU stack where it is a
GPU node, and on the first control plane the manifests: Calico's, the add-ons' raw files and git repositories);
`probe_script` asks for them in one round trip, reading only, with the Python the node has for Ansible anyway
(sources_ask.py runs there: minimal nodes have neither curl nor wget); `check_sources` does both for every node of
a run, in parallel, through the probe runner (nodes/probe.py); `request_indexes` asks from one Shell (this
machine). Preflight runs it before prepare touches a
node, and `bootstrap config check-sources` runs it alone. What it does not request: the images (containerd pulls
them through the registry mirrors), the pip index and the CIFAR-10 archive (the smoke test's pods fetch those, from
the pod network).
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from provision.inputs.addons import ADDONS
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import Platform
from provision.inputs.settings import Settings
from provision.inputs.sources import Sources, resolve_sources, unserved_images
from provision.nodes.probe import NodeProbe, probe_nodes
from provision.nodes.ssh import Shell
from provision.render.addons import part_source
from provision.render.images import own_images
from provision.render.manifests import calico_source

REQUEST_TIMEOUT_S = 20
# The whole round trip: every index one after the other on a slow mirror, and the SSH set-up.
PROBE_TIMEOUT_S = 300


@dataclass(frozen=True)
class SourceIndex:
    """One index file a run fetches: what it is, the setting that moves it, and its URL (http(s) or file)."""

    name: str
    setting: str
    url: str


@dataclass(frozen=True)
class SourceAnswer:
    index: SourceIndex
    ok: bool
    # What came back: "HTTP 200", "HTTP 404", "could not connect", "timed out", "no such file" ...
    detail: str
    # False: the node could not ask at all (no Python): the cause is the node, not the source.
    asked: bool = True


@dataclass(frozen=True)
class NodeTarget:
    """What a node fetches depends on: its platform row, its architecture, its release's codename, whether it is a
    GPU node, and where its containerd comes from (Docker's repository or the distribution)."""

    node: Node
    platform: Platform
    arch: str = "x86_64"
    codename: str = ""
    release: str = ""
    gpu: bool = False
    containerd_source: str = "docker"
    # The interpreter Ansible runs there (preflight's choice), which asks for the indexes; None: the platform's.
    python: str | None = None


@dataclass(frozen=True)
class SourcesReport:
    answers: dict[str, tuple[SourceAnswer, ...]] = field(default_factory=dict)  # node name -> its answers
    # Nodes that could not be asked (SSH), with why.
    unreached: dict[str, str] = field(default_factory=dict)
    # Images the settings' registry mirrors are known not to serve (judged here: inputs/sources.py unserved_images).
    images: tuple[str, ...] = ()

    @property
    def failures(self) -> list[SourceAnswer]:
        return [a for answers in self.answers.values() for a in answers if not a.ok]

    def lines(self) -> list[str]:
        """One line per source that failed, naming the nodes it failed from and the setting that changes it."""
        grouped: dict[tuple[SourceIndex, str], list[str]] = {}
        unasked: dict[str, str] = {}
        for node, answers in self.answers.items():
            for answer in answers:
                if not answer.asked:
                    unasked[node] = answer.detail
                elif not answer.ok:
                    grouped.setdefault((answer.index, answer.detail), []).append(node)
        return [f"{index.name} {index.url}: {detail} from {', '.join(nodes)}: {fix(index)}"
                for (index, detail), nodes in grouped.items()] + \
               [f"{node}: its sources were {detail}: install python3 there (Ansible needs it too)"
                for node, detail in unasked.items()] + \
               [f"{node}: could not be asked for its sources ({why})" for node, why in self.unreached.items()] + \
               list(self.images)


def fix(index: SourceIndex) -> str:
    if index.setting == "offline.source":
        return "the offline source lacks it: add it there (docs/offline.md)"
    if index.setting == "mirrors.addon_manifests":
        return ("fetch it from a machine that reaches it into mirrors.addon_manifests (docs/addons.md), or use "
                "offline.source")
    return (f"set {index.setting} to a source that has it (or mirrors.profile / offline.source, docs/offline.md), "
            "or give the nodes access to it")


def _setting(settings: Settings, key: str) -> str:
    return "offline.source" if settings.offline.source else f"mirrors.{key}"


def _dnf_arch(arch: str) -> str:
    return "aarch64" if arch in ("aarch64", "arm64") else "x86_64"


def _deb_arch(arch: str) -> str:
    return "arm64" if arch in ("aarch64", "arm64") else "amd64"


def package_indexes(settings: Settings, target: NodeTarget, sources: Sources | None = None) -> list[SourceIndex]:
    """The repository indexes prepare's package transaction on this node will read (the same layouts the roles
    write: Release files for apt, repomd.xml for dnf)."""
    sources = sources or resolve_sources(settings)
    platform, minor = target.platform, settings.kubernetes.minor
    found: list[SourceIndex] = []

    def add(name: str, key: str, url: str) -> None:
        found.append(SourceIndex(name, _setting(settings, key), url))

    if platform.package_manager == "apt":
        distro = platform.ansible_distribution.lower()
        if sources.os_repo and target.codename:
            add("OS packages", "os_repo", f"{sources.os_repo}/{distro}/dists/{target.codename}/InRelease")
        if target.containerd_source == "docker" and target.codename:
            add("Docker packages", "docker_repo",
                f"{sources.docker_repo}/{platform.docker_repo}/dists/{target.codename}/InRelease")
        add("Kubernetes packages", "kubernetes_repo", f"{sources.kubernetes_repo}/v{minor}/deb/InRelease")
        if target.gpu and platform.cuda:
            add("NVIDIA CUDA packages", "nvidia_cuda_repo",
                f"{sources.nvidia_cuda_repo}/{platform.cuda.directory}/x86_64/InRelease")
        if target.gpu:
            add("NVIDIA container toolkit packages", "nvidia_toolkit_repo",
                f"{sources.nvidia_toolkit_repo}/deb/{_deb_arch(target.arch)}/InRelease")
        return found
    arch = _dnf_arch(target.arch)
    if sources.os_repo and platform.os_mirror and target.release:
        base = f"{sources.os_repo}/{platform.os_mirror.path}/{target.release}"
        for _, directory in platform.os_mirror.repos:
            add("OS packages", "os_repo", f"{base}/{directory}/{arch}/os/repodata/repomd.xml")
    if target.containerd_source == "docker":
        add("Docker packages", "docker_repo", f"{sources.docker_repo}/{platform.docker_repo}/{arch}/stable/repodata/"
                                              "repomd.xml")
    add("Kubernetes packages", "kubernetes_repo", f"{sources.kubernetes_repo}/v{minor}/rpm/repodata/repomd.xml")
    if target.gpu and platform.cuda:
        cuda = f"{sources.nvidia_cuda_repo}/{platform.cuda.directory}/x86_64/repodata/repomd.xml"
        add("NVIDIA CUDA packages", "nvidia_cuda_repo", cuda)
        if platform.cuda.signed_metadata:
            add("NVIDIA CUDA metadata signature", "nvidia_cuda_repo", f"{cuda}.asc")
    if target.gpu:
        add("NVIDIA container toolkit packages", "nvidia_toolkit_repo",
            f"{sources.nvidia_toolkit_repo}/rpm/{arch}/repodata/repomd.xml")
    return found


def _git_repository(target: str) -> str:
    """A kustomize git target (https://github.com/o/r.git/path?ref=v1) -> its repository (https://github.com/o/r.git)."""
    match = re.match(r"^(https://[^?]+?\.git)(?:/|\?|$)", target)
    return match.group(1) if match else target.split("?")[0]


def manifest_indexes(settings: Settings, *, calico: bool = True) -> list[SourceIndex]:
    """What the first control plane fetches after kubeadm init: Calico's release manifest, and each enabled
    add-on's parts (a raw file, or the git repository a kustomize target lives in: its refs, as git asks first)."""
    found = [SourceIndex("Calico manifest", _setting(settings, "calico_manifest"), calico_source(settings).url)] \
        if calico else []
    for name in settings.addons.enabled:
        for part in ADDONS[name].parts:
            fetch, source = part_source(settings, name, part.name)
            if fetch == "url":
                key = "addon_manifests" if resolve_sources(settings).addon_manifests else "github_raw"
                found.append(SourceIndex(f"{ADDONS[name].title} {part.name} manifest", _setting(settings, key), source))
            else:
                repository = _git_repository(source)
                index = SourceIndex(f"{ADDONS[name].title} git repository",
                                    "mirrors.addon_manifests", f"{repository}/info/refs?service=git-upload-pack")
                if index not in found:
                    found.append(index)
    return found


def source_indexes(settings: Settings, target: NodeTarget, *, control_plane: bool, packages: bool = True,
                   calico: bool = True) -> list[SourceIndex]:
    """The indexes one node is asked for: its packages' (`packages`), and on the first control plane Calico's
    manifest (`calico`) and the enabled add-ons'."""
    return ((package_indexes(settings, target) if packages else [])
            + (manifest_indexes(settings, calico=calico) if control_plane else []))


# --- asking the node -------------------------------------------------------------------------------------------

# The node-side program (sources_ask.py), sent as text and run with the node's own Python.
ASK_PROGRAM = (Path(__file__).with_name("sources_ask.py")).read_text()
NO_PYTHON = "no-python"
# sources_ask.CAUSES as the lines say them.
ASK_CAUSES = {"resolve": "the host name does not resolve", "refused": "could not connect", "connect": "could not connect",
              "timeout": "timed out", "certificate": "its TLS certificate is not trusted",
              "tls": "TLS handshake failed", "reset": "connection reset", "empty": "empty answer"}


def interpreters(target: NodeTarget) -> tuple[str, ...]:
    """The interpreters the node is asked with, the first found: the one Ansible runs there (preflight's choice,
    else the platform's), then the platform's dnf Python (EL8's platform-python, there while prepare installs the
    chosen one)."""
    platform = target.platform
    return tuple(dict.fromkeys(p for p in (target.python, platform.python, platform.dnf_python) if p))


def probe_script(indexes: Iterable[SourceIndex], pythons: Iterable[str] = ("/usr/bin/python3",)) -> str:
    """One POSIX sh script that requests each index with the first of `pythons` the node has (python3 on its PATH
    as a last resort) and prints `<n> <HTTP code> <cause>` per index (sources_ask.py), or `no-python`. It writes
    nothing on the node."""
    urls = [index.url for index in indexes]
    return (f"py=\nfor candidate in {' '.join(shlex.quote(p) for p in pythons)}; do\n"
            '  if [ -x "$candidate" ]; then py=$candidate; break; fi\n'
            "done\n"
            '[ -n "$py" ] || py=$(command -v python3 2>/dev/null)\n'
            f'if [ -n "$py" ]; then exec "$py" -c {shlex.quote(ASK_PROGRAM)} {REQUEST_TIMEOUT_S} '
            f"{' '.join(shlex.quote(url) for url in urls)}\n"
            f"else echo {NO_PYTHON}; fi\n")


def _answer(index: SourceIndex, code: str, cause: str) -> SourceAnswer:
    if cause == "file":
        return SourceAnswer(index, code == "200", "present" if code == "200" else "no such file on the node")
    if 200 <= int(code) < 300:
        return SourceAnswer(index, True, f"HTTP {code}")
    if int(code) >= 300:
        return SourceAnswer(index, False, f"HTTP {code}")
    return SourceAnswer(index, False, ASK_CAUSES.get(cause, "the request failed on the node"))


def parse_probe(stdout: str, indexes: list[SourceIndex], pythons: Iterable[str] = ()) -> list[SourceAnswer]:
    if any(line.strip() == NO_PYTHON for line in stdout.splitlines()):
        looked = ", ".join([*pythons, "python3 on its PATH"])
        return [SourceAnswer(index, False, f"not asked: the node has no Python to ask with (looked for {looked})",
                             asked=False) for index in indexes]
    answers: dict[int, SourceAnswer] = {}
    for line in stdout.splitlines():
        match = re.fullmatch(r"([0-9]+) ([0-9]{3}) ([a-z-]+)", line.strip(), re.ASCII)
        if match and int(match.group(1)) < len(indexes):
            number = int(match.group(1))
            answers[number] = _answer(indexes[number], match.group(2), match.group(3))
    return [answers.get(i, SourceAnswer(index, False, "no answer from the probe")) for i, index in enumerate(indexes)]


def request_indexes(shell: Shell, indexes: list[SourceIndex], *, timeout_s: float = PROBE_TIMEOUT_S,
                    pythons: tuple[str, ...] = ("/usr/bin/python3",)) -> list[SourceAnswer]:
    """Request each index from where `shell` runs (this machine, or one node), with the first of `pythons` there:
    what a package manager there would get. Reads only."""
    if not indexes:
        return []
    result = shell.run(probe_script(indexes, pythons), timeout_s=timeout_s)
    return parse_probe(result.stdout, indexes, pythons)


def check_sources(cluster: Cluster, settings: Settings, targets: Mapping[str, NodeTarget], *,
                  become_password: str | None = None, max_parallel: int = 32, packages: bool = True,
                  calico: bool = True, shell_for: Callable[[Node], Shell] | None = None) -> SourcesReport:
    """Every node of `targets` (node name -> what it fetches) asked for its indexes, in parallel (the probe
    runner, nodes/probe.py); the first control plane also for the manifests (Calico's when `calico`, and those of
    the add-ons settings.addons.enabled names)."""
    first = cluster.control_plane.name
    indexes = {name: source_indexes(settings, target, control_plane=name == first, packages=packages, calico=calico)
               for name, target in targets.items()}
    probe = NodeProbe(
        "sources", lambda node: probe_script(indexes[node.name], interpreters(targets[node.name])),
        lambda reading: parse_probe(reading.stdout, indexes[reading.node.name], interpreters(targets[reading.node.name])),
        sudo=False, timeout_s=PROBE_TIMEOUT_S)
    asked = [targets[name].node for name, found in indexes.items() if found]
    probed = probe_nodes(asked, probe, settings.ssh, become_password=become_password, max_parallel=max_parallel,
                         shell_for=shell_for)
    answers = {name: tuple(p.value) for name, p in probed.items() if p.value is not None}
    unreached = {name: p.problems[0].detail for name, p in probed.items() if p.value is None}
    return SourcesReport({name: answers.get(name, ()) for name in targets if name not in unreached}, unreached,
                         tuple(unserved_images(settings, pulled_images(settings, targets))))


def pulled_images(settings: Settings, targets: Mapping[str, NodeTarget]) -> list[str]:
    """The images a run pulls whose names the settings and the add-on table decide (kubeadm's come from
    image_repository, a source of its own)."""
    gpu = any(target.gpu for target in targets.values())
    return [*own_images(settings, gpu=gpu), *(image for name in settings.addons.enabled for image in ADDONS[name].images)]
