"""`bootstrap init`: write a commented hosts.ini and cluster.yaml from a few flags, checked before they are
written, and never over files that exist."""
from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import replace
from datetime import date
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from provision.cli import invocation
from provision.cli.option_table import checked, options_of
from provision.errors import InputError

# The JSON Schema of cluster.yaml written beside it (`bootstrap config schema`), and the modeline that points the
# YAML language server (VS Code's YAML extension, Neovim's yamlls, ...) at it: editors complete and check the keys.
SCHEMA_NAME = "cluster.schema.json"
MODELINE = f"# yaml-language-server: $schema={SCHEMA_NAME}"

HELP = """Write a commented hosts.ini and cluster.yaml for your machines, ready for `bootstrap up`.

Both files are checked as `bootstrap config validate` would before they are written; an existing file is
never overwritten. Nothing is connected to.

\b
Example:
    bootstrap init --control-plane 10.0.0.10 --workers 10.0.0.11,10.0.0.12 --user ubuntu --key ~/.ssh/id_ed25519
    bootstrap init --control-plane 10.0.0.10 --profile cn       # a single-node cluster through China's mirrors
"""


OPTIONS = options_of("init")


class ProfileChoice(StrEnum):
    """settings.MirrorProfile's members (tests/test_cli_startup.py holds them equal), without importing the
    settings models for `--help`."""

    default = "default"
    cn = "cn"


class GpuChoice(StrEnum):
    auto = "auto"
    true = "true"
    false = "false"


def inventory_text(control_planes: list[str], workers: list[str], *, user: str, key: Path | None, port: int,
                   gpu: str) -> str:
    lines = [
        "# The machines of the cluster, for `bootstrap up --inventory hosts.ini` (written by `bootstrap init`).",
        "# A host's name becomes its hostname and Kubernetes node name; ansible_host is the address to reach it on.",
        "# gpu=auto: NVIDIA GPUs are looked for on PCI by preflight; gpu=true / gpu=false decide it for a host.",
        "",
        "[control_plane]",
        *(f"control-plane-{i} ansible_host={address}" for i, address in enumerate(control_planes, 1)),
        "",
        "# Workers: none makes a single-node cluster whose control plane also runs workloads.",
        "[workers]",
        *(f"worker-{i} ansible_host={address}" for i, address in enumerate(workers, 1)),
        "",
        "[all:vars]",
        f"ansible_user={user}",
        *([f"ansible_ssh_private_key_file={shlex.quote(str(key))}"] if key else
          ["# ansible_ssh_private_key_file=~/.ssh/id_ed25519   # without it: your SSH agent and default keys"]),
        *([f"ansible_port={port}"] if port != 22 else []),
        f"gpu={gpu}",
        "",
    ]
    return "\n".join(lines)


def settings_text(profile: str) -> str:
    import yaml

    from provision.inputs.settings import MirrorProfile, Settings

    defaults = Settings()
    chosen = {
        "kubernetes": {"version": defaults.kubernetes.version},
        "mirrors": {"profile": profile},
        "ssh": {"known_hosts_file": defaults.ssh.known_hosts_file,
                "accept_new_host_keys": defaults.ssh.accept_new_host_keys},
        "smoke_test": {"enabled": defaults.smoke_test.enabled},
    }
    header = (
        f"{MODELINE}\n"
        f"# Cluster settings (written by `bootstrap init` on {date.today().isoformat()}). Every key has a working\n"
        "# default: `bootstrap config show --config cluster.yaml` prints all of them with the package and image\n"
        "# sources they resolve to, and docs/settings.md explains each one.\n"
        "#\n"
        "# kubernetes.version: the minor (or minor.patch) to install; the default when this file was written.\n"
        f"# mirrors.profile: {' or '.join(MirrorProfile)} (cn: Aliyun, Tsinghua, USTC and DaoCloud mirrors for every source).\n"
        "# ssh: host keys are always checked against known_hosts_file; for machines seen for the first time, check\n"
        "#   their keys and run with --accept-new-host-keys once (or ssh-keyscan them into the file).\n"
        f"# {SCHEMA_NAME} beside this file is its JSON Schema (`bootstrap config schema`): editors with the YAML\n"
        "#   language server complete and check the keys through the first line.\n"
    )
    return header + yaml.safe_dump(chosen, sort_keys=False)


def write_new(path: Path, text: str) -> None:
    """Create `path` with `text`; never replaces a file that exists (even one made a moment ago)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def init_files(directory: Path, control_planes: list[str], workers: list[str], *, user: str, key: Path | None,
               port: int, gpu: str, profile: str) -> tuple[Path, Path]:
    from provision.cli.commands.config import settings_schema
    from provision.inputs.validation import load_cluster
    from provision.inputs.values import LOCAL_PATH, USER_NAME, creatable_directory_problem

    inventory, config, schema = directory / "hosts.ini", directory / "cluster.yaml", directory / SCHEMA_NAME
    for path in (inventory, config, schema):
        if path.exists() or path.is_symlink():
            raise InputError(f"{path} exists: `bootstrap init` never overwrites; move it away or pass --dir")
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory: pass an existing directory with --dir")
    problem = creatable_directory_problem(directory.absolute())
    if problem:
        raise InputError(f"--dir {problem}")
    problem = USER_NAME.problem(user)
    if problem:
        raise InputError(f"--user {problem}")
    if key is not None and LOCAL_PATH.problem(str(key)):
        raise InputError(f"--key {LOCAL_PATH.problem(str(key))}")
    if not control_planes:
        raise InputError("--control-plane is required: the address of the machine that runs the control plane")
    if key is not None:
        key = key.expanduser().absolute()
    texts = {inventory: inventory_text(control_planes, workers, user=user, key=key, port=port, gpu=gpu),
             config: settings_text(profile), schema: json.dumps(settings_schema(), indent=2) + "\n"}
    # Checked as `config validate` would, from scratch copies: a refused init leaves nothing behind.
    with tempfile.TemporaryDirectory(prefix="bootstrap-init-") as scratch:
        for path, text in texts.items():
            (Path(scratch) / path.name).write_text(text)
        try:
            load_cluster(Path(scratch) / inventory.name, Path(scratch) / config.name)
        except InputError as exc:
            raise InputError(str(exc).replace(f"{scratch}/", "")) from None
    for path, text in texts.items():
        try:
            write_new(path, text)
        except OSError as exc:
            raise InputError(f"{path} cannot be written ({exc.strerror}): pass another --dir") from None
    return inventory, config


def register(app: typer.Typer) -> None:
    @app.command("init", help=HELP)
    @checked("init")
    def init(
        control_plane: Annotated[list[Any] | None, OPTIONS.option(
            "--control-plane", help="Address (IP or DNS name) of the control-plane machine.",
            show_default=False)] = None,
        workers: Annotated[list[Any] | None, OPTIONS.option(
            "--workers", help="Worker addresses, separated by commas (repeatable).", show_default=False)] = None,
        user: Annotated[str, OPTIONS.option(
            "--user", help="SSH user on every machine (passwordless sudo, or use -K).")] = "root",
        key: Annotated[Path | None, OPTIONS.option("--key", help="SSH private key file.", show_default=False)] = None,
        port: Annotated[int, OPTIONS.option("--port", help="SSH port.")] = 22,
        gpu: Annotated[GpuChoice, OPTIONS.option("--gpu", help="auto, true or false for every machine.")] = GpuChoice.auto,
        profile: Annotated[ProfileChoice, OPTIONS.option(
            "--profile", help="Mirror profile (cn: Aliyun, Tsinghua, USTC, DaoCloud).")] = ProfileChoice.default,
        directory: Annotated[Path, OPTIONS.option("--dir", help="Where to write hosts.ini and cluster.yaml.")] = Path("."),
    ) -> None:
        # Each --workers (and --control-plane) is a list of addresses already (option_kinds.addresses).
        inventory, config = init_files(directory, [a for given in control_plane or [] for a in given],
                                       [a for given in workers or [] for a in given], user=user, key=key,
                                       port=port, gpu=gpu.value, profile=profile.value)
        from provision.cli.console import console

        console.print(f"wrote {inventory} and {config} (with {SCHEMA_NAME}, for editors); next:")
        # With the state directory this run was given: the commands as printed are the run that comes next.
        chosen = replace(invocation.given(), inventory=inventory, config=config)
        for command in ("bootstrap preflight", "bootstrap up"):
            console.print(f"  {invocation.complete(command, chosen)}", soft_wrap=True)
