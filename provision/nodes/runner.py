"""Run a playbook through ansible-runner and turn its event stream into progress and a result.

The library never prints: progress goes to an `on_progress` callback (the CLI draws the live view from
it) and every run leaves its artifacts and a plain-text log in a run directory under the state directory's
`runs/`. Counting the events is `tally.EventTally`'s; this module runs Ansible and writes the log.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from provision.errors import BootstrapError
from provision.inputs.inventory import Cluster, Node, ansible_inventory_env
from provision.inputs.platforms import NodePython
from provision.inputs.settings import Settings
from provision.inputs.state import private_dir, runs_root
from provision.nodes.ssh import ansible_ssh_common_args
from provision.nodes.tally import EventTally, HostTally, TaskFailure
from provision.render.playbook_vars import playbook_vars, python_host_vars
from provision.resources import ANSIBLE_CFG, PLAYBOOKS_DIR, ROLES_DIR


@dataclass(kw_only=True)
class RunProgress(EventTally):
    """What the live view shows: the run's tally, updated in place as events arrive, and its clock."""

    phase: str
    hosts: list[str]
    started: float = field(default_factory=time.monotonic)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class PlaybookResult:
    phase: str
    playbook: str
    rc: int
    status: str
    run_dir: Path
    tally: dict[str, HostTally]
    failures: list[TaskFailure]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful"

    @property
    def changed(self) -> dict[str, int]:
        return {host: t.changed for host, t in self.tally.items()}

    def raise_for_failure(self) -> None:
        if self.ok:
            return
        first = self.failures[0].describe() if self.failures else f"ansible-playbook ended with status {self.status}"
        raise BootstrapError(f"{self.phase} failed: {first} (full log: {self.run_dir / 'run.log'})")


def new_run_dir(phase: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = private_dir(runs_root()) / f"{stamp}-{phase}"
    run_dir.mkdir(exist_ok=False)
    return run_dir


def ssh_args(settings: Settings) -> str:
    """SSH options for Ansible: multiplexed connections, and host keys checked (never silently accepted).
    The known_hosts file and a bastion are per host (ansible_ssh_common_args, in _groups_inventory)."""
    ssh = settings.ssh
    strict = "accept-new" if ssh.accept_new_host_keys else "yes"
    return " ".join([
        "-o ControlMaster=auto -o ControlPersist=60s",
        f"-o StrictHostKeyChecking={strict}",
        f"-o ConnectTimeout={ssh.connect_timeout_s}",
        "-o ServerAliveInterval=15",
    ])


def executor_envvars(settings: Settings) -> dict[str, str]:
    """Environment that selects how Ansible executes tasks: Mitogen's strategy, or the stock one as fallback.

    Mitogen runs tasks over one persistent Python interpreter per host, which matters here: with stock Ansible
    the controller's CPU per task and host is the limit for wide runs.
    """
    choice = settings.ansible.executor
    # Mitogen either enforces host keys or ignores them (StrictHostKeyChecking no, known hosts /dev/null, ahead
    # of our ssh_args): it cannot record new keys, so accepting them is left to the stock ssh connection.
    if choice == "stock" or (choice == "auto" and settings.ssh.accept_new_host_keys):
        return {}
    try:
        import ansible_mitogen
        from ansible_mitogen.loaders import assert_supported_release

        assert_supported_release()
    except Exception as exc:  # noqa: BLE001 - missing or incompatible Mitogen: fall back (or refuse, if forced)
        if choice == "mitogen":
            raise BootstrapError(f"ansible.executor is 'mitogen' but Mitogen cannot be used ({exc}): "
                                 "pip install mitogen==0.3.54, or set ansible.executor: auto") from None
        return {}
    return {
        "ANSIBLE_STRATEGY_PLUGINS": str(Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"),
        "ANSIBLE_STRATEGY": "mitogen_linear",
    }


def _groups_inventory(cluster: Cluster, run_dir: Path, settings: Settings,
                      pythons: Mapping[str, NodePython] | None = None) -> Path:
    """The canonical groups our playbooks target, laid over the user's inventory (which keeps its vars), with the
    interpreter preflight chose for each node (render/playbook_vars.py: python_host_vars)."""
    interpreters = python_host_vars(cluster, settings, pythons or {})

    def host_vars(node: Node) -> dict[str, str]:
        # The SSH route as bootstrap's own connections take it (known_hosts, bastion), replacing the inventory's
        # common and extra args, which it folds in.
        found = {"ansible_ssh_common_args": ansible_ssh_common_args(node, settings.ssh), "ansible_ssh_extra_args": ""}
        # Key paths are resolved against the inventory file; ssh would resolve them against its own cwd.
        key = {"ansible_ssh_private_key_file": str(node.key_file)} if node.key_file else {}
        return found | key | interpreters.get(node.name, {})

    groups = {
        "all": {
            "children": {
                "control_plane": {"hosts": {cluster.control_plane.name: host_vars(cluster.control_plane)}},
                "workers": {"hosts": {n.name: host_vars(n) for n in cluster.workers}},
                "k8s_cluster": {"children": {"control_plane": {}, "workers": {}}},
            }
        }
    }
    path = run_dir / "groups.yml"
    path.write_text(yaml.safe_dump(groups, sort_keys=False))
    return path


def run_playbook(
    playbook: str,
    cluster: Cluster,
    settings: Settings,
    *,
    phase: str | None = None,
    limit: list[str] | None = None,
    extra_vars: dict[str, Any] | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    verbose: bool = False,
    become_password: str | None = None,
    pythons: Mapping[str, NodePython] | None = None,
) -> PlaybookResult:
    """Run `playbooks/<playbook>` against the cluster; returns per-host tallies and failures. `pythons` (node ->
    the interpreter preflight chose) goes into the run's inventory; nodes without one are left to Ansible."""
    phase = phase or Path(playbook).stem
    playbook_path = PLAYBOOKS_DIR / playbook
    if not playbook_path.is_file():
        raise BootstrapError(f"internal: playbook {playbook_path} is missing from this checkout")
    import ansible_runner

    run_dir = new_run_dir(phase)
    hosts = [n.name for n in cluster.nodes if not limit or n.name in limit]
    progress = RunProgress(phase=phase, hosts=hosts, tally={h: HostTally() for h in hosts})
    log = (run_dir / "run.log").open("w")
    log.write(f"phase {phase}: playbook {playbook_path}, inventory {cluster.inventory_path}\n")

    logged = 0

    def handle(event: dict[str, Any]) -> bool:
        nonlocal logged
        if not progress.feed(event):
            return True
        for result in progress.results[logged:]:
            timing = f" ({result.duration_s:.1f}s)" if result.duration_s is not None else ""
            log.write(f"{result.host}\t{result.state}\t{result.task}{timing}"
                      + (f"\t{result.message}" if result.message else "") + "\n")
        logged = len(progress.results)
        if on_progress:
            on_progress(progress)
        return True

    envvars = {
        "ANSIBLE_ROLES_PATH": str(ROLES_DIR),
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        "ANSIBLE_SSH_ARGS": ssh_args(settings),
        # Always on: ssh_args' StrictHostKeyChecking=accept-new records new keys; off, Mitogen would check none.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_TIMEOUT": str(settings.ssh.connect_timeout_s),
        # The ansible-playbook installed beside this interpreter first, so an un-activated virtualenv works too.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    } | executor_envvars(settings) | ansible_inventory_env(cluster.inventory_path, cluster.inventory_format)
    passwords = {}
    if become_password is not None:
        passwords = {r"^BECOME password.*:\s*?$": become_password}
    cmdline = "--ask-become-pass" if become_password is not None else None
    all_vars = playbook_vars(cluster, settings) | (extra_vars or {})
    try:
        result = ansible_runner.run(
            private_data_dir=str(run_dir),
            playbook=str(playbook_path),
            inventory=[str(cluster.inventory_path.resolve()),
                       str(_groups_inventory(cluster, run_dir, settings, pythons))],
            limit=",".join(limit) if limit else None,
            extravars=all_vars,
            envvars=envvars,
            passwords=passwords,
            cmdline=cmdline,
            quiet=not verbose,
            event_handler=handle,
            forks=max(20, len(cluster.nodes)),
        )
    finally:
        log.write(f"elapsed {progress.elapsed:.1f}s\n")
        log.close()
    # Hosts the event stream never mentioned (e.g. unreachable before the first task) still get a row.
    for host in hosts:
        progress.tally.setdefault(host, HostTally())
    return PlaybookResult(
        phase=phase,
        playbook=playbook,
        rc=result.rc,
        status=result.status,
        run_dir=run_dir,
        tally=progress.tally,
        failures=progress.failures,
        elapsed_s=progress.elapsed,
    )
