"""Ansible under the tool's control (provision/inputs/ansible_control.py, ansible_variables.py, runner.py): what a
user can put beside an inventory, in the working folder, in HOME or in the environment never makes Ansible run a
command of its choosing or connect another way, and a value the tool hands Ansible is data, never a template.

Each hostile door writes a marker file if anything it holds is run; the tests assert the marker is never there.
Commands run as `python -m provision` where the process matters (Ansible reads its configuration when it is first
imported), with HOME, the working folder and the state directory of the test's own.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provision.inputs.ansible_control import DISPLAY_ONLY, environment_problem
from provision.inputs.ansible_variables import REFUSED, UNDERSTOOD
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from provision.nodes.runner import run_playbook
from provision.render.ansible_data import unsafe_yaml
from tests.support.paths import REPO_ROOT
from tests.support.refusal import Outcome, assert_refused, run_main

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"
ECHO = str(REPO_ROOT / "tests" / "playbooks" / "echo_values.yml")


def touch(marker: Path) -> str:
    return f"{{{{ lookup('pipe', 'touch {marker}') }}}}"


def bootstrap(tmp_path: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> Outcome:
    """`python -m provision ARGS` with HOME, the state directory and the working folder of this test's own."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    environ |= {"HOME": str(home), "BOOTSTRAP_STATE_DIR": str(tmp_path / "state")} | (env or {})
    done = subprocess.run([sys.executable, "-m", "provision", *args], capture_output=True, text=True,
                          cwd=cwd or tmp_path, env=environ, timeout=120)
    return Outcome(done.returncode, done.stdout, done.stderr)


def assert_created_nothing(tmp_path: Path) -> None:
    """Nothing in the state directory, nothing in HOME (Ansible's ~/.ansible/tmp included)."""
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())
    assert sorted((tmp_path / "home").rglob("*")) == []


def test_a_vars_plugin_named_in_an_ansible_cfg_of_the_working_folder_is_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    work = tmp_path / "work"
    (work / "plugins").mkdir(parents=True)
    (work / "plugins" / "evil.py").write_text(
        "import pathlib\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "from ansible.plugins.vars import BaseVarsPlugin\n"
        "class VarsModule(BaseVarsPlugin):\n"
        "    REQUIRES_ENABLED = False\n"
        "    def get_vars(self, loader, path, entities, cache=True):\n"
        "        return {}\n")
    (work / "ansible.cfg").write_text("[defaults]\nvars_plugins = ./plugins\nvars_plugins_enabled = evil,host_group_vars\n"
                                      "inventory_plugins = ./plugins\nlookup_plugins = ./plugins\n")
    (work / "hosts.ini").write_text(INVENTORY)
    outcome = bootstrap(tmp_path, "config", "validate", "-i", "hosts.ini", cwd=work)
    assert outcome.code == 0, outcome.stderr
    assert not marker.exists()
    assert_created_nothing(tmp_path)


def test_a_legacy_vars_plugin_in_homes_plugin_folder_is_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plugins = tmp_path / "home" / ".ansible" / "plugins" / "vars"
    plugins.mkdir(parents=True)
    (plugins / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\n")
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    outcome = bootstrap(tmp_path, "config", "validate", "-i", "hosts.ini")
    assert outcome.code == 0, outcome.stderr
    assert not marker.exists()
    # HOME holds the plugin the test put there, and nothing Ansible made (no ~/.ansible/tmp).
    assert sorted(p.relative_to(tmp_path / "home") for p in (tmp_path / "home").rglob("*")) == [
        Path(".ansible"), Path(".ansible/plugins"), Path(".ansible/plugins/vars"), Path(".ansible/plugins/vars/evil.py")]


def test_an_executable_inventory_is_read_as_the_file_it_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = tmp_path / "hosts"
    script.write_text(f"#!/bin/sh\ntouch {marker}\necho '{{\"all\": {{\"hosts\": [\"10.0.0.1\"]}}}}'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    outcome = bootstrap(tmp_path, "config", "validate", "-i", str(script))
    assert_refused(outcome, str(script))
    assert not marker.exists()
    assert_created_nothing(tmp_path)


def test_an_inventory_plugin_file_is_not_loaded_and_its_templates_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"plugin": "ansible.builtin.constructed", "strict": False,
                                         "compose": {"x": touch(marker)}, "groups": {"control_plane": touch(marker)}}))
    assert_refused(bootstrap(tmp_path, "config", "validate", "-i", str(inventory)), str(inventory))
    assert not marker.exists()
    assert_created_nothing(tmp_path)


@pytest.mark.parametrize("variable", ["ANSIBLE_CONFIG", "ANSIBLE_SSH_EXECUTABLE", "ANSIBLE_STRATEGY_PLUGINS",
                                      "ANSIBLE_INVENTORY_ENABLED", "ANSIBLE_VARS_PLUGINS", "ANSIBLE_REMOTE_TEMP",
                                      "ANSIBLE_BECOME_EXE", "ANSIBLE_HOST_KEY_CHECKING", "ANSIBLE_COLLECTIONS_PATH"])
def test_an_ansible_variable_in_the_environment_is_refused_naming_it(tmp_path: Path, variable: str) -> None:
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    outcome = bootstrap(tmp_path, "preflight", "-i", "hosts.ini", env={variable: str(tmp_path / "elsewhere")})
    line = assert_refused(outcome, variable, f"unset {variable}")
    assert "Traceback" not in line
    assert_created_nothing(tmp_path)


def test_what_only_changes_what_ansible_prints_is_let_through() -> None:
    assert environment_problem({"ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "1", "PATH": "/usr/bin"}) is None
    assert "ANSIBLE_NOCOLOR" in DISPLAY_ONLY and environment_problem({"ANSIBLE_LOG_PATH": "/tmp/x"})


def test_a_refused_and_an_accepted_validation_leave_nothing_in_home(tmp_path: Path) -> None:
    (tmp_path / "good.ini").write_text(INVENTORY)
    (tmp_path / "bad.ini").write_text(INVENTORY.replace("10.0.0.2", "10.0.0.2 ansible_port=0"))
    assert bootstrap(tmp_path, "config", "validate", "-i", "good.ini").code == 0
    assert_refused(bootstrap(tmp_path, "up", "-i", "bad.ini"), "ansible_port")
    assert_created_nothing(tmp_path)


# --- Ansible's own variables: understood, or refused --------------------------------------------------------------

def _plugin_variables() -> set[str]:
    """Every variable the connection, privilege-escalation and shell plugins a run uses read, as Ansible's own
    configuration of each plugin declares them (doc fragments included)."""
    import ansible.constants as constants
    from ansible.plugins.loader import become_loader, connection_loader, shell_loader

    names: set[str] = set()
    for kind, loader, plugin in (("connection", connection_loader, "ssh"), ("become", become_loader, "sudo"),
                                 ("shell", shell_loader, "sh")):
        loader.get(plugin, class_only=True)
        for option in (constants.config.get_configuration_definitions(kind, plugin) or {}).values():
            names |= {entry["name"] for entry in option.get("vars") or [] if "[" not in entry["name"]}
    return names - {"inventory_hostname"}


def test_every_variable_ansible_reads_to_reach_a_node_is_understood_or_refused(tmp_path: Path) -> None:
    variables = _plugin_variables()
    assert {"ansible_ssh_executable", "ansible_become_exe", "ansible_remote_tmp", "ansible_password"} <= variables
    for name in sorted(variables - UNDERSTOOD):
        path = tmp_path / f"{name}.ini"
        path.write_text(INVENTORY.replace("10.0.0.2", f"10.0.0.2 {name}=/tmp/x"))
        outcome = run_main("config", "validate", "-i", str(path))
        line = assert_refused(outcome, str(path), "host 'w1'", name)
        assert "/tmp/x" not in line or "pass" not in name, line


@pytest.mark.parametrize("name", ["ansible_perl_interpreter", "ansible_shell_executable", "mitogen_via",
                                  "ansible_ssh_args", "ansible_some_future_variable", "ansible_become_password"])
def test_other_ansible_and_mitogen_variables_are_refused_too(tmp_path: Path, name: str) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INVENTORY.replace("10.0.0.2", f"10.0.0.2 {name}=s3cret-value"))
    line = assert_refused(run_main("config", "validate", "-i", str(path)), name)
    if "pass" in name:
        assert "s3cret-value" not in line
    assert set(REFUSED) >= {"ansible_ssh_executable", "ansible_become_password"}


@pytest.mark.parametrize(("variables", "expected"), [
    ("ansible_host=10.0.0.2 ansible_ssh_host=10.0.0.9", ["ansible_host='10.0.0.2'", "ansible_ssh_host='10.0.0.9'"]),
    ("ansible_port=22 ansible_ssh_port=2222", ["ansible_port=", "ansible_ssh_port="]),
    ("ansible_user=ops ansible_ssh_user=root", ["ansible_user='ops'", "ansible_ssh_user='root'"]),
    ("ansible_become_user=admin", ["ansible_become_user"]),
    ("ansible_become_method=su", ["ansible_become_method"]),
    ("ansible_python_interpreter='{{ lookup(\"pipe\", \"id\") }}'", ["ansible_python_interpreter"]),
], ids=["host", "port", "user", "become-user", "become-method", "templated-interpreter"])
def test_two_spellings_that_would_send_ansible_elsewhere_are_refused(tmp_path: Path, variables: str,
                                                                     expected: list[str]) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 " + variables + "\n")
    assert_refused(run_main("config", "validate", "-i", str(path)), "host 'w1'", *expected)


def test_the_old_spelling_alone_is_read_as_ansible_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text("[control_plane]\ncp1 ansible_ssh_host=10.0.0.1 ansible_ssh_port=2222 ansible_ssh_user=ops\n")
    (node,) = load_inventory(path).nodes
    assert (node.address, node.port, node.user) == ("10.0.0.1", 2222, "ops")


# --- ssh arguments: read as OpenSSH reads them, against an allowlist -----------------------------------------------

@pytest.mark.parametrize(("arguments", "expected"), [
    ("-vo StrictHostKeyChecking=no", ["-v"]),
    ("-qo StrictHostKeyChecking=no", ["always checked"]),
    ("-o ProxyCommand=none -o StrictHostKeyChecking=no", ["always checked"]),
    ("-o Ciphers=none", ["not an option bootstrap reads"]),
    ("-o HostKeyAlgorithms=+ssh-dss", ["not an option bootstrap reads"]),
    ("-o LocalCommand=touch", ["not an option bootstrap reads"]),
    ("-A", ["not an option bootstrap reads"]),
    ("-J a.example.com -o ProxyJump=b.example.com", ["given twice, differently"]),
    ("-o ProxyJump=a.example.com -o ProxyJump=b.example.com", ["given twice, differently"]),
    ("bastion.example.com", ["not an ssh option"]),
    ("-- -o StrictHostKeyChecking=no", ["not an ssh option"]),
    ("-Z", ["-Z is not an ssh option"]),
    ("-o ConnectTimeout=1", ["ssh.connect_timeout_s"]),
], ids=["bundled-verbose", "bundled-quiet-strict", "strict-after-other", "ciphers", "host-key-algorithms",
        "local-command", "agent-forwarding", "two-bastions-two-spellings", "two-bastions", "a-bare-word",
        "end-of-options", "unknown-flag", "connect-timeout"])
def test_ssh_arguments_are_read_as_openssh_reads_them_and_only_known_options_pass(
        tmp_path: Path, arguments: str, expected: list[str]) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INVENTORY.replace("10.0.0.2", f"10.0.0.2 ansible_ssh_common_args='{arguments}'"))
    assert_refused(run_main("config", "validate", "-i", str(path)), "host 'w1'", "ansible_ssh_common_args", *expected)


def test_a_bundled_bastion_is_read_by_bootstrap_as_ansible_would_use_it(tmp_path: Path) -> None:
    path = tmp_path / "hosts.ini"
    path.write_text(INVENTORY.replace("10.0.0.2", "10.0.0.2 ansible_ssh_common_args='-qCJ ops@bastion.example.com:2222 "
                                                  "-oServerAliveInterval=5'"))
    node = load_inventory(path).node("w1")
    assert (node.ssh.jump and (node.ssh.jump.user, node.ssh.jump.host, node.ssh.jump.port)) == \
        ("ops", "bastion.example.com", 2222)
    assert node.ssh.passed == ("-q", "-C", "-o", "ServerAliveInterval=5")


# --- values handed to Ansible are data --------------------------------------------------------------------------

def test_a_value_written_for_ansible_is_text_to_ansibles_own_loader_and_templar(tmp_path: Path) -> None:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    marker = tmp_path / "ran"
    hostile = {"plain": touch(marker), "nested": {"list": [touch(marker), "{% raw %}x{% endraw %}", "a: b # c"],
                                                   "quote": "it's \"quoted\"\n\\0\x00"}, "number": 3, "flag": True}
    loaded = DataLoader().load(unsafe_yaml(hostile))
    templar = Templar(loader=DataLoader(), variables={"value": loaded})
    assert templar.template(trust_as_template("{{ value }}")) == hostile
    assert templar.template(trust_as_template("{{ value.nested.list[0] }}")) == touch(marker)
    assert not marker.exists()


def test_extra_variables_reach_the_tasks_as_the_text_they_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through ansible-playbook, as a run hands them (env/extravars): a JSON `-e` would be templated."""
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    marker = tmp_path / "ran"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[control_plane]\ncp1 ansible_host=127.0.0.11\n[all:vars]\n"
                         f"ansible_python_interpreter={sys.executable}\n")
    result = run_playbook(ECHO, load_inventory(inventory), Settings(), phase="echo",
                          extra_vars={"ansible_connection": "local", "cb_out_dir": str(tmp_path),
                                      "cb_probe": touch(marker)})
    assert result.ok, result.failures
    assert json.loads((tmp_path / "cp1.json").read_text()) == {"probe": touch(marker), "user": "root"}
    assert not marker.exists()
    # The run's inventory is the tool's own, every string in it untemplated.
    written = (result.run_dir / "inventory.yml").read_text()
    assert "!unsafe" in written and str(inventory) not in written


def test_a_group_vars_file_no_group_of_the_inventory_reads_is_said_not_read(tmp_path: Path) -> None:
    """The run reads exactly what validation read: group_vars/workers.yml beside an inventory whose workers are in
    [worker] is read by neither, and the warning says so instead of letting it look in effect."""
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "workers.yml").write_text("ansible_user: ops\n")
    (tmp_path / "group_vars" / "worker.yml").write_text("gpu: false\n")
    path = tmp_path / "hosts.ini"
    path.write_text("[master]\ncp1 ansible_host=10.0.0.1\n[worker]\nw1 ansible_host=10.0.0.2\n")
    cluster = load_inventory(path)
    assert cluster.node("w1").user == "root" and cluster.node("w1").gpu == "false"
    (warning,) = cluster.warnings
    assert "workers.yml: not read: the inventory has no group 'workers'" in warning
    assert "a group bootstrap adds for its own plays" in warning
