"""`bootstrap lab` without machines: what Vagrant reports (recorded output) becomes an inventory, a known_hosts
file and a cluster.yaml that the rest of the toolkit accepts, host keys checked; mistakes are named."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from dataclasses import replace
from ipaddress import IPv4Network
from pathlib import Path

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError, InputError
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import parse_settings
from provision.lab.vagrant import (
    Lab,
    LabFiles,
    LabMachine,
    LabOptions,
    LabPlan,
    Vagrant,
    host_problem,
    inventory_text,
    lab_settings,
    parse_host_keys,
    parse_machine_states,
    parse_ssh_config,
    write_known_hosts,
)
from tests.support.keys import write_private_key
from tests.support.paths import REPO_ROOT as PROJECT_ROOT

DATA = Path(__file__).parent / "data"
# The project directory of the run the recorded outputs come from.
RECORDED_ROOT = "/work/main"


def plan_for(*names: str, network: str = "192.168.56.0/24") -> LabPlan:
    net = IPv4Network(network)
    machines = tuple(LabMachine(name=name, role="control_plane" if i == 0 else "worker",
                                address=str(net.network_address + 10 + i), cpus=2, memory_mb=4096)
                     for i, name in enumerate(names))
    return LabPlan(provider="libvirt", box="rockylinux/9", libvirt_driver="kvm", network=net, machines=machines)


@pytest.fixture
def recorded_ssh_config(tmp_path: Path) -> str:
    """The recorded `vagrant ssh-config`, moved under tmp_path, with the private keys it names created."""
    text = (DATA / "vagrant-ssh-config.txt").read_text().replace(RECORDED_ROOT, str(tmp_path))
    for endpoint in parse_ssh_config(text).values():
        for key in endpoint.identity_files:
            write_private_key(key)
    return text


def test_recorded_vagrant_ssh_config_is_read_with_paramiko(recorded_ssh_config: str, tmp_path: Path) -> None:
    endpoints = parse_ssh_config(recorded_ssh_config)
    assert sorted(endpoints) == ["lab-control-plane", "lab-worker-1"]
    for name, endpoint in endpoints.items():
        assert endpoint.user == "vagrant" and endpoint.port == 22
        assert endpoint.identity_files == (tmp_path / f".vagrant/machines/{name}/libvirt/private_key",)
        # Vagrant's own way in: the management network, not the private one the cluster uses.
        assert endpoint.host.startswith("192.168.121.")


def test_the_inventory_puts_each_machine_at_its_private_address(recorded_ssh_config: str, tmp_path: Path) -> None:
    plan = plan_for("lab-control-plane", "lab-worker-1")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(inventory_text(plan, parse_ssh_config(recorded_ssh_config)))
    cluster = load_inventory(inventory)
    assert [(n.name, n.role, n.address, n.port, n.user, n.gpu) for n in cluster.nodes] == [
        ("lab-control-plane", "control_plane", "192.168.56.10", 22, "vagrant", "false"),
        ("lab-worker-1", "worker", "192.168.56.11", 22, "vagrant", "false")]
    assert cluster.workers[0].key_file == tmp_path / ".vagrant/machines/lab-worker-1/libvirt/private_key"
    # Vagrant's "StrictHostKeyChecking no" is not carried over: the lab's known_hosts is what counts.
    assert "StrictHostKeyChecking" not in inventory.read_text() and "/dev/null" not in inventory.read_text()


def test_a_machine_vagrant_does_not_report_is_named(recorded_ssh_config: str) -> None:
    plan = plan_for("lab-control-plane", "lab-worker-1", "lab-worker-2")
    with pytest.raises(BootstrapError, match="does not list lab machine 'lab-worker-2'"):
        inventory_text(plan, parse_ssh_config(recorded_ssh_config))


def test_an_ssh_config_without_user_or_key_is_refused() -> None:
    with pytest.raises(BootstrapError, match="no User or IdentityFile for 'lab-control-plane'"):
        parse_ssh_config("Host lab-control-plane\n  HostName 192.168.121.5\n  Port 22\n")


def _host_keys(tmp_path: Path) -> dict[str, Path]:
    keys = {}
    for kind in ("ed25519", "ecdsa", "rsa"):
        path = tmp_path / f"ssh_host_{kind}_key"
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)], check=True)
        keys[kind] = path.with_suffix(".pub")
    return keys


def _fingerprints(text: str) -> set[str]:
    return set(re.findall(r"SHA256:\S+", text))


def test_host_keys_read_from_a_machine_make_a_known_hosts_file_openssh_uses(tmp_path: Path) -> None:
    keys = _host_keys(tmp_path)
    # What `cat /etc/ssh/ssh_host_*_key.pub` prints, with the noise a remote command may add.
    output = "\n".join([*(path.read_text().strip() for path in keys.values()),
                        "Connection to 192.168.121.5 closed.", "ssh-dss AAAAB3NzaC1kc3MAAACBAP8= root@old", ""])
    parsed = parse_host_keys(output, "lab-control-plane")
    assert [key_type for key_type, _ in parsed] == ["ssh-ed25519", "ecdsa-sha2-nistp256", "ssh-rsa"]

    known_hosts = tmp_path / "known_hosts"
    write_known_hosts(known_hosts, {"192.168.56.10": parsed, "192.168.56.11": parsed[:1]})
    found = subprocess.run(["ssh-keygen", "-l", "-F", "192.168.56.10", "-f", str(known_hosts)],
                           capture_output=True, text=True, check=True).stdout
    expected = set()
    for path in keys.values():
        expected |= _fingerprints(subprocess.run(["ssh-keygen", "-l", "-f", str(path)], capture_output=True,
                                                 text=True, check=True).stdout)
    assert len(expected) == 3 and _fingerprints(found) == expected
    assert subprocess.run(["ssh-keygen", "-F", "192.168.56.12", "-f", str(known_hosts)],
                          capture_output=True, check=False).returncode != 0


def test_a_machine_without_a_usable_host_key_is_named() -> None:
    with pytest.raises(BootstrapError, match="lab machine 'lab-worker-1' reported no SSH host key"):
        parse_host_keys("cat: '/etc/ssh/ssh_host_*_key.pub': No such file or directory\n", "lab-worker-1")


def test_the_lab_settings_check_host_keys_run_the_smoke_test_on_cpu_and_keep_the_users_own(tmp_path: Path) -> None:
    known_hosts = tmp_path / "known_hosts"
    base = {"kubernetes": {"version": "1.35"}, "smoke_test": {"mode": "gpu", "epochs": 3},
            "ssh": {"accept_new_host_keys": True}}
    document = lab_settings(plan_for("lab-control-plane"), known_hosts, base)
    settings = parse_settings(document)
    assert settings.smoke_test.mode == "cpu" and settings.smoke_test.epochs == 3
    assert settings.kubernetes.version == "1.35"
    assert settings.ssh.known_hosts_path == known_hosts and settings.ssh.accept_new_host_keys is False
    assert base["smoke_test"]["mode"] == "gpu", "the caller's mapping is left alone"


@pytest.mark.parametrize(("network", "base", "field"), [
    ("10.96.0.0/24", {}, "service_cidr"),
    ("10.244.3.0/24", {}, "pod_cidr"),
    ("192.168.56.0/24", {"kubernetes": {"pod_cidr": "192.168.0.0/16"}}, "pod_cidr"),
])
def test_a_private_network_inside_the_pod_or_service_range_is_refused(tmp_path: Path, network: str,
                                                                     base: dict, field: str) -> None:
    with pytest.raises(InputError, match=rf"^lab network {network} overlaps kubernetes\.{field}"):
        lab_settings(plan_for("lab-control-plane", network=network), tmp_path / "known_hosts", base)


def test_recorded_machine_readable_status_gives_each_machines_state() -> None:
    states = parse_machine_states((DATA / "vagrant-status-machine-readable.txt").read_text())
    assert states == {"lab-control-plane": "running", "lab-worker-1": "shutoff"}


def _fake_vagrant(tmp_path: Path, script: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "vagrant").write_text("#!/bin/sh\n" + textwrap.dedent(script))
    (bin_dir / "vagrant").chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


def test_a_missing_vagrant_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError, match="vagrant is not installed .*apt-get install vagrant vagrant-libvirt"):
        Vagrant(PROJECT_ROOT, {"PATH": str(tmp_path)}).run("status")


def test_a_failing_vagrant_command_reports_vagrants_own_explanation(tmp_path: Path) -> None:
    env = _fake_vagrant(tmp_path, """\
        echo "Bringing machine 'lab-control-plane' up with 'libvirt' provider..."
        echo "Error while connecting to Libvirt: Failed to connect socket to '/var/run/libvirt/libvirt-sock'" >&2
        exit 1
    """)
    log = tmp_path / "vagrant.log"
    with pytest.raises(BootstrapError) as caught:
        Vagrant(PROJECT_ROOT, env).run("up", log=log)
    message = str(caught.value)
    assert message.startswith("`vagrant up` failed (exit 1): Error while connecting to Libvirt")
    assert str(log) in message and "Bringing machine" in log.read_text()
    assert "\n" not in message


def test_a_hung_vagrant_command_is_stopped_at_its_time_limit(tmp_path: Path) -> None:
    env = _fake_vagrant(tmp_path, "echo starting\nexec sleep 60\n")
    with pytest.raises(BootstrapError, match=r"`vagrant ssh-config` did not finish within 1s and was stopped"):
        Vagrant(PROJECT_ROOT, env).run("ssh-config", timeout_s=1)


def test_streamed_output_reaches_the_caller_line_by_line(tmp_path: Path) -> None:
    env = _fake_vagrant(tmp_path, 'echo "==> one"\necho "warning on stderr" >&2\necho "==> two"\n')
    seen: list[str] = []
    output = Vagrant(PROJECT_ROOT, env).run("up", on_line=seen.append)
    # stdout only: Vagrant's warnings on stderr never end up in parsed output such as ssh-config.
    assert seen == ["==> one", "==> two"] and output == "==> one\n==> two"


def _lab_with_files(tmp_path: Path, recorded_ssh_config: str) -> Lab:
    plan = plan_for("lab-control-plane", "lab-worker-1")
    lab = Lab(PROJECT_ROOT, tmp_path / "state" / "lab", {"PATH": os.environ["PATH"]})
    lab.files.state_dir.mkdir(parents=True)
    lab.files.plan.write_text(
        '{"provider": "libvirt", "box": "rockylinux/9", "libvirt_driver": "kvm", "network": "192.168.56.0/24", '
        '"netmask": "255.255.255.0", "machines": ['
        + ", ".join(f'{{"name": "{m.name}", "role": "{m.role}", "address": "{m.address}", "cpus": 2, '
                    f'"memory_mb": 4096}}' for m in plan.machines) + "]}")
    lab.files.inventory.write_text(inventory_text(plan, parse_ssh_config(recorded_ssh_config)))
    return lab


def test_lab_ssh_checks_the_recorded_host_key(tmp_path: Path, recorded_ssh_config: str) -> None:
    lab = _lab_with_files(tmp_path, recorded_ssh_config)
    argv = lab.ssh_argv("lab-worker-1", ["hostname"])
    assert argv[0] == "ssh" and argv[-2:] == ["vagrant@192.168.56.11", "hostname"]
    options = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"]
    assert "StrictHostKeyChecking=yes" in options
    assert f"UserKnownHostsFile={lab.files.known_hosts}" in options
    assert argv[argv.index("-i") + 1] == str(tmp_path / ".vagrant/machines/lab-worker-1/libvirt/private_key")
    # The saved plan also tells later commands which machines `up` made.
    assert lab.saved_plan().environment()["LAB_WORKERS"] == "1"
    with pytest.raises(InputError, match="no lab machine named 'lab-worker-9'; the lab has: lab-control-plane, "
                                         "lab-worker-1"):
        lab.ssh_argv("lab-worker-9")


def test_lab_commands_before_lab_up_say_what_to_do(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["lab", "ssh", "lab-control-plane"],
                                env={"BOOTSTRAP_STATE_DIR": str(tmp_path / "none")})
    assert result.exit_code != 0
    assert isinstance(result.exception, InputError)
    assert "there is no lab here yet: run `bootstrap lab up` first" in str(result.exception)

    # Status works before any `lab up`: Vagrant lists what the Vagrantfile would make, no plan is written.
    env = _fake_vagrant(tmp_path, """\
        [ -z "$LAB_PLAN_FILE" ] || exit 3
        echo "1795295605,lab-control-plane,state,not_created"
    """)
    result = CliRunner().invoke(app, ["lab", "status"], env=env | {"BOOTSTRAP_STATE_DIR": str(tmp_path / "none")})
    assert result.exit_code == 0, result.output
    assert ["lab-control-plane", "not_created", "-"] in [line.split() for line in result.output.splitlines()]
    assert not (tmp_path / "none").exists()


def test_the_slow_vagrant_test_stays_out_of_a_plain_run() -> None:
    def collect(env: dict[str, str], *args: str) -> str:
        return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                               "tests/vagrant", *args], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True,
                              timeout=120, check=False).stdout

    env = {k: v for k, v in os.environ.items() if k != "RUN_SLOW"}
    assert "1 deselected" in collect(env)
    assert "test_lab_machine.py::" in collect(env, "-m", "slow")
    assert "test_lab_machine.py::" in collect(env | {"RUN_SLOW": "1"})


def test_lab_status_and_down_act_on_the_machines_up_made(tmp_path: Path, recorded_ssh_config: str) -> None:
    """`lab down` destroys what the saved plan names (one worker here, whatever lab.yml says by then) and removes
    the lab's files and the state `bootstrap up` kept for its cluster."""
    lab = _lab_with_files(tmp_path, recorded_ssh_config)
    calls = tmp_path / "calls"
    status = (DATA / "vagrant-status-machine-readable.txt").read_text()
    env = _fake_vagrant(tmp_path, f"""\
        echo "$* LAB_WORKERS=$LAB_WORKERS" >> {calls}
        [ "$1" = status ] && cat <<'OUT'
        {textwrap.indent(status, "        ").strip()}
        OUT
        exit 0
    """)
    cluster_state = tmp_path / "state" / "clusters" / "lab-control-plane@192.168.56.10"
    cluster_state.mkdir(parents=True)
    (cluster_state / "admin.conf").write_text("apiVersion: v1\n")
    env |= {"BOOTSTRAP_STATE_DIR": str(tmp_path / "state"), "LAB_WORKERS": "5"}
    runner = CliRunner()

    shown = runner.invoke(app, ["lab", "status"], env=env)
    assert shown.exit_code == 0, shown.output
    assert any(line.split() == ["lab-control-plane", "running", "192.168.56.10"] for line in shown.output.splitlines())
    assert any(line.split() == ["lab-worker-1", "shutoff", "192.168.56.11"] for line in shown.output.splitlines())

    refused = runner.invoke(app, ["lab", "down"], env=env, input="n\n")
    assert refused.exit_code != 0 and lab.files.state_dir.exists()
    gone = runner.invoke(app, ["lab", "down", "--yes"], env=env)
    assert gone.exit_code == 0, gone.output
    assert calls.read_text().splitlines() == ["status --machine-readable LAB_WORKERS=1",
                                              "destroy --force LAB_WORKERS=1"]
    assert not lab.files.state_dir.exists() and not cluster_state.exists()


def test_lab_up_passes_its_options_and_settings_on_then_runs_bootstrap_up(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The command is thin: flags become the Vagrantfile's variables, --config the base of the lab's settings,
    then the same pipeline as `bootstrap up` runs on the lab's files and the kubeconfig is named."""
    made: list[tuple[LabOptions, dict]] = []
    ran: list[tuple[Path, Path]] = []
    files = LabFiles(tmp_path / "state")
    files.state_dir.mkdir()
    files.inventory.write_text("[control_plane]\nlab-control-plane ansible_host=192.168.56.10\n")

    def fake_up(self: Lab, options: LabOptions, base_settings: dict, on_line: object = None) -> LabFiles:
        made.append((options, base_settings))
        return files

    import provision.cli.commands.up as up_command

    monkeypatch.setattr(Lab, "up", fake_up)
    monkeypatch.setattr(up_command, "run_up_command",
                        lambda nodes: ran.append((nodes.inventory, nodes.config)))
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    mine = tmp_path / "mine.yaml"
    mine.write_text("kubernetes:\n  version: '1.35'\n")
    runner = CliRunner()

    result = runner.invoke(app, ["lab", "up", "--workers", "2", "--os", "alma9", "--memory", "3072",
                                 "--libvirt-driver", "qemu", "--config", str(mine)])
    assert result.exit_code == 0, result.output
    assert made == [(LabOptions(workers=2, memory_mb=3072, os="alma9", libvirt_driver="qemu"),
                     {"kubernetes": {"version": "1.35"}})]
    assert ran == [(files.inventory, files.settings)]
    assert f"export KUBECONFIG={tmp_path / 'state' / 'clusters' / 'lab-control-plane@192.168.56.10' / 'admin.conf'}" in result.output

    result = runner.invoke(app, ["lab", "up", "--machines-only"])
    assert result.exit_code == 0 and len(ran) == 1
    assert f"bootstrap up --inventory {files.inventory} --config {files.settings}" in " ".join(result.output.split())

    mine.write_text("kubernetes:\n  verison: '1.30'\n")
    result = runner.invoke(app, ["lab", "up", "--config", str(mine)])
    assert isinstance(result.exception, InputError) and "did you mean 'kubernetes.version'" in str(result.exception)
    assert len(made) == 2, "bad settings are refused before any machine is made"


@pytest.fixture
def listening_socket(tmp_path: Path):
    path = tmp_path / "libvirt-sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(path))
        server.listen(16)
        yield path


def test_a_stopped_libvirtd_or_a_missing_kvm_is_said_before_vagrant_up(tmp_path: Path, listening_socket: Path) -> None:
    stale = tmp_path / "stale-sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.bind(str(stale))
    kvm_plan, qemu_plan = plan_for("lab-control-plane"), replace(plan_for("lab-control-plane"), libvirt_driver="qemu")
    for sockets in ((tmp_path / "missing-sock",), (stale,)):
        problem = host_problem(kvm_plan, sockets=sockets, kvm=tmp_path / "kvm")
        assert problem is not None and problem.startswith("libvirtd is not running")
        assert "sudo systemctl start libvirtd" in problem
    no_kvm = host_problem(kvm_plan, sockets=(listening_socket,), kvm=tmp_path / "kvm")
    assert no_kvm is not None and "no usable KVM" in no_kvm and "--libvirt-driver qemu" in no_kvm
    assert host_problem(qemu_plan, sockets=(listening_socket,), kvm=tmp_path / "kvm") is None
    (tmp_path / "kvm").touch()
    assert host_problem(kvm_plan, sockets=(listening_socket,), kvm=tmp_path / "kvm") is None
    assert host_problem(replace(kvm_plan, provider="virtualbox"), sockets=(tmp_path / "missing-sock",)) is None


def test_lab_up_stops_before_vagrant_up_when_libvirtd_is_not_running(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls"
    plan = ('{"provider": "libvirt", "box": "rockylinux/9", "libvirt_driver": "qemu", "network": "192.168.56.0/24", '
            '"machines": [{"name": "lab-control-plane", "role": "control_plane", "address": "192.168.56.10", '
            '"cpus": 2, "memory_mb": 4096}]}')
    env = _fake_vagrant(tmp_path, f"""\
        echo "$1" >> {calls}
        [ "$1" = validate ] && echo '{plan}' > "$LAB_PLAN_FILE"
        exit 0
    """)
    monkeypatch.setattr("provision.lab.vagrant.LIBVIRT_SOCKETS", (tmp_path / "no-libvirt-sock",))
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    result = CliRunner().invoke(app, ["lab", "up"], env=env)
    assert isinstance(result.exception, BootstrapError) and "libvirtd is not running" in str(result.exception)
    assert calls.read_text().split() == ["validate"]
