"""Run a playbook through ansible-runner and turn its event stream into progress and a result.

The library never prints: progress goes to an `on_progress` callback (the CLI draws the live view from
it) and every run leaves its artifacts and a plain-text log in a run directory under the state directory's
`runs/`. Counting the events is `tally.EventTally`'s; this module runs Ansible and writes the log.

Ansible is given nothing the tool did not check: the run's inventory is written from the validated Cluster (the
user's inventory file is never handed to Ansible, so it reads no variable, group_vars file or plugin the
validation did not), every value in it and in the extra variables is data Ansible will not template
(render/ansible_data.py), and Ansible runs under the tool's configuration, plugins and environment
(inputs/ansible_control.py).
"""
from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from provision.errors import BootstrapError
from provision.inputs.ansible_control import check_environment, tool_environment
from provision.inputs.inventory import Cluster, Node
from provision.inputs.platforms import NodePython
from provision.inputs.settings import Settings
from provision.inputs.state import private_dir, runs_root
from provision.nodes.ssh import ansible_ssh_common_args
from provision.nodes.tally import EventTally, HostTally, TaskFailure
from provision.render.ansible_data import unsafe_yaml
from provision.render.playbook_vars import playbook_vars, python_host_vars
from provision.resources import PLAYBOOKS_DIR


@dataclass(kw_only=True)
class RunProgress(EventTally):
    """What the live view shows: the run's tally, updated in place as events arrive, and its clock."""

    phase: str
    hosts: list[str]
    started: float = field(default_factory=time.monotonic)
    # Host -> the tasks the last complete run of this phase ran there (previous_counts): the live view's "of about N".
    expected: dict[str, int] = field(default_factory=dict)

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

    @property
    def failed_hosts(self) -> dict[str, TaskFailure]:
        """Each failed or unreachable host's own first cause, in inventory order."""
        tally = EventTally(tally=self.tally, failures=self.failures)
        return tally.first_failures()

    def raise_for_failure(self) -> None:
        """Raise BootstrapError naming every failed or unreachable host, one line each, with its own cause."""
        if self.ok:
            return
        failed = self.failed_hosts
        if not failed:
            raise BootstrapError(f"{self.phase} failed: ansible-playbook ended with status {self.status} "
                                 f"(full log: {self.run_dir / 'run.log'})")
        raise nodes_error(self.phase, {host: failure_line(f) for host, f in failed.items()},
                          {host: failure_mark(f) for host, f in failed.items()}, len(self.tally),
                          self.run_dir / "run.log")


def failure_line(failure: TaskFailure) -> str:
    """A failed host's line in the closing error."""
    text = failure.describe()
    if failure.unreachable:
        # The others finished their play; this node did not: once it answers over SSH again, a re-run finishes it.
        text += " (once it answers again, re-run)"
    return text


def failure_mark(failure: TaskFailure) -> str:
    return "unreachable" if failure.unreachable else "failed"


def nodes_error(phase: str, lines: Mapping[str, str], marks: Mapping[str, str], hosts: int,
                log: Path) -> BootstrapError:
    """The closing error of a phase some nodes failed: one node on one line; several, a line each (host order)."""
    if len(lines) == 1:
        return BootstrapError(f"{phase} failed: {next(iter(lines.values()))} (full log: {log})", nodes=marks)
    listed = "\n".join(f"  {line}" for line in lines.values())
    return BootstrapError(f"{phase} failed on {len(lines)} of {hosts} nodes (full log: {log}):\n{listed}", nodes=marks)


def previous_counts(phase: str, hosts: list[str]) -> dict[str, int]:
    """Host -> the tasks that ended there in the last run of `phase` that reached every one of `hosts` and ended
    (its run.log's result lines): about how many this run has, where the last one ran the same playbook. {} when
    no such run is kept."""
    runs = sorted(runs_root().glob(f"*-{phase}/run.log"), reverse=True) if runs_root().is_dir() else []
    for log in runs[:10]:
        counts: dict[str, int] = {}
        try:
            lines = log.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines[1:]:
            host, _, rest = line.partition("\t")
            if rest and not rest.startswith("RETRYING"):
                counts[host] = counts.get(host, 0) + 1
        if hosts and all(host in counts for host in hosts):
            return {host: counts[host] for host in hosts}
    return {}


def new_run_dir(phase: str) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    run_dir = private_dir(runs_root()) / f"{stamp}-{phase}"
    run_dir.mkdir(exist_ok=False)
    return run_dir


# A node that stops answering (its link cut, its machine stopped) is called unreachable after about
# KEEPALIVE_INTERVAL_S * KEEPALIVE_COUNT seconds, also in the middle of a long task, so the others finish their play.
KEEPALIVE_INTERVAL_S = 5
KEEPALIVE_COUNT = 4


def ssh_args(settings: Settings) -> str:
    """SSH options for Ansible: multiplexed connections, host keys checked (never silently accepted), and a dead
    connection noticed within seconds. The known_hosts file and a bastion are per host (ansible_ssh_common_args, in
    run_inventory)."""
    ssh = settings.ssh
    strict = "accept-new" if ssh.accept_new_host_keys else "yes"
    return " ".join([
        "-o ControlMaster=auto -o ControlPersist=60s",
        f"-o StrictHostKeyChecking={strict}",
        f"-o ConnectTimeout={ssh.connect_timeout_s}",
        f"-o ServerAliveInterval={KEEPALIVE_INTERVAL_S} -o ServerAliveCountMax={KEEPALIVE_COUNT}",
    ])


def connection_vars() -> dict[str, int]:
    """Mitogen opens its own SSH connections (ANSIBLE_SSH_ARGS aside) with its own keep-alive (30 s x 10 by
    default, five minutes before a dead node is noticed): the same bound as ssh_args'."""
    return {"mitogen_ssh_keepalive_interval": KEEPALIVE_INTERVAL_S, "mitogen_ssh_keepalive_count": KEEPALIVE_COUNT}


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


# The run's ansible-playbook: the real one started under a shell that outlives nothing. When the controller dies
# (setpriv's parent-death signal) or the wrapper is told to stop, it interrupts the whole play as Ctrl-C in its
# terminal would (every process of the group: Ansible's workers and Mitogen's too), and kills what is left after
# the grace period. stdin is handed on explicitly: a background job's would be /dev/null.
_PLAY_WRAPPER = """#!/bin/sh
if [ -z "${{CB_PLAY_GUARDED:-}}" ]; then
  CB_PLAY_GUARDED=1 exec {setpriv} --pdeathsig INT -- "$0" "$@"
fi
exec 3<&0
{playbook} "$@" <&3 3<&- &
play=$!
stop() {{
  trap '' INT TERM
  kill -INT 0
  for _ in $(seq {grace_s}); do kill -0 "$play" 2>/dev/null || exit 130; sleep 1; done
  kill -KILL 0
}}
trap stop INT TERM
wait "$play"
"""
PLAY_STOP_GRACE_S = 10


def _ended_with_us(run_dir: Path) -> list[str]:
    """PATH entries under which ansible-playbook ends when this process does.

    ansible-runner starts ansible-playbook in a session of its own that ignores the hang-up of its terminal, so
    a controller killed with its process group (or Ctrl-C) would leave it running the play on without anyone
    watching, beside the next run. Signalling ansible-playbook alone is not enough: a worker blocked in a task (a
    Mitogen connection to a node that went away) kept the play alive for minutes. Started through the wrapper
    above, the play's whole process group is interrupted when we die, and killed after PLAY_STOP_GRACE_S. Without
    setpriv (not Linux) it is started as is.
    """
    setpriv, playbook = shutil.which("setpriv"), Path(sys.executable).parent / "ansible-playbook"
    if setpriv is None or not playbook.is_file():
        return []
    bin_dir = run_dir / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ansible-playbook"
    wrapper.write_text(_PLAY_WRAPPER.format(setpriv=shlex.quote(setpriv), playbook=shlex.quote(str(playbook)),
                                            grace_s=PLAY_STOP_GRACE_S))
    wrapper.chmod(0o755)
    return [str(bin_dir)]


def run_inventory(cluster: Cluster, run_dir: Path, settings: Settings,
                  pythons: Mapping[str, NodePython] | None = None) -> Path:
    """The run's inventory, written from the validated Cluster alone: the groups our playbooks target, and per host
    exactly the connection bootstrap's own connections use (address, port, user, key, known_hosts and bastion),
    the interpreter (the inventory's, else preflight's choice: render/playbook_vars.py python_host_vars) and
    ansible_become where the inventory gave it. Every string is data Ansible will not template."""
    interpreters = python_host_vars(cluster, settings, pythons or {})

    def host_vars(node: Node) -> dict[str, object]:
        found: dict[str, object] = {
            "ansible_host": node.address, "ansible_port": node.port, "ansible_user": node.user,
            # The SSH route as bootstrap's own connections take it (known_hosts, bastion, the allowed options).
            "ansible_ssh_common_args": ansible_ssh_common_args(node, settings.ssh),
        }
        if node.key_file:
            # Resolved against the inventory file; ssh would resolve a relative one against its own cwd.
            found["ansible_ssh_private_key_file"] = str(node.key_file)
        if node.python_interpreter:
            found["ansible_python_interpreter"] = node.python_interpreter
        if node.become is not None:
            found["ansible_become"] = node.become
        return found | interpreters.get(node.name, {})

    # Ansible's names for the nodes (inventory host names), the control planes in inventory order: the first is
    # where kubeadm init runs, the others join it in that order.
    groups = {
        "all": {
            "children": {
                "control_plane": {"hosts": {n.host: host_vars(n) for n in cluster.control_planes}},
                "first_control_plane": {"hosts": {cluster.control_plane.host: None}},
                "workers": {"hosts": {n.host: host_vars(n) for n in cluster.workers}},
                "k8s_cluster": {"children": {"control_plane": None, "workers": None}},
            }
        }
    }
    path = run_dir / "inventory.yml"
    path.write_text(unsafe_yaml(groups))
    return path


def extra_vars_file(run_dir: Path, variables: Mapping[str, Any]) -> Path:
    """The run's extra variables, where ansible-runner passes them (`-e @env/extravars`), every string untemplated
    (a JSON `-e` on the command line would be trusted and templated). Readable by this user only: a phase's
    variables may carry what the nodes need to join."""
    path = run_dir / "env" / "extravars"
    path.parent.mkdir(exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(unsafe_yaml(variables))
    return path


def _event_handler(progress: RunProgress, log: TextIO,
                   on_progress: Callable[[RunProgress], None] | None) -> Callable[[dict[str, Any]], bool]:
    """ansible-runner's event handler: each event fed to `progress`, each new task result written to the run's
    log as one line, and `on_progress` told. It always returns True: every event is kept."""
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

    return handle


def _run_environment(settings: Settings, run_dir: Path) -> dict[str, str]:
    """The environment ansible-playbook runs in: the tools', SSH's and the executor's settings."""
    return tool_environment() | {
        "ANSIBLE_SSH_ARGS": ssh_args(settings),
        # Always on: ssh_args' StrictHostKeyChecking=accept-new records new keys; off, Mitogen would check none.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_TIMEOUT": str(settings.ssh.connect_timeout_s),
        # The ansible-playbook installed beside this interpreter first, so an un-activated virtualenv works too, and
        # bound to end with this process.
        "PATH": os.pathsep.join([*_ended_with_us(run_dir), str(Path(sys.executable).parent),
                                 os.environ.get("PATH", "")]),
    } | executor_envvars(settings)


def run_playbook(
    playbook: str,
    cluster: Cluster,
    settings: Settings,
    *,
    phase: str | None = None,
    limit: Sequence[str] | None = None,
    extra_vars: dict[str, Any] | None = None,
    on_progress: Callable[[RunProgress], None] | None = None,
    verbose: bool = False,
    become_password: str | None = None,
    pythons: Mapping[str, NodePython] | None = None,
) -> PlaybookResult:
    """Run `playbooks/<playbook>` against the cluster, limited to `limit` (inventory host names, Node.host), if
    given; returns tallies and failures per inventory host name. `pythons` (node name -> the interpreter preflight
    chose) goes into the run's inventory; nodes without one are left to Ansible."""
    phase = phase or Path(playbook).stem
    check_environment()
    playbook_path = PLAYBOOKS_DIR / playbook
    if not playbook_path.is_file():
        raise BootstrapError(f"internal: playbook {playbook_path} is missing from this checkout")
    import ansible_runner

    hosts: list[str] = [n.host for n in cluster.nodes if not limit or n.host in limit]
    expected = previous_counts(phase, hosts)
    run_dir = new_run_dir(phase)
    progress = RunProgress(phase=phase, hosts=hosts, tally={h: HostTally() for h in hosts}, expected=expected)
    # Line-buffered: `tail -f run.log` (and a test watching it) sees each result as it comes.
    log = (run_dir / "run.log").open("w", buffering=1)
    log.write(f"phase {phase}: playbook {playbook_path}, inventory {cluster.inventory_path}\n")

    handle = _event_handler(progress, log, on_progress)
    envvars = _run_environment(settings, run_dir)
    passwords = {}
    if become_password is not None:
        passwords = {r"^BECOME password.*:\s*?$": become_password}
    cmdline = "--ask-become-pass" if become_password is not None else None
    extra_vars_file(run_dir, playbook_vars(cluster, settings) | connection_vars() | (extra_vars or {}))
    try:
        result = ansible_runner.run(
            private_data_dir=str(run_dir),
            playbook=str(playbook_path),
            inventory=str(run_inventory(cluster, run_dir, settings, pythons)),
            limit=",".join(limit) if limit else None,
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
