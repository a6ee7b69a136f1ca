#!/usr/bin/python
"""Report what a prepared node looks like, as one JSON document returned under `cb_report`.

The document is what provision/nodes/reports.py validates (its `schema` must be the one that model reads) and
provision/nodes/prepare.py judges: the interpreter's version, hostname, swap, kernel modules, sysctls, systemd units, containerd's
effective configuration and CRI plugin, crictl, the Kubernetes packages, their holds and kubeadm's installed
version, and the NVIDIA GPUs the driver sees. It only reads: changed is always false, and check mode reports the same.
"""
from __future__ import annotations

import fnmatch
import os
import platform
import re
import shutil
import socket

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: cb_node_report
short_description: Report a prepared node's state as one JSON document (cb_report)
options:
  gpu_node:
    description: Whether the play prepared this node as a GPU node (echoed in the report).
    type: bool
    required: true
  sysctls:
    description: The sysctl keys to read.
    type: list
    elements: str
    required: true
  units:
    description: The systemd units whose active and enabled states to read.
    type: list
    elements: str
    required: true
  packages:
    description: The Kubernetes packages to look for (their command on PATH) and whose hold to read.
    type: list
    elements: str
    required: true
  modules_load_file:
    description: The modules-load.d file the play wrote.
    type: path
    required: true
  crictl_config:
    description: crictl's configuration file.
    type: path
    default: /etc/crictl.yaml
  package_plan:
    description: >-
      Every package prepare installs on the node, in the package manager's syntax (apt name or name=version-glob;
      dnf name, name-version or @module:stream): each is reported installed or not.
    type: list
    elements: str
    default: []
"""

# The version of the document's shape, and the key it is returned under: provision/nodes/reports.py reads
# exactly this version, and finds the document by this key.
SCHEMA = 5
REPORT_KEY = "cb_report"

_FSTAB_SWAP_RE = re.compile(r"^[^#\s]\S*\s+\S+\s+swap\s")


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else text


def parse_ctr_plugins(text: str) -> str | None:
    """`ctr plugins ls` (TYPE ID PLATFORMS STATUS) -> the CRI plugin's status ("ok", "error", "skip"), or None."""
    for line in text.splitlines():
        columns = line.split()
        if len(columns) >= 3 and columns[1] == "cri":
            return columns[-1]
    return None


def parse_crictl_endpoint(text: str) -> str | None:
    """/etc/crictl.yaml -> its runtime-endpoint."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "runtime-endpoint":
            return _unquote(value.strip()) or None
    return None


def parse_modules_load(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", ";"))]


def parse_proc_swaps(text: str) -> list[str]:
    """/proc/swaps (a header line, then one row per active swap area) -> the areas."""
    return [line.split()[0] for line in text.splitlines()[1:] if line.strip()]


def parse_fstab_swaps(text: str) -> list[str]:
    """/etc/fstab -> its swap lines that are not commented out."""
    return [" ".join(line.split()) for line in text.splitlines() if _FSTAB_SWAP_RE.match(line)]


def parse_apt_holds(text: str) -> list[str]:
    """`apt-mark showhold` -> package names (without an :arch suffix)."""
    return sorted({line.strip().split(":")[0] for line in text.splitlines() if line.strip()})


def parse_dnf_versionlock(text: str) -> list[str]:
    """`dnf versionlock list` (name-epoch:version-release.*) -> package names."""
    names = set()
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.+-]+?)-\d+:", line.strip())
        if match:
            names.add(match.group(1))
    return sorted(names)


def parse_dpkg_status(text: str) -> dict[str, str]:
    """`dpkg-query -W -f '${Package}|${Status}|${Version}\\n'` -> the installed packages' versions ("install ok
    installed", or "hold ok installed" once held)."""
    found = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].endswith(" ok installed"):
            found[parts[0].split(":")[0]] = parts[2]
    return found


def apt_spec_installed(spec: str, installed: dict[str, str]) -> bool:
    """Whether an apt spec (name, or name=version with * wildcards) is installed at a matching version."""
    name, _, want = spec.partition("=")
    return name in installed and (not want or fnmatch.fnmatchcase(installed[name], want))


def parse_rpm_query(specs: list[str], text: str) -> dict[str, bool]:
    """`rpm -q SPEC...` prints one line per spec, in order: the package, or "package SPEC is not installed"."""
    lines = text.splitlines()
    return {spec: i < len(lines) and not lines[i].endswith(" is not installed") for i, spec in enumerate(specs)}


def count_nvidia_gpus(text: str) -> int:
    """`nvidia-smi -L` -> how many GPUs the driver lists."""
    return sum(1 for line in text.splitlines() if line.startswith("GPU "))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _sysctl(key: str) -> str | None:
    text = _read(os.path.join("/proc/sys", *key.split(".")))
    return text.strip() if text is not None else None


def _output(module: AnsibleModule, argv: list[str]) -> tuple[bool, str]:
    """(ran and succeeded, stdout); a command that is not installed did not succeed."""
    if not shutil.which(argv[0]):
        return False, ""
    rc, out, _ = module.run_command(argv)
    return rc == 0, out


def _holds(module: AnsibleModule) -> list[str]:
    if shutil.which("apt-mark"):
        return parse_apt_holds(_output(module, ["apt-mark", "showhold"])[1])
    return parse_dnf_versionlock(_output(module, ["dnf", "-q", "versionlock", "list"])[1])


def planned_packages(module: AnsibleModule, specs: list[str]) -> dict[str, bool | None]:
    """Each planned spec -> installed; None for what the package database cannot answer (a dnf module stream)."""
    if not specs:
        return {}
    if shutil.which("dpkg-query"):
        names = sorted({spec.partition("=")[0] for spec in specs})
        _, out, _ = module.run_command(["dpkg-query", "-W", "-f", "${Package}|${Status}|${Version}\\n", *names])
        installed = parse_dpkg_status(out)
        return {spec: apt_spec_installed(spec, installed) for spec in specs}
    packages = [spec for spec in specs if not spec.startswith("@")]
    _, out, _ = module.run_command(["rpm", "-q", *packages]) if packages else (0, "", "")
    found: dict[str, bool | None] = dict(parse_rpm_query(packages, out))
    return {spec: found.get(spec) for spec in specs}


def installed_version(module: AnsibleModule, name: str) -> str | None:
    """The version the package database holds for package `name` (dpkg: 1.36.4-1.1, rpm: 1.36.4), or None."""
    if shutil.which("dpkg-query"):
        ok, out = _output(module, ["dpkg-query", "-W", "-f", "${Version}", name])
    else:
        ok, out = _output(module, ["rpm", "-q", "--qf", "%{VERSION}", name])
    return out.strip() or None if ok else None


def report(module: AnsibleModule) -> dict[str, object]:
    params = module.params
    # As containerd prints it: Python reads and judges it (provision/nodes/containerd_config.py).
    _, dump = _output(module, ["containerd", "config", "dump"])
    containerd = {"config_dump": dump, "cri": parse_ctr_plugins(_output(module, ["ctr", "plugins", "ls"])[1])}
    held = _holds(module)
    crictl_installed = shutil.which("crictl") is not None
    gpus = None
    if shutil.which("nvidia-smi"):
        gpus = count_nvidia_gpus(_output(module, ["nvidia-smi", "-L"])[1])
    return {
        "schema": SCHEMA,
        # The interpreter Ansible ran this module with (the platform table's, held to its floor): its version.
        "python": platform.python_version(),
        "hostname": socket.gethostname(),
        "swap": {"active": parse_proc_swaps(_read("/proc/swaps") or ""),
                 "fstab": parse_fstab_swaps(_read("/etc/fstab") or "")},
        "modules_load": parse_modules_load(_read(params["modules_load_file"]) or ""),
        "sysctls": {key: _sysctl(key) for key in params["sysctls"]},
        "units": {unit: {"active": _output(module, ["systemctl", "is-active", unit])[1].strip(),
                         "enabled": _output(module, ["systemctl", "is-enabled", unit])[1].strip()}
                  for unit in params["units"]},
        "containerd": containerd,
        "crictl": {"endpoint": parse_crictl_endpoint(_read(params["crictl_config"]) or ""),
                   "works": _output(module, ["crictl", "version"])[0] if crictl_installed else None},
        "packages": {name: {"installed": shutil.which(name) is not None, "held": name in held}
                     for name in params["packages"]},
        "package_plan": planned_packages(module, params["package_plan"]),
        # The kubeadm installed: Python decides kubeadm's kubernetesVersion from it (never a lookup on dl.k8s.io).
        "kubeadm_version": installed_version(module, "kubeadm"),
        "gpu_node": params["gpu_node"],
        "nvidia_gpus": gpus,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "gpu_node": {"type": "bool", "required": True},
            "sysctls": {"type": "list", "elements": "str", "required": True},
            "units": {"type": "list", "elements": "str", "required": True},
            "packages": {"type": "list", "elements": "str", "required": True},
            "modules_load_file": {"type": "path", "required": True},
            "crictl_config": {"type": "path", "default": "/etc/crictl.yaml"},
            "package_plan": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **{REPORT_KEY: report(module)})


if __name__ == "__main__":
    main()
