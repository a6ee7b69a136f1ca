"""An inventory's own SSH route (ansible_ssh_common_args: a known_hosts file, a bastion) is read once and given
to both sides: bootstrap's own connections and Ansible's. For Ansible the bastion becomes a ProxyCommand that
checks the bastion's host key against the same known_hosts file (OpenSSH's ProxyJump would start the jump
without our options, checking it against ~/.ssh/known_hosts or not at all)."""
from __future__ import annotations

import shlex
from pathlib import Path

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, SshSettings
from provision.inputs.ssh_options import Jump, parse_ssh_arguments
from provision.nodes.runner import ssh_args
from provision.nodes.ssh import ansible_ssh_common_args, known_hosts_for
from tests.support.keys import write_private_key


def test_known_hosts_and_bastion_are_read_and_other_options_passed_on(tmp_path: Path) -> None:
    options = parse_ssh_arguments("-o UserKnownHostsFile=keys/known -o ProxyJump=ops@bastion.example.com:2222 "
                                  "-o ServerAliveCountMax=5 -C", "ansible_ssh_common_args", "here", tmp_path)
    assert options.known_hosts_file == tmp_path / "keys" / "known"
    assert options.jump == Jump(host="bastion.example.com", user="ops", port=2222)
    assert options.passed == ("-o", "ServerAliveCountMax=5", "-C")
    assert parse_ssh_arguments("-J 10.0.0.9", "v", "here", tmp_path).jump == Jump(host="10.0.0.9")


def _node(tmp_path: Path, common_args: str):
    key = write_private_key(tmp_path / "id_ops")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(f"[control_plane]\ncp1 ansible_host=10.0.0.1 ansible_user=ops "
                         f"ansible_ssh_private_key_file={key} ansible_ssh_common_args='{common_args}'\n")
    return load_inventory(inventory).control_plane, key


def test_ansible_gets_a_proxy_command_that_checks_the_bastions_host_key(tmp_path: Path) -> None:
    node, key = _node(tmp_path, "-o ProxyJump=jump@10.0.0.9 -o UserKnownHostsFile=/srv/known_hosts -o Compression=yes")
    words = shlex.split(ansible_ssh_common_args(node, SshSettings()))
    assert words[:2] == ["-o", "UserKnownHostsFile=/srv/known_hosts"]
    proxy = shlex.split(words[3].removeprefix("ProxyCommand="))
    assert words[2] == "-o" and proxy[:3] == ["ssh", "-W", "%h:%p"]
    assert "StrictHostKeyChecking=yes" in proxy and "UserKnownHostsFile=/srv/known_hosts" in proxy
    assert proxy[-1] == "jump@10.0.0.9" and proxy[proxy.index("-i") + 1] == str(key)
    assert words[4:] == ["-o", "Compression=yes"]
    accepting = shlex.split(ansible_ssh_common_args(node, SshSettings(accept_new_host_keys=True)))
    assert "StrictHostKeyChecking=accept-new" in accepting[3]


def test_without_a_route_of_its_own_a_node_uses_the_settings_known_hosts(tmp_path: Path) -> None:
    node, _key = _node(tmp_path, "")
    settings = SshSettings(known_hosts_file=str(tmp_path / "kh"))
    assert known_hosts_for(node, settings) == tmp_path / "kh"
    assert shlex.split(ansible_ssh_common_args(node, settings)) == ["-o", f"UserKnownHostsFile={tmp_path / 'kh'}"]
    # Per host, so the global options leave it out (the first UserKnownHostsFile on ssh's command line wins).
    assert "UserKnownHostsFile" not in ssh_args(Settings()) and "StrictHostKeyChecking=yes" in ssh_args(Settings())
