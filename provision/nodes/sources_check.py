"""Sources proven before any change: the index file of every package repository and manifest a run will use,
requested from the nodes themselves (the network path the packages will take), each failure named with the
setting that changes it.

`source_indexes` lists what one node will fetch (its platform's repository layouts, the GPU stack where it is a
GPU node, and on the first control plane the manifests: Calico's, the add-ons' raw files and git repositories);
`request_indexes` asks for them over any Shell (the nodes over SSH, or this machine), one round trip, reading
only; `check_sources` does both for every node of a run, in parallel. Preflight runs it before prepare touches a
node, and `bootstrap config check-sources` runs it alone. What it does not request: the images (containerd pulls
them through the registry mirrors), the pip index and the CIFAR-10 archive (the smoke test's pods fetch those, from
the pod network).
"""
from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from provision.inputs.addons import ADDONS
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import Platform
from provision.inputs.settings import Settings
from provision.inputs.sources import Sources, resolve_sources, unserved_images
from provision.nodes.ssh import Shell, SshError, SshShell
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
        for node, answers in self.answers.items():
            for answer in answers:
                if not answer.ok:
                    grouped.setdefault((answer.index, answer.detail), []).append(node)
        return [f"{index.name} {index.url}: {detail} from {', '.join(nodes)}: {fix(index)}"
                for (index, detail), nodes in grouped.items()] + \
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

_FETCH = f"""fetch() {{
  if command -v curl >/dev/null 2>&1; then
    code=$(curl -sS -o /dev/null -L --max-time {REQUEST_TIMEOUT_S} -w '%{{http_code}}' "$1" 2>/dev/null); rc=$?
    echo "curl ${{code:-000}} $rc"
  elif command -v wget >/dev/null 2>&1; then
    out=$(wget -S -q -T {REQUEST_TIMEOUT_S} -t 1 -O /dev/null "$1" 2>&1); rc=$?
    code=$(printf '%s\\n' "$out" | awk '$1 ~ /^HTTP\\// {{c = $2}} END {{print c}}')
    echo "wget ${{code:-000}} $rc"
  else
    echo "none 000 0"
  fi
}}
# apt reads InRelease, or Release (with Release.gpg) where a repository has no InRelease.
fetch_apt() {{
  answer=$(fetch "$1")
  case "$answer" in
    *" 2"[0-9][0-9]" "*) echo "$answer" ;;
    *) fetch "${{1%InRelease}}Release" ;;
  esac
}}
"""


def probe_script(indexes: Iterable[SourceIndex]) -> str:
    """One POSIX sh script that requests each index and prints `<n> <tool> <HTTP code> <exit status>` per index
    (an apt repository's InRelease, else its Release); file URLs are looked for on the node's disk. It writes
    nothing on the node."""
    lines = [_FETCH]
    for number, index in enumerate(indexes):
        parts = urlsplit(index.url)
        apt = index.url.endswith("/InRelease")
        if parts.scheme == "file":
            paths = [parts.path] + ([parts.path.removesuffix("InRelease") + "Release"] if apt else [])
            test = " || ".join(f"[ -r {shlex.quote(path)} ]" for path in paths)
            lines.append(f"if {test}; then echo '{number} file 200 0'; else echo '{number} file 404 0'; fi")
        else:
            lines.append(f"echo \"{number} $({'fetch_apt' if apt else 'fetch'} {shlex.quote(index.url)})\"")
    return "\n".join(lines) + "\n"


# curl's exit statuses a user can act on (curl's man page, EXIT CODES).
_CURL_ERRORS = {6: "the host name does not resolve", 7: "could not connect", 28: "timed out",
                35: "TLS handshake failed", 47: "too many redirects", 52: "empty answer", 56: "connection reset",
                60: "its TLS certificate is not trusted"}
_WGET_ERRORS = {4: "could not connect (network failure)", 5: "TLS failed"}


def _answer(index: SourceIndex, tool: str, code: str, status: str) -> SourceAnswer:
    if tool == "file":
        return SourceAnswer(index, code == "200", "present" if code == "200" else "no such file on the node")
    if tool == "none":
        return SourceAnswer(index, False, "not asked: the node has neither curl nor wget")
    if code.isdigit() and 200 <= int(code) < 300:
        return SourceAnswer(index, True, f"HTTP {code}")
    if code.isdigit() and int(code) >= 300:
        return SourceAnswer(index, False, f"HTTP {code}")
    errors = _CURL_ERRORS if tool == "curl" else _WGET_ERRORS
    reason = errors.get(int(status), f"{tool} exit status {status}") if status.isdigit() else f"{tool} failed"
    return SourceAnswer(index, False, reason)


def parse_probe(stdout: str, indexes: list[SourceIndex]) -> list[SourceAnswer]:
    answers: dict[int, SourceAnswer] = {}
    for line in stdout.splitlines():
        match = re.fullmatch(r"([0-9]+) (curl|wget|file|none) ([0-9]{3}) ([0-9]+)", line.strip(), re.ASCII)
        if match and int(match.group(1)) < len(indexes):
            number = int(match.group(1))
            answers[number] = _answer(indexes[number], match.group(2), match.group(3), match.group(4))
    return [answers.get(i, SourceAnswer(index, False, "no answer from the probe")) for i, index in enumerate(indexes)]


def request_indexes(shell: Shell, indexes: list[SourceIndex], *, timeout_s: float = PROBE_TIMEOUT_S) -> list[SourceAnswer]:
    """Request each index from where `shell` runs (a node over SSH, or this machine): what a package manager
    there would get. Reads only. Raises SshError when the node cannot be reached."""
    if not indexes:
        return []
    result = shell.run(probe_script(indexes), timeout_s=timeout_s)
    return parse_probe(result.stdout, indexes)


def check_sources(cluster: Cluster, settings: Settings, targets: Mapping[str, NodeTarget], *,
                  become_password: str | None = None, max_parallel: int = 32, packages: bool = True,
                  calico: bool = True, shell_for: Callable[[Node], Shell] | None = None) -> SourcesReport:
    """Every node of `targets` (node name -> what it fetches) asked for its indexes, in parallel; the first control
    plane also for the manifests (Calico's when `calico`, and those of the add-ons settings.addons.enabled names)."""
    first = cluster.control_plane.name

    def ask(name: str) -> tuple[str, list[SourceAnswer] | str]:
        target = targets[name]
        indexes = source_indexes(settings, target, control_plane=name == first, packages=packages, calico=calico)
        shell = shell_for(target.node) if shell_for else SshShell(target.node, settings.ssh, become_password)
        try:
            return name, request_indexes(shell, indexes)
        except SshError as exc:
            return name, exc.problem
        finally:
            close = getattr(shell, "close", None)
            if close:
                close()

    with ThreadPoolExecutor(max_workers=max(1, min(max_parallel, len(targets)))) as pool:
        results = list(pool.map(ask, list(targets)))
    answers = {name: tuple(found) for name, found in results if not isinstance(found, str)}
    unreached = {name: found for name, found in results if isinstance(found, str)}
    return SourcesReport(answers, unreached, tuple(unserved_images(settings, pulled_images(settings, targets))))


def pulled_images(settings: Settings, targets: Mapping[str, NodeTarget]) -> list[str]:
    """The images a run pulls whose names the settings and the add-on table decide (kubeadm's come from
    image_repository, a source of its own)."""
    gpu = any(target.gpu for target in targets.values())
    return [*own_images(settings, gpu=gpu), *(image for name in settings.addons.enabled for image in ADDONS[name].images)]
