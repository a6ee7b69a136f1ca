"""Every command's options, described once: what each value is (its kind), and which combinations are refused.

A command's Typer signature reads its options from here (`CommandOptions.option`, `.argument`), so each value is
parsed by its kind's function while Click reads the command line: a path, a number, a name or a version that is
wrong is refused in one line, exit 2, before the command's body runs, so before any file is read or written and
any node is reached. `checked(COMMAND)` then refuses the combinations the table names (`Excludes`, `Requires`), in
one line too, before the body. tests/test_option_table.py holds the table and the command tree equal: every
command described, every option of it here and nowhere else.

To add an option: a row in its command's `options`, and `OPTIONS.option("--name", help=...)` in the signature; a
new kind: a `Kind` whose parser is imported when the option is first given. Nothing heavy is imported here:
`bootstrap --help` reads this module.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, TypeVar

# --- kinds ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """What an option's value is: a name for people and tests, and its parser (module, function, arguments),
    imported on first use."""

    name: str
    module: str = ""
    function: str = ""
    arguments: tuple[tuple[str, Any], ...] = ()

    def parse(self, value: str) -> Any:
        """The value parsed; ValueError with one line (Click reports it with the option's name, exit 2)."""
        if isinstance(value, PurePath):  # a default written as a Path
            value = str(value)
        if not self.module:
            return value
        found = getattr(importlib.import_module(self.module), self.function)
        return found(value, **dict(self.arguments))


def _kind(name: str, module: str, function: str, **arguments: Any) -> Kind:
    return Kind(name, module, function, tuple(sorted(arguments.items())))


def number(low: int, high: int, unit: str = "") -> Kind:
    return _kind(f"whole number {low}..{high}", "provision.cli.option_kinds", "whole_number", low=low, high=high,
                 unit=unit)


_PATHS = "provision.inputs.local_paths"
_SHAPES = "provision.inputs.shapes"
_KINDS = "provision.cli.option_kinds"

FLAG = Kind("flag")
CHOICE = Kind("choice")  # an Enum or Literal: Click's own choice, refused with the choices listed
INPUT_FILE = _kind("input file", _PATHS, "input_file")
INPUT_DIRECTORY = _kind("input folder", _PATHS, "input_directory")
OUTPUT_DIRECTORY = _kind("output folder", _PATHS, "output_directory")
STORE_DIRECTORY = _kind("store folder", _PATHS, "store_directory")
NEW_FILE = _kind("new file", _PATHS, "new_file")
WORKING_DIRECTORY = _kind("working folder", _PATHS, "working_directory")
DIRECTORY_PATH = _kind("folder", _PATHS, "directory_path")
STATE_DIRECTORY = _kind("state folder", _KINDS, "state_directory")
BUNDLE_OUTPUT = _kind("bundle output", _KINDS, "bundle_output")
SAVE_DIRECTORY = _kind("save folder", _KINDS, "save_directory")
SNAPSHOT = _kind("snapshot", _KINDS, "snapshot")
S3_URL = _kind("s3:// URL", _SHAPES, "parse_s3_url")
PORT = _kind("port", _SHAPES, "parse_port")
KUBERNETES_VERSION = _kind("Kubernetes version", _SHAPES, "parse_kubernetes_version")
HOST_ADDRESS = _kind("address", _SHAPES, "parse_host_address")
BIND_ADDRESS = _kind("bind address", _KINDS, "bind_address")
FINGERPRINT = _kind("fingerprint", _SHAPES, "parse_fingerprint")
IMAGE_REFERENCE = _kind("image", _SHAPES, "parse_image_reference")
IPV4_NETWORK = _kind("IPv4 range", _SHAPES, "parse_ipv4_network")
USER_NAME = _kind("user name", _SHAPES, "parse_user_name")
NODE_NAME = _kind("node name", _KINDS, "node_name")
NODE_NAMES = _kind("node names", _KINDS, "node_names")
ADDRESSES = _kind("addresses", _KINDS, "addresses")
PLATFORMS = _kind("platforms", _KINDS, "platforms")
ADDON_NAMES = _kind("add-on names", _KINDS, "addon_names")
ADDON_NAME = _kind("add-on name", _KINDS, "addon_name")
PHASE = _kind("phase", _KINDS, "phase")
CONTEXT_NAME = _kind("context name", _KINDS, "context_name")
BOX = _kind("Vagrant box", _KINDS, "box")
LAB_OS = _kind("lab OS", _KINDS, "lab_os")
LAB_MACHINE = _kind("lab machine", _KINDS, "lab_machine")
PROVIDER = _kind("provider", _KINDS, "one_of", choices=("libvirt", "virtualbox"))
LIBVIRT_DRIVER = _kind("libvirt driver", _KINDS, "one_of", choices=("kvm", "qemu"))
MERGE_TARGET = _kind("kubeconfig to merge into", _KINDS, "merge_target")

# --- combinations ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Excludes:
    """`option` and `other` given together are refused: one contradicts the other, or makes it meaningless."""

    option: str
    other: str
    why: str

    def problem(self, given: set[str]) -> str | None:
        if self.option in given and self.other in given:
            return f"{self.option} and {self.other} exclude each other: {self.why}"
        return None


@dataclass(frozen=True)
class Requires:
    """`option` means something only with `other`."""

    option: str
    other: str
    why: str

    def problem(self, given: set[str]) -> str | None:
        if self.option in given and self.other not in given:
            return f"{self.option} needs {self.other}: {self.why}"
        return None


@dataclass(frozen=True)
class CommandOptions:
    """One command's options (the first name of each, or an argument's upper-case name) and its rules."""

    command: str
    options: Mapping[str, Kind]
    rules: tuple[Excludes | Requires, ...] = ()
    # The options this table's rows handed to Typer (tests: every row used once).
    used: set[str] = field(default_factory=set, compare=False, repr=False)

    def option(self, *names: str, **settings: Any) -> Any:
        """typer.Option for the row of `names[0]`, parsed by its kind."""
        import typer

        self.used.add(names[0])
        return typer.Option(names[0], *names[1:], **self._parser(names[0]), **settings)

    def argument(self, name: str, **settings: Any) -> Any:
        """typer.Argument for the row `name` (the parameter's name in upper case), parsed by its kind."""
        import typer

        self.used.add(name)
        return typer.Argument(**self._parser(name), **settings)

    def _parser(self, name: str) -> dict[str, Any]:
        kind = self.options[name]
        return {} if kind in (FLAG, CHOICE) or not kind.module else {"parser": kind.parse}


# --- the table -------------------------------------------------------------------------------------------------------

NODE_OPTIONS: dict[str, Kind] = {"--inventory": INPUT_FILE, "--config": INPUT_FILE, "--verbose": FLAG,
                                 "--accept-new-host-keys": FLAG, "--ask-become-pass": FLAG}
OUTPUT = {"--output": CHOICE}
YES = {"--yes": FLAG}


def _command(name: str, options: Mapping[str, Kind], *rules: Excludes | Requires, node: bool = False) -> CommandOptions:
    return CommandOptions(name, {**options, **(NODE_OPTIONS if node else {})}, rules)


SMOKE_PIPELINE_IGNORES = ("--gpus", "--nodes", "--keep", "--timeout", "--workload", "--scheduler", "--save")
SMOKE_PRINT_IGNORES = ("--keep", "--save", "--serve", "--pipeline", "--output")

COMMANDS: dict[str, CommandOptions] = {c.command: c for c in (
    _command("bootstrap", {"--state-dir": STATE_DIRECTORY, "--version": FLAG}),
    _command("init", {"--control-plane": ADDRESSES, "--workers": ADDRESSES, "--user": USER_NAME, "--key": INPUT_FILE,
                      "--port": PORT, "--gpu": CHOICE, "--profile": CHOICE, "--dir": WORKING_DIRECTORY}),
    _command("config show", {"--config": INPUT_FILE, **OUTPUT}),
    _command("config validate", {"--inventory": INPUT_FILE, "--config": INPUT_FILE, **OUTPUT}),
    _command("config check-sources", OUTPUT, node=True),
    _command("config schema", {"--out": NEW_FILE}),
    _command("status", {"--inventory": INPUT_FILE, "--config": INPUT_FILE, **OUTPUT}),
    _command("kubeconfig", {"--inventory": INPUT_FILE, "--merge": FLAG, "--into": MERGE_TARGET,
                            "--context": CONTEXT_NAME, "--path": FLAG},
             Excludes("--path", "--merge", "--path prints where the kubeconfig is, --merge writes it elsewhere"),
             Requires("--context", "--merge", "--context names the context --merge writes"),
             Requires("--into", "--merge", "--into names the file --merge writes")),
    _command("lab up", {"--workers": number(0, 32, "workers"), "--cpus": number(1, 256, "CPUs"),
                        "--memory": number(512, 4 * 1024 * 1024, "MiB"), "--os": LAB_OS, "--box": BOX,
                        "--provider": PROVIDER, "--libvirt-driver": LIBVIRT_DRIVER, "--network": IPV4_NETWORK,
                        "--config": INPUT_FILE, "--machines-only": FLAG, "--verbose": FLAG},
             Excludes("--machines-only", "--verbose", "--verbose shows Ansible's output, and with --machines-only "
                      "Ansible does not run")),
    _command("lab down", YES),
    _command("lab status", {}),
    _command("lab ssh", {"NAME": LAB_MACHINE}),
    _command("preflight", OUTPUT, node=True),
    _command("prepare", {"--limit": NODE_NAME}, node=True),
    _command("smoke-test", {
        "--kubeconfig": INPUT_FILE, "--config": INPUT_FILE, "--gpus": number(1, 64, "GPUs per node"),
        "--nodes": number(1, 5000, "nodes"), "--cpu": FLAG, "--keep": FLAG, "--image": IMAGE_REFERENCE,
        "--epochs": number(1, 1000, "epochs"), "--timeout": number(60, 7 * 24 * 3600, "seconds"),
        "--workload": CHOICE, "--scheduler": CHOICE, "--save": SAVE_DIRECTORY, "--serve": FLAG, "--pipeline": FLAG,
        "--print-manifests": CHOICE, "--output": CHOICE},
        Excludes("--cpu", "--gpus", "--gpus counts GPUs per node, and --cpu trains without GPUs"),
        *(Excludes("--pipeline", option, f"the pipeline runs its own steps and does not read {option}")
          for option in SMOKE_PIPELINE_IGNORES),
        *(Excludes("--print-manifests", option, f"--print-manifests prints the objects and exits, so {option} would "
                   "do nothing") for option in SMOKE_PRINT_IGNORES)),
    _command("up", {"--from": PHASE, "--only": PHASE, "--merge-kubeconfig": FLAG, "--context": CONTEXT_NAME,
                    "--dry-run": FLAG, **OUTPUT},
             Excludes("--only", "--from", "--only runs one phase, --from every phase from one on; give one of them"),
             Excludes("--dry-run", "--merge-kubeconfig", "a dry run forms no cluster whose kubeconfig could be merged"),
             Requires("--context", "--merge-kubeconfig", "--context names the context --merge-kubeconfig writes: "
                      "add --merge-kubeconfig, or leave --context out"),
             node=True),
    _command("reset", {"NAMES": NODE_NAME, **YES, **OUTPUT}, node=True),
    _command("down", {**YES, **OUTPUT}, node=True),
    _command("bundle build", {"--for": PLATFORMS, "--out": BUNDLE_OUTPUT, "--gpu": FLAG, "--addons": ADDON_NAMES,
                              "--kubernetes": KUBERNETES_VERSION, "--key": STORE_DIRECTORY, "--cache": STORE_DIRECTORY,
                              "--config": INPUT_FILE}),
    _command("bundle verify", {"DIRECTORY": INPUT_DIRECTORY, "--key": INPUT_FILE, "--fingerprint": FINGERPRINT,
                               **OUTPUT}),
    _command("bundle serve", {"DIRECTORY": INPUT_DIRECTORY, "--address": BIND_ADDRESS, "--http-port": PORT,
                              "--registry-port": PORT, "--fingerprint": FINGERPRINT}),
    _command("node add", {"NAME": NODE_NAME, **OUTPUT}, node=True),
    _command("node remove", {"NAME": NODE_NAME, **YES, **OUTPUT}, node=True),
    _command("node replace", {"NAME": NODE_NAME, **YES, **OUTPUT}, node=True),
    _command("addons list", {"--inventory": INPUT_FILE, "--config": INPUT_FILE, **OUTPUT}),
    _command("addons install", {"NAMES": ADDON_NAME, **OUTPUT}, node=True),
    _command("addons remove", {"NAMES": ADDON_NAME, **YES, **OUTPUT}, node=True),
    _command("etcd snapshot", {"--dir": STORE_DIRECTORY, **OUTPUT}, node=True),
    _command("etcd snapshots", {"--dir": DIRECTORY_PATH, **OUTPUT}, node=True),
    _command("etcd restore", {"SNAPSHOT": SNAPSHOT, "--from": S3_URL, "--survivors": NODE_NAMES, **YES, **OUTPUT},
             Excludes("SNAPSHOT", "--from", "name the snapshot or --from s3://..., one of the two"), node=True),
    _command("etcd defrag", OUTPUT, node=True),
    _command("upgrade", {"--to": KUBERNETES_VERSION, "--step": FLAG, "--parallel": number(1, 100, "workers"),
                         "--dry-run": FLAG, "--skip-etcd-snapshot": FLAG, **YES, **OUTPUT},
             Excludes("--dry-run", "--yes", "--yes answers the question asked before the upgrade changes anything, "
                      "and --dry-run changes nothing"),
             node=True),
    _command("certs check", OUTPUT, node=True),
    _command("certs renew", {**YES, **OUTPUT}, node=True),
    _command("doctor", {**OUTPUT, "--probe-dns": FLAG}, node=True),
    _command("support-bundle", {"--out": NEW_FILE, "--max-file-kib": number(16, 1024 * 1024, "KiB"),
                                "--max-total-mib": number(1, 64 * 1024, "MiB")}, node=True),
    _command("completion", {"SHELL": CHOICE}),
)}


def options_of(command: str) -> CommandOptions:
    return COMMANDS[command]


# --- checking the combinations ---------------------------------------------------------------------------------------

F = TypeVar("F", bound=Callable[..., Any])


def given_on_command_line(names: Mapping[str, str]) -> set[str]:
    """The options (by first name) typed on this command line: a default, or a value from the environment, is
    not the user's choice of a combination. `names`: parameter name -> option name."""
    from typer._click.core import ParameterSource
    from typer._click.globals import get_current_context

    ctx = get_current_context(silent=True)
    if ctx is None:
        return set()
    return {option for parameter, option in names.items()
            if ctx.get_parameter_source(parameter) is ParameterSource.COMMANDLINE}


def rule_problem(command: str, given: set[str]) -> str | None:
    """The first combination of `given` options the table refuses for `command`, as one line; None if none."""
    return next((p for p in (rule.problem(given) for rule in COMMANDS[command].rules) if p), None)


def checked(command: str) -> Callable[[F], F]:
    """The command's body runs only once the combinations of options it was given pass the table's rules; a refused
    one is a usage error (one line, exit 2). Stacked above @node_options, it sees every option."""
    table = COMMANDS[command]

    def decorate(function: F) -> F:
        # Resolved in the command's own module (Typer reads the wrapper's, which lives here).
        hints = typing.get_type_hints(function, include_extras=True)
        signature = inspect.signature(function)
        signature = signature.replace(parameters=[p.replace(annotation=hints.get(p.name, p.annotation))
                                                  for p in signature.parameters.values()])
        names = {name: _option_name(parameter) for name, parameter in signature.parameters.items()}

        @functools.wraps(function)
        def wrapper(**kwargs: Any) -> Any:
            problem = rule_problem(command, given_on_command_line({k: v for k, v in names.items() if v}))
            if problem:
                from typer._click.exceptions import UsageError
                from typer._click.globals import get_current_context

                raise UsageError(problem, ctx=get_current_context(silent=True))
            return function(**kwargs)

        del wrapper.__wrapped__
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        wrapper.__annotations__ = {name: p.annotation for name, p in signature.parameters.items()} | {
            "return": hints.get("return")}
        wrapper.__option_table__ = table.command  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate


def _option_name(parameter: inspect.Parameter) -> str:
    """The first long name of a parameter's option, from its Annotated typer.Option (where Typer reads a first
    name written in place of the default), an argument's name in upper case, or the parameter's own name."""
    for extra in getattr(parameter.annotation, "__metadata__", ()):
        if type(extra).__name__ == "ArgumentInfo":
            return parameter.name.upper()
        default = getattr(extra, "default", None)
        names = [*([default] if isinstance(default, str) and default.startswith("-") else []),
                 *getattr(extra, "param_decls", ())]
        long = [name for name in names if name.startswith("--")]
        if long:
            return str(long[0])
    return "--" + parameter.name.replace("_", "-")
