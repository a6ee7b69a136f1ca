"""Which of Ansible's own variables an inventory may set, and what becomes of each.

Ansible reads many variables that change how a node is reached, who runs on it and which program runs there or
here: the connection and its address, port and user; the ssh, scp and sftp executables and their extra arguments;
privilege escalation; the interpreters; the remote shell and its temporary folders; passwords. bootstrap's own
connections (preflight, over paramiko) and Ansible's must reach the same machine the same way, and nothing an
inventory says may run a program of its choosing. So each such variable is either understood (read here, checked
like every value, and written by the tool into the inventory each run hands Ansible: the user's inventory itself
is never given to Ansible) or refused in one line saying what to write instead.

A variable whose name starts with `ansible_` (or Mitogen's `mitogen_`) and is not understood is refused too: a new
Ansible may read it, and the run would not do what it asks. Variables of other names are the user's own, and
reach no run.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from provision.inputs.files import shown

# Read by bootstrap and written into each run's inventory from what it read (inventory.py: Node).
UNDERSTOOD = frozenset({
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user", "ansible_ssh_user",
    "ansible_ssh_private_key_file", "ansible_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args",
    "ansible_python_interpreter", "ansible_become", "ansible_become_user", "ansible_become_method",
    "ansible_connection", "ansible_host_key_checking", "ansible_ssh_host_key_checking", "ansible_ssh_args",
})
# What Ansible itself puts beside the inventory's variables when it resolves a host's (never from the user).
MAGIC = frozenset({
    "ansible_facts", "ansible_config_file", "ansible_version", "ansible_playbook_python", "ansible_check_mode",
    "ansible_diff_mode", "ansible_forks", "ansible_inventory_sources", "ansible_skip_tags", "ansible_run_tags",
    "ansible_verbosity", "ansible_limit", "ansible_role_names", "ansible_dependent_role_names",
    "ansible_play_role_names", "ansible_play_hosts", "ansible_play_hosts_all", "ansible_play_batch",
    "ansible_play_name", "ansible_search_path", "ansible_collection_name", "ansible_parent_role_names",
    "ansible_parent_role_paths", "ansible_loop_var", "ansible_index_var", "ansible_local",
})
PASSWORD_FIX = ("bootstrap logs in with keys, and sudo's password is asked for by --ask-become-pass: remove it (a "
                "password in an inventory is read by anyone who can read the file)")
# Refused variables (a name, or a prefix ending in '_') -> what to write instead.
REFUSED: dict[str, str] = {
    "ansible_password": PASSWORD_FIX, "ansible_ssh_pass": PASSWORD_FIX, "ansible_ssh_password": PASSWORD_FIX,
    "ansible_become_password": PASSWORD_FIX, "ansible_become_pass": PASSWORD_FIX,
    "ansible_ssh_private_key_passphrase": "load the key into ssh-agent instead; remove it",
    "ansible_ssh_private_key": "name the key's file in ansible_ssh_private_key_file instead; remove it",
    "ansible_private_key": "name the key's file in ansible_ssh_private_key_file instead; remove it",
    "ansible_private_key_passphrase": "load the key into ssh-agent instead; remove it",
    "ansible_sshpass_prompt": PASSWORD_FIX, "ansible_ssh_password_mechanism": PASSWORD_FIX,
    "ansible_ssh_executable": "bootstrap runs the ssh on this machine's PATH; remove it",
    "ansible_scp_executable": "bootstrap runs the ssh on this machine's PATH; remove it",
    "ansible_sftp_executable": "bootstrap runs the ssh on this machine's PATH; remove it",
    "ansible_scp_extra_args": "put ssh options in ansible_ssh_common_args (the ones bootstrap reads); remove it",
    "ansible_sftp_extra_args": "put ssh options in ansible_ssh_common_args (the ones bootstrap reads); remove it",
    "ansible_ssh_transfer_method": "bootstrap chooses how files travel; remove it",
    "ansible_scp_if_ssh": "bootstrap chooses how files travel; remove it",
    "ansible_sftp_batch_mode": "bootstrap chooses how files travel; remove it",
    "ansible_control_path": "bootstrap sets ssh's connection sharing itself; remove it",
    "ansible_control_path_dir": "bootstrap sets ssh's connection sharing itself; remove it",
    "ansible_ssh_pipelining": "bootstrap runs with pipelining on; remove it",
    "ansible_pipelining": "bootstrap runs with pipelining on; remove it",
    "ansible_ssh_timeout": "set ssh.connect_timeout_s in cluster.yaml instead; remove it",
    "ansible_timeout": "set ssh.connect_timeout_s in cluster.yaml instead; remove it",
    "ansible_ssh_retries": "bootstrap retries what may be retried itself; remove it",
    "ansible_ssh_use_tty": "remove it", "ansible_ssh_verbosity": "pass --verbose instead; remove it",
    "ansible_ssh_pkcs11_provider": "load the key into ssh-agent instead; remove it",
    "ansible_become_exe": "bootstrap becomes root with the node's own sudo; remove it",
    "ansible_become_flags": "bootstrap becomes root with the node's own sudo; remove it",
    "ansible_sudo_": "bootstrap becomes root with the node's own sudo; remove it",
    "ansible_su_": "bootstrap becomes root with sudo; remove it",
    "ansible_shell_type": "bootstrap runs the node's own POSIX shell; remove it",
    "ansible_shell_executable": "bootstrap runs the node's own /bin/sh; remove it",
    "ansible_remote_tmp": "bootstrap uses Ansible's default temporary folder on the nodes; remove it",
    "ansible_system_tmpdirs": "bootstrap uses Ansible's default temporary folders on the nodes; remove it",
    "ansible_async_dir": "bootstrap uses Ansible's default folders on the nodes; remove it",
    "ansible_admin_users": "remove it", "ansible_common_remote_group": "remove it",
    "ansible_keep_remote_files": "remove it", "ansible_module_compression": "remove it",
    "ansible_shell_allow_world_readable_temp": "remove it",
    "mitogen_": "bootstrap configures Mitogen itself (ansible.executor in cluster.yaml); remove it",
}


def _hint(name: str) -> str | None:
    if name in REFUSED:
        return REFUSED[name]
    prefix = next((p for p in REFUSED if p.endswith("_") and name.startswith(p)), None)
    if prefix:
        return REFUSED[prefix]
    if name.startswith("ansible_") and name.endswith("_interpreter"):
        return "only ansible_python_interpreter is read (the modules bootstrap runs are Python); remove it"
    return None


def variable_problem(variables: Mapping[str, Any]) -> str | None:
    """The first Ansible variable of a host that bootstrap neither understands nor lets pass, as the end of a
    line naming the host; None when every one is understood or the user's own."""
    for name in sorted(variables):
        if name in UNDERSTOOD or name in MAGIC or name.startswith("ansible_play"):
            continue
        hint = _hint(name)
        if hint is None and not name.startswith(("ansible_", "mitogen_")):
            continue
        if hint is None:
            hint = ("it is one of Ansible's own variables, which bootstrap does not read: the run would not do what "
                    "it says; remove it")
        value = variables[name]
        secret = "pass" in name or name.endswith("_private_key")
        shown_value = "(hidden)" if secret else shown(value)
        return f"{name}={shown_value} is not supported: {hint}"
    return None
