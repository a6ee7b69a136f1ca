#!/usr/bin/python
"""The facts prepare's roles read, and only those, in one light call instead of Ansible's fact gathering.

Returned as ansible_facts, under the names the setup module gives them: the distribution facts (Ansible's own
collector, so the platform table matches them exactly as before), the architecture, the kernel, the service
manager and the virtualization type. The virtualization type follows the setup module's container checks (what the
roles ask: is this node a container?); past them, systemd-detect-virt names the hypervisor. Only reads.
"""
from __future__ import annotations

import os
import platform
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector

DOCUMENTATION = r"""
module: cb_node_facts
short_description: The few facts prepare's roles read (distribution, architecture, kernel, service manager, virtualization)
options: {}
"""


def _lines(path: str, sep: str = "\n") -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().split(sep)
    except OSError:
        return []


def container_type(cgroup: list[str], environ: list[str], openvz: bool) -> str | None:
    """The setup module's answer for a container, from /proc/1/cgroup and /proc/1/environ, in its order."""
    for line in cgroup:
        if re.search(r"/docker(/|-[0-9a-f]+\.scope)", line):
            return "docker"
        if re.search("/lxc/", line) or re.search("/machine.slice/machine-lxc", line):
            return "lxc"
        if re.search("/system.slice/containerd.service", line):
            return "containerd"
    for line in environ:
        if re.search("container=lxc", line):
            return "lxc"
        if re.search("container=podman", line):
            return "podman"
        if re.search("^container=.", line):
            return "container"
    return "openvz" if openvz else None


def service_mgr() -> str:
    if os.path.isdir("/run/systemd/system"):
        return "systemd"
    comm = "".join(_lines("/proc/1/comm")).strip()
    return comm or "service"


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    facts = dict(DistributionFactCollector().collect(module=module))
    virtual = container_type(_lines("/proc/1/cgroup"), _lines("/proc/1/environ", "\x00"),
                             os.path.exists("/proc/vz") and not os.path.exists("/proc/lve"))
    if virtual is None:
        detect = module.get_bin_path("systemd-detect-virt")
        rc, out, _ = module.run_command([detect, "--vm"]) if detect else (1, "", "")
        virtual = out.strip() if rc == 0 and out.strip() != "none" else ""
    facts.update({
        "architecture": platform.machine(),
        "kernel": platform.release(),
        "service_mgr": service_mgr(),
        "virtualization_type": virtual,
    })
    # Named as the setup module names them (ansible_distribution, ...), the roles' names.
    module.exit_json(changed=False, ansible_facts={f"ansible_{name}": value for name, value in facts.items()})


if __name__ == "__main__":
    main()
