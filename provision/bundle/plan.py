"""What a node of one platform installs, and from which repositories: read from the roles themselves.

The roles decide the packages (`prepare_package_plan` in playbooks/prepare.yml, from each role's own lists) and the
repositories (their `*_repo` variables and os_prep's OS-mirror template). A bundle must hold exactly those, so it
renders the same variables with Ansible's own templating, for a node of the platform, from the same cb_* variables
`up` passes (render/playbook_vars.py). Rendered twice, once with the settings the bundle is built from (where the
packages come from) and once with an offline source (where `up` will look for them), the two give each repository's
upstream URL and its place in the bundle: nothing here names a repository layout of its own.

What a bundle cannot know when it is built is the kernel a GPU node will run: the roles install the headers of
the running kernel (linux-headers-<release>, kernel-devel-<release>); the bundle carries those of the archive's
current kernel (KERNEL_HEADERS), which match nodes that run it.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provision.errors import InputError
from provision.inputs import versions
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import Platform
from provision.inputs.settings import Settings
from provision.inputs.values import NodeName
from provision.render.playbook_vars import playbook_vars, prepare_vars
from provision.resources import PLAYBOOKS_DIR

ROLES = ("os_prep", "container_runtime", "kubernetes_packages", "nvidia")
# Where the offline rendering puts the bundle: stripped again to give each file's place inside it.
BUNDLE_ROOT = "file:///cb-bundle"
# A stand-in for the node's running kernel (ansible_kernel), replaced by the headers the archive has now.
KERNEL_MARK = "cb-kernel"
KERNEL_HEADERS = {"Debian": {f"linux-headers-{KERNEL_MARK}": "linux-headers-amd64"},
                  "RedHat": {f"kernel-devel-{KERNEL_MARK}": "kernel-devel"}}
_NODE = Node(name=NodeName("bundle-node"), address="192.0.2.10", role="control_plane", user="root")
_CLUSTER = Cluster(inventory_path=Path("bundle.ini"), nodes=(_NODE,))
_PROPRIETARY = next(g.name for g in reversed(versions.GPU_GENERATIONS) if not g.open_module)


@dataclass(frozen=True)
class Repository:
    """One repository a node of the platform reads: apt (`suites`: a dists/ layout, or "/" for a flat one) or dnf."""

    name: str
    kind: str  # "apt" or "dnf"
    url: str  # upstream (the build's settings), without a trailing "/"
    path: str  # its place in the bundle (the offline layout), relative, without a trailing "/"
    suites: tuple[str, ...] = ("/",)
    components: tuple[str, ...] = ()
    # Key files the roles download (apt: key_url; dnf: gpgkey), upstream URL -> place in the bundle.
    keys: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class NodePlan:
    """A node of one platform: the package specifications prepare installs (in the family's syntax) and the
    repositories they come from."""

    platform: Platform
    packages: tuple[str, ...]
    repositories: tuple[Repository, ...]


def containerd_source(settings: Settings, platform: Platform) -> str:
    """Where the node's containerd comes from: the setting, or for auto the platform's own containerd when it is 2.0
    or newer (what the role decides from the candidate version the distribution offers)."""
    chosen = settings.container_runtime.containerd_source
    if chosen != "auto":
        return chosen
    shipped = versions.parse_version(platform.containerd) if platform.containerd else None
    return versions.auto_containerd_source(shipped)


def _facts(platform: Platform) -> dict[str, Any]:
    """What Ansible's facts say on a node of the platform (the roles' vars read these)."""
    release = platform.releases[0]
    return {"ansible_os_family": platform.family, "ansible_distribution": platform.ansible_distribution,
            "ansible_distribution_version": release, "ansible_distribution_major_version": release.split(".")[0],
            "ansible_distribution_release": platform.codename, "ansible_kernel": KERNEL_MARK,
            "ansible_architecture": "x86_64", "ansible_managed": "cluster-bootstrap",
            "inventory_hostname": _NODE.host, "groups": {"control_plane": [_NODE.host], "workers": []}}


class RoleView:
    """The roles' variables for one node of `platform` under `settings`, rendered on demand as Ansible would."""

    def __init__(self, platform: Platform, settings: Settings, *, gpu: bool, module: str = "open") -> None:
        from ansible.parsing.dataloader import DataLoader
        from ansible.template import Templar

        _start_plugins()
        self._trust = _trust()
        loader = DataLoader()
        variables: dict[str, Any] = _load(loader, PLAYBOOKS_DIR / "group_vars" / "all.yml")
        # The kernel module flavour comes from the GPUs' generation, as in a run: the proprietary one for a node
        # with the newest generation the open module cannot drive.
        generations = {_NODE.name: [_PROPRIETARY]} if module == "proprietary" else {}
        variables |= playbook_vars(_CLUSTER, settings) | prepare_vars(_CLUSTER, {_NODE.name: 1 if gpu else 0},
                                                                      generations)
        variables |= _facts(platform) | {"container_runtime_source": containerd_source(settings, platform)}
        for play in _load(loader, PLAYBOOKS_DIR / "prepare.yml") or []:
            variables |= play.get("vars") or {}
        role_vars: dict[str, Any] = {}
        for role in ROLES:
            for path in _role_var_files(PLAYBOOKS_DIR / "roles" / role, platform.family):
                role_vars |= _load(loader, path) or {}
        self.templar = Templar(loader=loader, variables=role_vars | variables)

    def __call__(self, expression: str) -> Any:
        return self.templar.template(self._trust("{{ " + expression + " }}"))

    def template(self, role: str, name: str) -> str:
        text = (PLAYBOOKS_DIR / "roles" / role / "templates" / name).read_text()
        return str(self.templar.template(self._trust(text)))


@functools.cache
def _start_plugins() -> None:
    """The roles' defaults use lookups (the family's values by name): Ansible's plugins, found as a run finds them,
    started once a process (a second start only warns)."""
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()


def _role_var_files(role: Path, family: str) -> list[Path]:
    """A role's defaults and its family's vars, as Ansible reads them: defaults/main.yml, or every file of
    defaults/main/ in name order (each family's names there end in its family, so all load side by side)."""
    defaults = role / "defaults" / "main"
    files = sorted(defaults.glob("*.yml")) if defaults.is_dir() else [role / "defaults" / "main.yml"]
    return [path for path in (*files, role / "vars" / f"{family}.yml") if path.exists()]


def _trust() -> Any:
    try:
        from ansible.template import trust_as_template
    except ImportError:  # ansible-core before 2.19 templates every string
        return lambda text: text
    return trust_as_template


def _load(loader: Any, path: Path) -> Any:
    try:
        return loader.load_from_file(str(path), trusted_as_template=True)
    except TypeError:  # ansible-core before 2.19
        return loader.load_from_file(str(path))


def _deb822(text: str) -> list[dict[str, str]]:
    """The stanzas of a deb822 sources file."""
    stanzas = []
    for block in re.split(r"\n\s*\n", text):
        fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", block, re.MULTILINE))
        if "URIs" in fields:
            stanzas.append(fields)
    return stanzas


def _inside(offline_url: str) -> str:
    if not offline_url.startswith(BUNDLE_ROOT + "/"):
        raise ValueError(f"{offline_url} is not under the offline source")
    return offline_url[len(BUNDLE_ROOT) + 1:].rstrip("/")


def offline_settings(settings: Settings) -> Settings:
    """The settings with the bundle as their offline source: what the roles read from it."""
    offline = settings.offline.model_copy(update={"source": BUNDLE_ROOT})
    return settings.model_copy(update={"offline": offline})


def _repositories(upstream: RoleView, offline: RoleView, platform: Platform, gpu: bool) -> list[Repository]:
    found: list[Repository] = []
    names = ["container_runtime_docker_repo"] if upstream("container_runtime_source") == "docker" else []
    names.append("kubernetes_packages_repo")
    if gpu and platform.cuda:
        names += ["nvidia_cuda_repo", "nvidia_toolkit_repo"]
    for name in names:
        online, local = upstream(name), offline(name)
        key = (str(online["key_url"]), _inside(str(local["key_url"])))
        if platform.package_manager == "apt":
            suites = tuple(str(online.get("suites", "/")).split())
            found.append(Repository(str(online["name"]), "apt", str(online["uri"]).rstrip("/"),
                                    _inside(str(local["uri"])), suites,
                                    tuple(str(online.get("components", "")).split()), (key,)))
        else:
            found.append(Repository(str(online["name"]), "dnf", str(online["uri"]).replace("$basearch", "x86_64")
                                    .rstrip("/"), _inside(str(local["uri"]).replace("$basearch", "x86_64")),
                                    keys=(key,)))
    return found


def _os_repositories(upstream: RoleView, offline: RoleView, platform: Platform) -> list[Repository]:
    """The distribution's own repositories as os_prep points them at an OS mirror (offline.source's os/)."""
    if platform.package_manager == "apt":
        online = _deb822(upstream.template("os_prep", "cb-os.sources.j2"))
        local = _deb822(offline.template("os_prep", "cb-os.sources.j2"))
        return [Repository("OS", "apt", a["URIs"].rstrip("/"), _inside(b["URIs"]), tuple(a["Suites"].split()),
                           tuple(a["Components"].split())) for a, b in zip(online, local, strict=True)]
    mirror = platform.os_mirror
    if mirror is None:
        return []
    release = platform.releases[0]
    base, inside = str(upstream("os_prep_rpm_mirror_base")), _inside(str(offline("os_prep_rpm_mirror_base")))
    directories = [directory for _, directory in mirror.repos] + list(mirror.also_enabled)
    return [Repository(f"OS {directory}", "dnf", f"{base}/{release}/{directory}/x86_64/os",
                       f"{inside}/{release}/{directory}/x86_64/os") for directory in directories]


def node_plan(platform: Platform, settings: Settings, *, gpu: bool) -> NodePlan:
    """What a node of `platform` installs under `settings` (with the NVIDIA stack on a GPU node: both kernel module
    flavours, since the bundle does not know the GPUs' generation), and the repositories it reads."""
    if settings.mirrors.os_repo is None and settings.offline.source is None:
        if platform.package_manager == "apt" and platform.archive is None:
            raise InputError(f"{platform.name}: no public archive is known for its OS packages: set mirrors.os_repo")
        if platform.package_manager == "dnf":
            if platform.os_mirror is None:
                raise InputError(f"{platform.name} keeps its own repositories (subscription-manager), which a bundle "
                                 "cannot carry: bundle a rebuild of the same release (rocky-9, almalinux-9)")
            raise InputError(f"{platform.name}: its OS packages come from mirrors.os_repo, which is not set: set it "
                             f"to a mirror with the {platform.os_mirror.path}/ layout (e.g. https://mirrors.aliyun.com)")
    if gpu and platform.cuda is None:
        raise InputError(f"{platform.name}: {platform.no_cuda_reason}: leave it out of a --gpu bundle, or build "
                         "one without --gpu for it")
    source = settings.mirrors.os_repo or platform.archive
    online_settings = settings.model_copy(update={"mirrors": settings.mirrors.model_copy(update={"os_repo": source})})
    packages: list[str] = []
    views = []
    for module in (("open", "proprietary") if gpu else ("open",)):
        upstream = RoleView(platform, online_settings, gpu=gpu, module=module)
        views.append(upstream)
        listed = upstream("prepare_package_plan")
        packages += [KERNEL_HEADERS[platform.family].get(str(p), str(p)) for p in listed]
    upstream = views[0]
    offline = RoleView(platform, offline_settings(online_settings), gpu=gpu)
    repositories = _os_repositories(upstream, offline, platform) + _repositories(upstream, offline, platform, gpu)
    return NodePlan(platform, tuple(dict.fromkeys(packages)), tuple(repositories))
