"""The Vagrant lab: local machines made by the Vagrantfile, turned into an inventory the toolkit can use.

Vagrant only makes the machines reachable over SSH. From what it reports (`vagrant ssh-config`, read with
paramiko's parser) and the plan the Vagrantfile publishes (the fixed private addresses), this module writes
the lab's own inventory, a known_hosts file holding each machine's host keys, and a cluster.yaml pointing at
it, so that everything after `vagrant up` is the same code path as for real machines, host keys checked.
"""
from __future__ import annotations

import base64
import binascii
import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from provision.errors import BootstrapError, InputError
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.state import lab_root
from provision.lab.host import KVM_DEVICE, LIBVIRT_SOCKETS, QEMU_DRIVER_FIX, kvm_problem, libvirt_problem
from provision.resources import VAGRANT_DIR

VAGRANT_INSTALL_HINT = ("install Vagrant and a provider: on Debian/Ubuntu `apt-get install vagrant vagrant-libvirt "
                        "libvirt-daemon-system qemu-system-x86`, elsewhere see https://developer.hashicorp.com/vagrant")
# Run once per machine through Vagrant's own SSH channel (the one Vagrant trusts for its machines) to learn the
# host keys the toolkit then checks on every connection.
HOST_KEYS_COMMAND = "cat /etc/ssh/ssh_host_*_key.pub"
SHORT_COMMAND_TIMEOUT_S = 180
SSH_READY_TIMEOUT_S = 90

Role = Literal["control_plane", "worker"]
OnLine = Callable[[str], None]


@dataclass(frozen=True)
class LabOptions:
    """What `bootstrap lab up` may override; each field is the environment variable the Vagrantfile reads."""

    workers: int | None = None
    cpus: int | None = None
    memory_mb: int | None = None
    os: str | None = None
    box: str | None = None
    provider: str | None = None
    libvirt_driver: str | None = None
    network: str | None = None

    def environment(self) -> dict[str, str]:
        names = {"workers": "LAB_WORKERS", "cpus": "LAB_CPUS", "memory_mb": "LAB_MEMORY", "os": "LAB_OS",
                 "box": "LAB_BOX", "provider": "LAB_PROVIDER", "libvirt_driver": "LAB_LIBVIRT_DRIVER",
                 "network": "LAB_NETWORK"}
        return {names[key]: str(value) for key, value in vars(self).items() if value is not None}


@dataclass(frozen=True)
class LabMachine:
    name: str
    role: Role
    address: str
    cpus: int
    memory_mb: int


@dataclass(frozen=True)
class LabPlan:
    """The machines the Vagrantfile defines, as it computed them from lab.yml and LAB_* variables."""

    provider: str
    box: str
    libvirt_driver: str
    network: ipaddress.IPv4Network
    machines: tuple[LabMachine, ...]

    @classmethod
    def from_json(cls, text: str, source: str) -> LabPlan:
        try:
            data = json.loads(text)
            return cls(
                provider=data["provider"], box=data["box"], libvirt_driver=data["libvirt_driver"],
                network=ipaddress.IPv4Network(data["network"]),
                machines=tuple(LabMachine(name=m["name"], role=m["role"], address=m["address"], cpus=int(m["cpus"]),
                                          memory_mb=int(m["memory_mb"])) for m in data["machines"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise BootstrapError(f"{source}: not a lab plan written by this checkout's Vagrantfile ({exc}); "
                                 "run `bootstrap lab down` and `bootstrap lab up` again") from None

    def environment(self) -> dict[str, str]:
        """The LAB_* variables that make the Vagrantfile define exactly these machines again."""
        first = self.machines[0]
        return {"LAB_WORKERS": str(len(self.machines) - 1), "LAB_CPUS": str(first.cpus),
                "LAB_MEMORY": str(first.memory_mb), "LAB_BOX": self.box, "LAB_PROVIDER": self.provider,
                "LAB_LIBVIRT_DRIVER": self.libvirt_driver, "LAB_NETWORK": str(self.network)}

    def machine(self, name: str) -> LabMachine:
        for machine in self.machines:
            if machine.name == name:
                return machine
        raise InputError(f"no lab machine named '{name}'; the lab has: {', '.join(m.name for m in self.machines)}")


@dataclass(frozen=True)
class SshEndpoint:
    """How Vagrant itself reaches a machine (often a forwarded port on 127.0.0.1, or a management address)."""

    name: str
    host: str
    port: int
    user: str
    identity_files: tuple[Path, ...]


@dataclass(frozen=True)
class MachineStatus:
    name: str
    state: str
    address: str | None


def parse_ssh_config(text: str) -> dict[str, SshEndpoint]:
    """`vagrant ssh-config` output, read with paramiko's OpenSSH config parser, keyed by machine name."""
    import paramiko

    config = paramiko.SSHConfig.from_text(text)
    endpoints = {}
    for name in sorted(config.get_hostnames() - {"*"}):
        entry = config.lookup(name)
        identity_files = tuple(Path(p) for p in entry.get("identityfile", []))
        if "user" not in entry or not identity_files:
            raise BootstrapError(f"`vagrant ssh-config` gave no User or IdentityFile for '{name}': "
                                 "check that the machine is running (`bootstrap lab status`)")
        endpoints[name] = SshEndpoint(name=name, host=entry["hostname"], port=int(entry.get("port", 22)),
                                      user=entry["user"], identity_files=identity_files)
    return endpoints


def parse_host_keys(text: str, machine: str) -> list[tuple[str, Any]]:
    """The public host keys in `cat /etc/ssh/ssh_host_*_key.pub` output, as (type, paramiko key) pairs."""
    import paramiko

    keys = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        try:
            key = paramiko.PKey.from_type_string(fields[0], base64.b64decode(fields[1], validate=True))
        except (binascii.Error, paramiko.SSHException, paramiko.UnknownKeyType, ValueError):
            continue  # a key type paramiko cannot check (DSA) or a stray line: OpenSSH offers the others
        keys.append((fields[0], key))
    if not keys:
        raise BootstrapError(f"lab machine '{machine}' reported no SSH host key "
                             f"(`{HOST_KEYS_COMMAND}` printed nothing usable): is sshd installed on the box?")
    return keys


def inventory_text(plan: LabPlan, endpoints: Mapping[str, SshEndpoint]) -> str:
    """An INI inventory: each machine at its fixed private address (reachable from the host with either
    provider, and the address the cluster uses), with the user and key Vagrant reports."""
    lines = ["# Written by `bootstrap lab up` from `vagrant ssh-config` and the Vagrantfile's plan; "
             "`bootstrap lab down` removes it."]
    for group, role in (("control_plane", "control_plane"), ("workers", "worker")):
        lines += ["", f"[{group}]"]
        for machine in plan.machines:
            if machine.role != role:
                continue
            endpoint = endpoints.get(machine.name)
            if endpoint is None:
                raise BootstrapError(f"`vagrant ssh-config` does not list lab machine '{machine.name}': "
                                     "run `bootstrap lab up` again")
            lines.append(f"{machine.name} ansible_host={machine.address} ansible_user={endpoint.user} "
                         f"ansible_ssh_private_key_file={endpoint.identity_files[0]} gpu=false")
    return "\n".join(lines) + "\n"


def lab_settings(plan: LabPlan, known_hosts: Path, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The lab's cluster.yaml: the user's settings (if any) with the keys the lab needs laid over them."""
    document = json.loads(json.dumps(dict(base or {})))
    document.setdefault("ssh", {})["known_hosts_file"] = str(known_hosts)
    document["ssh"]["accept_new_host_keys"] = False
    # A lab has no GPU: the smoke test trains on CPU.
    document.setdefault("smoke_test", {})["mode"] = "cpu"
    settings = parse_settings(document, "lab cluster.yaml")
    check_network(plan, settings)
    return document


def check_network(plan: LabPlan, settings: Settings) -> None:
    for field in ("pod_cidr", "service_cidr"):
        cidr = ipaddress.ip_network(getattr(settings.kubernetes, field))
        if plan.network.overlaps(cidr):
            raise InputError(f"lab network {plan.network} overlaps kubernetes.{field} {cidr}: choose another "
                             "private network (LAB_NETWORK or `network` in lab.yml), e.g. 192.168.56.0/24")


def write_known_hosts(path: Path, keys_by_address: Mapping[str, list[tuple[str, Any]]]) -> None:
    """A known_hosts file (written by paramiko, read by OpenSSH) holding exactly these keys."""
    import paramiko

    host_keys = paramiko.HostKeys()
    for address, keys in keys_by_address.items():
        for key_type, key in keys:
            host_keys.add(address, key_type, key)
    path.write_text("")
    host_keys.save(str(path))


def host_problem(plan: LabPlan, sockets: tuple[Path, ...] | None = None, kvm: Path | None = None) -> str | None:
    """What this machine lacks for the planned lab, said before `vagrant up` (which would fail minutes later)."""
    if plan.provider != "libvirt":
        return None
    problem = libvirt_problem(sockets or LIBVIRT_SOCKETS)
    if problem is None and plan.libvirt_driver == "kvm":
        found = kvm_problem(kvm or KVM_DEVICE)
        problem = f"{found}: {QEMU_DRIVER_FIX}" if found else None
    return problem


def parse_machine_states(text: str) -> dict[str, str]:
    """Machine states from `vagrant status --machine-readable` (timestamp,target,type,data lines)."""
    states = {}
    for line in text.splitlines():
        parts = line.split(",", 3)
        if len(parts) == 4 and parts[2] == "state" and parts[1]:
            states[parts[1]] = parts[3]
    return states


class Vagrant:
    """Runs `vagrant` beside the lab's Vagrantfile with a given environment."""

    def __init__(self, root: Path, environment: Mapping[str, str]):
        self.root = root
        self.environment = dict(environment)

    def run(self, *args: str, on_line: OnLine | None = None, timeout_s: float | None = SHORT_COMMAND_TIMEOUT_S,
            log: Path | None = None) -> str:
        """Run one vagrant command and return its standard output, streamed line by line to on_line; both
        streams go to log. A failure raises with Vagrant's own explanation."""
        executable = shutil.which("vagrant", path=self.environment.get("PATH"))
        if executable is None:
            raise BootstrapError(f"vagrant is not installed (not on PATH): {VAGRANT_INSTALL_HINT}")
        started = time.monotonic()
        expired = threading.Event()
        lines: list[str] = []
        with tempfile.TemporaryFile("w+") as stderr, subprocess.Popen(
                [executable, *args], cwd=self.root, env=self.environment, stdout=subprocess.PIPE, stderr=stderr,
                stdin=subprocess.DEVNULL, text=True, errors="replace") as process:
            assert process.stdout is not None

            def expire() -> None:
                expired.set()
                process.kill()

            timer = threading.Timer(timeout_s, expire) if timeout_s is not None else None
            if timer is not None:
                timer.start()
            try:
                for line in process.stdout:
                    lines.append(line.rstrip("\n"))
                    if on_line:
                        on_line(lines[-1])
                rc = process.wait()
            finally:
                if timer is not None:
                    timer.cancel()
            stderr.seek(0)
            errors = stderr.read().splitlines()
        output = "\n".join(lines)
        if log is not None:
            with log.open("a") as handle:
                handle.write(f"$ vagrant {' '.join(args)}\n" + "".join(f"{line}\n" for line in lines + errors)
                             + f"(exit {rc}, {time.monotonic() - started:.1f}s)\n")
        if expired.is_set():
            raise BootstrapError(f"`vagrant {' '.join(args)}` did not finish within {timeout_s:.0f}s and was stopped"
                                 + (f"; see {log}" if log else ""))
        if rc != 0:
            raise _vagrant_failure(args, rc, errors or lines, log)
        return output


def _vagrant_failure(args: tuple[str, ...], rc: int, lines: list[str], log: Path | None) -> BootstrapError:
    for line in lines:
        # The Vagrantfile refuses bad lab settings with one line of its own.
        if line.startswith("lab: "):
            return InputError(line.removeprefix("lab: "))
    text = " ".join(line.strip() for line in lines if line.strip() and not line.startswith("==>"))
    where = f" (full output: {log})" if log else ""
    return BootstrapError(f"`vagrant {' '.join(args)}` failed (exit {rc}): {text[-400:] or 'no output'}{where}")


@dataclass(frozen=True)
class LabFiles:
    """What `lab up` leaves in the state directory; `lab down` removes it all."""

    state_dir: Path

    @property
    def inventory(self) -> Path:
        return self.state_dir / "hosts.ini"

    @property
    def settings(self) -> Path:
        return self.state_dir / "cluster.yaml"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def plan(self) -> Path:
        return self.state_dir / "plan.json"

    @property
    def log(self) -> Path:
        return self.state_dir / "vagrant.log"


class Lab:
    """The lab made by the Vagrantfile in `root`; generated files live in `state_dir`."""

    def __init__(self, root: Path = VAGRANT_DIR, state_dir: Path | None = None,
                 environment: Mapping[str, str] | None = None):
        self.root = root
        self.base_environment = dict(os.environ if environment is None else environment)
        self.files = LabFiles(state_dir or lab_root())
        # Vagrant keeps its machine records beside the Vagrantfile unless told otherwise: in the state directory,
        # since the Vagrantfile may sit in a read-only installed package.
        self.base_environment.setdefault("VAGRANT_DOTFILE_PATH", str(self.files.state_dir / ".vagrant"))
        if not (root / "Vagrantfile").is_file():
            raise InputError(f"{root}: no Vagrantfile here; reinstall cluster-bootstrap (the lab's Vagrantfile is "
                             "part of the package)")

    def saved_plan(self) -> LabPlan | None:
        if not self.files.plan.is_file():
            return None
        return LabPlan.from_json(self.files.plan.read_text(), str(self.files.plan))

    def _vagrant(self, options: LabOptions | None = None, plan_file: Path | None = None) -> Vagrant:
        environment = dict(self.base_environment)
        saved = self.saved_plan()
        if options is not None:
            environment.update(options.environment())
        elif saved is not None:
            # Later commands act on the machines `up` made, whatever lab.yml or LAB_* say now.
            environment.update(saved.environment())
        # Only where the plan is wanted: the Vagrantfile writes it on every load.
        environment.pop("LAB_PLAN_FILE", None)
        if plan_file is not None:
            environment["LAB_PLAN_FILE"] = str(plan_file)
        return Vagrant(self.root, environment)

    def plan(self, options: LabOptions) -> LabPlan:
        """Check the Vagrantfile with these options and read back the machines it defines (no machine is made)."""
        self.files.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        # Not plan.json: that one describes the machines `up` made, until the next `up` succeeds in making them.
        candidate = self.files.state_dir / "plan.candidate.json"
        try:
            self._vagrant(options, candidate).run("validate", log=self.files.log)
            return LabPlan.from_json(candidate.read_text(), str(candidate))
        finally:
            candidate.unlink(missing_ok=True)

    def up(self, options: LabOptions, base_settings: Mapping[str, Any] | None = None,
           on_line: OnLine | None = None) -> LabFiles:
        """Make the machines, then write the inventory, known_hosts and cluster.yaml; each machine is checked
        to answer SSH at its private address with its recorded host key before this returns."""
        before = self.saved_plan()
        plan = self.plan(options)
        if before is not None:
            left_out = [m.name for m in before.machines if m.name not in {n.name for n in plan.machines}]
            if left_out:
                raise InputError(f"the lab already has {', '.join(left_out)}, which these settings leave out: run "
                                 f"`bootstrap lab down` first, or `bootstrap lab up --workers {len(before.machines) - 1}`")
        settings_document = lab_settings(plan, self.files.known_hosts.resolve(), base_settings)
        problem = host_problem(plan)
        if problem:
            raise BootstrapError(problem)
        vagrant = self._vagrant(options, self.files.plan)
        vagrant.run("up", f"--provider={plan.provider}", on_line=on_line, timeout_s=None, log=self.files.log)
        endpoints = parse_ssh_config(vagrant.run("ssh-config", log=self.files.log))
        self.record_host_keys(vagrant, plan)
        self.files.inventory.write_text(inventory_text(plan, endpoints))
        self.files.settings.write_text(
            "# Written by `bootstrap lab up`: the lab's known_hosts, and the smoke test on CPU.\n"
            + yaml.safe_dump(settings_document, sort_keys=False))
        self.wait_for_ssh(plan)
        return self.files

    def record_host_keys(self, vagrant: Vagrant, plan: LabPlan) -> None:
        """Read every machine's host keys through Vagrant's channel and record them under its private address."""
        def keys_of(machine: LabMachine) -> list[tuple[str, Any]]:
            output = vagrant.run("ssh", machine.name, "--no-tty", "-c", HOST_KEYS_COMMAND, log=self.files.log)
            return parse_host_keys(output, machine.name)

        with ThreadPoolExecutor(max_workers=4) as pool:
            found = list(pool.map(keys_of, plan.machines))
        write_known_hosts(self.files.known_hosts, {m.address: keys for m, keys in zip(plan.machines, found, strict=True)})

    def ssh_argv(self, name: str, command: list[str] | None = None, batch: bool = False) -> list[str]:
        """An OpenSSH command line that reaches a lab machine the way the toolkit does: host key checked."""
        plan = self.saved_plan()
        if plan is None or not self.files.inventory.is_file():
            raise InputError("there is no lab here yet: run `bootstrap lab up` first")
        from provision.inputs.inventory import load_inventory

        node = load_inventory(self.files.inventory).node(plan.machine(name).name)
        argv = ["ssh", "-o", f"UserKnownHostsFile={self.files.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=10", "-p", str(node.port)]
        if batch:
            argv += ["-o", "BatchMode=yes"]
        if node.key_file is not None:
            argv += ["-i", str(node.key_file)]
        return [*argv, f"{node.user}@{node.address}", *(command or [])]

    def wait_for_ssh(self, plan: LabPlan) -> None:
        for machine in plan.machines:
            argv = self.ssh_argv(machine.name, ["true"], batch=True)
            deadline = time.monotonic() + SSH_READY_TIMEOUT_S
            while True:
                result = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
                if result.returncode == 0:
                    break
                if time.monotonic() > deadline:
                    reason = (result.stderr.strip().splitlines() or ["no answer"])[-1]
                    raise BootstrapError(f"lab machine '{machine.name}' does not answer SSH at {machine.address} "
                                         f"with its recorded host key ({reason}): is the private network up? "
                                         "see `bootstrap lab status`")
                time.sleep(2)

    def status(self) -> list[MachineStatus]:
        plan = self.saved_plan()
        addresses = {m.name: m.address for m in plan.machines} if plan else {}
        output = self._vagrant().run("status", "--machine-readable", log=self.files.log if plan else None)
        return [MachineStatus(name, state, addresses.get(name)) for name, state in parse_machine_states(output).items()]

    def down(self, on_line: OnLine | None = None) -> None:
        """Destroy the machines and remove every generated file (inventory, known_hosts, cluster.yaml, plan),
        and what `bootstrap up` kept about the lab's cluster (its state and admin kubeconfig)."""
        from provision.inputs.inventory import load_inventory
        from provision.inputs.state import forget_cluster

        cluster = None
        if self.files.inventory.is_file():
            with contextlib.suppress(InputError):
                cluster = load_inventory(self.files.inventory)
        self.files.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._vagrant().run("destroy", "--force", on_line=on_line, timeout_s=None, log=self.files.log)
        if cluster is not None:
            forget_cluster(cluster)
        shutil.rmtree(self.files.state_dir)
