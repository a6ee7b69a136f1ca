"""A command line that answers at once (issue 34): `bootstrap --help`, every `bootstrap COMMAND --help` and a
shell-completion TAB import none of the heavy modules (the kubernetes client, paramiko, Ansible, pydantic and the
settings models, Jinja), each command's module is imported only when it is used, and what the command table says
without importing them (each command's summary, a few defaults) is held equal to the commands themselves.
Timings live in bench/cli_startup.py; these tests hold the imports that make them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import get_args

import typer.main
from typer import _click as click

from provision.cli import app as cli_app
from provision.cli.app import COMMANDS, load_commands
from provision.inputs import state
from provision.inputs.platforms import supported_text
from provision.inputs.workflows import UP_PHASES

# Modules a `--help` or a TAB must not import: each costs a tenth of a second or more.
HEAVY = ("kubernetes", "paramiko", "fabric", "invoke", "ansible", "ansible_runner", "pydantic", "jinja2", "yaml",
         "cryptography", "provision.phases", "provision.nodes", "provision.kube", "provision.smoke.driver",
         "provision.inputs.settings", "provision.inputs.inventory", "provision.inputs.values",
         "provision.diagnose", "provision.bundle.build", "provision.lab.vagrant", "typer._adapters")

# Runs each command line (argv after `bootstrap`, and an environment) in this one process, as the shell would run
# `bootstrap`, then prints the heavy modules that were imported, as JSON.
PROBE = """
import contextlib, io, json, os, sys
from provision.cli.app import main
heavy = tuple(sys.argv[1].split(","))
for line in json.loads(sys.argv[2]):
    sys.argv = ["bootstrap", *line["argv"]]
    os.environ.update(line["env"])
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main()
        except SystemExit:
            pass
    for key in line["env"]:
        os.environ.pop(key)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m.startswith(heavy))))
"""


def probe(lines: list[dict[str, object]]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BOOTSTRAP_", "_BOOTSTRAP"))}
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), json.dumps(lines)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout.splitlines()[-1]))


def help_paths() -> list[list[str]]:
    """`--help` of the tool, of every command and of every subcommand of a group."""
    paths = [["--help"]]
    for name, entry in COMMANDS.items():
        command = load_commands(entry.module)[name]
        paths.append([name, "--help"])
        for sub in (getattr(command, "commands", None) or {}):
            paths.append([name, sub, "--help"])
    return paths


def test_every_help_answers_without_the_heavy_modules() -> None:
    paths = help_paths()
    assert ["etcd", "restore", "--help"] in paths and ["config", "schema", "--help"] in paths and len(paths) > 40
    assert probe([{"argv": path, "env": {}} for path in paths]) == []


def complete(words: str, cword: int, cwd: Path | None = None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOOTSTRAP_")}
    env |= {"_BOOTSTRAP_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    done = subprocess.run([sys.executable, "-m", "provision"], env=env, capture_output=True, text=True, cwd=cwd,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_tab_offers_commands_phases_addons_and_the_inventorys_node_names(tmp_path: Path) -> None:
    (tmp_path / "hosts.ini").write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\n"
                                        "10.0.0.2 k8s_nodename=gpu-1\nw2 ansible_host=10.0.0.3  # spare\n"
                                        "[all:vars]\nansible_user=ubuntu\n")
    (tmp_path / "hosts.yml").write_text("all:\n  children:\n    control_plane:\n      hosts:\n        m1: {ansible_host: "
                                        "10.0.0.1}\n    workers:\n      hosts:\n        m2:\n")
    assert complete("bootstrap ku", 1) == ["kubeconfig"]
    assert complete("bootstrap up --from ", 3) == list(UP_PHASES)
    assert complete("bootstrap up --only ver", 3) == ["verify"]
    assert complete("bootstrap addons install v", 3) == ["volcano"]
    assert complete("bootstrap node remove -i hosts.ini ", 5, tmp_path) == ["cp1", "gpu-1", "w2"]
    assert complete("bootstrap reset --inventory hosts.yml m", 4, tmp_path) == ["m1", "m2"]
    assert complete("bootstrap prepare -i hosts.ini --limit g", 5, tmp_path) == ["gpu-1"]
    # An inventory that cannot be read offers nothing, and says nothing.
    assert complete("bootstrap node add -i missing.ini ", 5, tmp_path) == []


def test_a_tab_answers_without_the_heavy_modules(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[control_plane]\ncp1 ansible_host=10.0.0.1\n")
    tab = {"_BOOTSTRAP_COMPLETE": "complete_bash"}
    assert probe([{"argv": [], "env": tab | {"COMP_WORDS": words, "COMP_CWORD": str(len(words.split()))}}
                  for words in ("bootstrap up --from ", f"bootstrap node remove -i {inventory} ",
                                "bootstrap addons install ", f"bootstrap up -i {inventory} -c x.yaml --",
                                "bootstrap etcd restore --survivors ")]) == []


def test_the_command_table_says_what_each_command_says() -> None:
    root = typer.main.get_command(cli_app.app)
    context = click.Context(root)
    for name, entry in COMMANDS.items():
        command = load_commands(entry.module)[name]
        assert root.get_command(context, name) is not None
        assert command.get_short_help_str(limit=500) == click.utils.make_default_short_help(entry.summary, 500), name
    # Every module's commands are in the table (none registered that `bootstrap --help` would not list).
    for module in cli_app.COMMAND_MODULES:
        assert set(load_commands(module)) <= set(COMMANDS), module


def test_facts_named_for_the_help_are_the_librarys() -> None:
    from provision.bundle import serve
    from provision.cli.commands import init, support_bundle
    from provision.diagnose.bundle import MIB, Limits
    from provision.inputs.settings import MirrorProfile
    from provision.smoke import manifests

    assert cli_app.STATE_DIR_ENV == state.STATE_DIR_ENV
    assert [p.value for p in init.ProfileChoice] == [p.value for p in MirrorProfile]
    assert (Limits().file_bytes // 1024, Limits().total_bytes // MIB) == \
        (support_bundle.DEFAULT_FILE_KIB, support_bundle.DEFAULT_TOTAL_MIB)
    assert (serve.HTTP_PORT, serve.REGISTRY_PORT) == (8080, 5000)
    assert get_args(manifests.Workload) == ("job", "pytorchjob", "trainjob")


def test_preflight_help_names_every_supported_platform_of_the_table() -> None:
    """Issue 34's docs: `preflight --help` listed EL9, Ubuntu and Debian; the table has 15 platforms."""
    command = load_commands("preflight")["preflight"]
    text = " ".join((command.help or "").split())
    assert f"a supported OS ({supported_text()})" in text
    for name in ("Rocky Linux 8/9/10", "Anolis OS 8", "Alibaba Cloud Linux 3", "openEuler 22.03/24.03",
                 "Ubuntu 22.04/24.04"):
        assert name in text
