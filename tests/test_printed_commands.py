"""Every command the tool prints for the user to run works as printed: it carries the inventory, settings, state
directory and connection choices this run was given, so running it is the same run (issue #25: the resume hint
after a failed `up` named --inventory only, and the re-run used other settings and another state directory).

Two ways: every `bootstrap ...` command in a message of the code, completed as the CLI completes it, parses as the
tool's own command line and means the inputs given; and the user's path itself, through `bootstrap`'s entry point:
a failed `up`, its hint run as printed; `init`'s next steps run as printed; a refusal's command run as printed.
"""
from __future__ import annotations

import ast
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from provision.cli import app as cli_app
from provision.cli import invocation
from provision.errors import BootstrapError
from provision.inputs.settings import load_settings
from provision.inputs.state import state_root
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.phases import UP_PHASES, engine
from provision.phases.engine import PhaseOutcome
from tests.support.paths import REPO_ROOT

COMMAND = re.compile(r"`(bootstrap(?: [^`\n]*)?)`")
# What the code fills into the commands it prints, by expression: a value of the kind it stands for.
PLACEHOLDERS = {"name": "n2", "addon.name": "volcano", "addon": "volcano", "provider.name": "preflight",
                "failed": "join", "node": "n2", "target": "n2", "len(before.machines) - 1": "2"}
# Usage lines in prose (alternatives, metavariables), not commands to run.
USAGE = re.compile(r"[|\[]|\.\.\.|\b[A-Z]{3,}\b")


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _text(node: ast.AST) -> str | None:
    """A string literal's text, an f-string's with each {expression} filled from PLACEHOLDERS."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                expression = ast.unparse(value.value)  # type: ignore[attr-defined]
                parts.append(PLACEHOLDERS.get(expression, f"{{{expression}}}"))
        return "".join(parts)
    return None


def printed_commands() -> dict[str, str]:
    """Every `bootstrap ...` command in a message of the package's code (docstrings left out) -> where."""
    found: dict[str, str] = {}
    for path in sorted((REPO_ROOT / "provision").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docs = _docstrings(tree)
        parts: list[tuple[int, str]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                for value in node.values:
                    docs.add(id(value))
            if id(node) in docs:
                continue
            text = _text(node)
            if text:
                parts.append((getattr(node, "lineno", 0), text))
        # Implicitly concatenated literals are one node each; a command split across them is joined here.
        for line, text in parts:
            for command in COMMAND.findall(text):
                if not USAGE.search(command) and "{" not in command:
                    found.setdefault(command, f"{path.relative_to(REPO_ROOT)}:{line}")
    return found


PLACEHOLDER_VALUES = {"PLATFORMS": "debian-12", "OUT": "/nonexistent/bundle", "INVENTORY": "site/hosts.ini"}
GIVEN = invocation.Given(state_dir=Path("/srv/cb state"), inventory=Path("site/hosts.ini"),
                         config=Path("site/cluster.yaml"), kubeconfig=Path("/srv/admin.conf"), ask_become_pass=True)


def parse(command: str) -> list[tuple[Any, dict[str, Any]]]:
    """`command` through the tool's own command line: each level's command and its parameters."""
    root = typer.main.get_command(cli_app.app)
    words = shlex.split(command)[1:]
    ctx = root.make_context("bootstrap", words)
    levels = [(root, ctx.params)]
    while hasattr(ctx.command, "commands") and ctx._protected_args + ctx.args:
        name, sub, rest = ctx.command.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        ctx = sub.make_context(name, rest, parent=ctx)
        levels.append((sub, ctx.params))
    return levels


def test_every_command_in_a_message_is_a_command_of_the_tool_and_means_the_inputs_given() -> None:
    commands = printed_commands()
    # The hints known to be there (the resume hint, fixes of checks, the API's refusals) are found by the sweep.
    for known in ("bootstrap up", "bootstrap up --from join", "bootstrap up --only control_plane", "bootstrap prepare",
                  "bootstrap doctor", "bootstrap preflight", "bootstrap reset n2", "bootstrap addons install volcano"):
        assert known in commands, sorted(commands)
    for command, where in commands.items():
        carried = invocation.complete(command, GIVEN)
        # A required option this run was not given is printed as a placeholder to fill (`--for PLATFORMS`): filled
        # as a user would, the command parses.
        levels = parse(" ".join(PLACEHOLDER_VALUES.get(word, word) for word in carried.split(" ")))
        assert levels[0][1]["state_dir"] == GIVEN.state_dir, (where, carried)
        leaf, params = levels[-1]
        assert len(levels) > 1, (where, command)
        # Options the command names itself are its own (a file's comment names the file beside it).
        named = {word.split("=")[0] for word in command.split() if word.startswith("-")}
        names = {p.name for p in leaf.params if not named & set(getattr(p, "opts", []))}
        if "inventory" in names:
            assert params["inventory"] == GIVEN.inventory, (where, carried)
        if "config" in names:
            assert params["config"] == GIVEN.config, (where, carried)
        if "ask_become_pass" in names:
            assert params["ask_become_pass"] is True, (where, carried)
        if "kubeconfig" in names:
            assert params["kubeconfig"] == GIVEN.kubeconfig, (where, carried)
        for phase in ("from_phase", "only"):
            if params.get(phase) is not None:
                assert params[phase] in UP_PHASES, (where, command)


def test_a_command_that_names_an_option_keeps_its_own() -> None:
    carried = invocation.complete("bootstrap up --inventory other.ini --from join", GIVEN)
    assert carried == ("bootstrap --state-dir '/srv/cb state' up --config site/cluster.yaml --ask-become-pass "
                       "--inventory other.ini --from join")
    assert invocation.carry("see `kubectl get events -A` and `bootstrap lab status`", GIVEN) == (
        "see `kubectl get events -A` and `bootstrap --state-dir '/srv/cb state' lab status`")


# --- the user's path: `bootstrap` itself, its output read and run as printed -------------------------------------

class Runs:
    """`bootstrap ARGS` through the entry point users run, with the phases' work faked: each phase records the
    inputs it ran with (inventory, settings, state directory) and the `failing` one fails as a real one would."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
        self.monkeypatch, self.capsys = monkeypatch, capsys
        self.ran: list[tuple[str, Path, Any, Path]] = []
        self.failing: str | None = None
        monkeypatch.setattr(engine, "_run_one", self._phase)

    def _phase(self, phase: Any, ctx: Any) -> PhaseOutcome:
        self.ran.append((phase.name, ctx.cluster.inventory_path.absolute(), ctx.settings, state_root()))
        if phase.name == self.failing:
            error = BootstrapError(f"{phase.name}: n2 did not join: see `journalctl -u kubelet` on n2, then "
                                   f"`bootstrap up --from {phase.name}`", nodes={"n2": "failed"})
            return PhaseOutcome(phase.name, "failed", 0.1, str(error), error, error.nodes)
        if phase.name == "preflight":
            ctx.state.gpus = {n.name: 0 for n in ctx.cluster.nodes}
        if phase.name == "control_plane":
            admin_kubeconfig_path(ctx.cluster).write_text("apiVersion: v1\nkind: Config\n")
        return PhaseOutcome(phase.name, "ok", 0.1, "done")

    def __call__(self, *args: str) -> tuple[int, str]:
        self.monkeypatch.setattr(sys, "argv", ["bootstrap", *args])
        with pytest.raises(SystemExit) as exited:
            cli_app.main()
        captured = self.capsys.readouterr()
        return int(exited.value.code or 0), captured.out + captured.err

    def printed(self, output: str) -> list[str]:
        return COMMAND.findall(" ".join(output.split()))


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's directory with an inventory and settings, and a state directory of their choosing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BOOTSTRAP_STATE_DIR")
    (tmp_path / "hosts.ini").write_text("[control_plane]\nn1 ansible_host=10.0.0.11\n[workers]\n"
                                        "n2 ansible_host=10.0.0.12\n")
    (tmp_path / "cluster.yaml").write_text("kubernetes:\n  pod_cidr: 10.48.0.0/16\nsmoke_test:\n  enabled: false\n")
    return tmp_path


def test_the_hint_after_a_failed_up_run_as_printed_resumes_the_same_run(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = Runs(monkeypatch, capsys)
    runs.failing = "join"
    state = site / "my state"
    code, output = runs("--state-dir", str(state), "up", "-i", "hosts.ini", "-c", "cluster.yaml")
    assert code == 1
    first = runs.ran[0]
    assert first[1:] == (site / "hosts.ini", load_settings(site / "cluster.yaml"), state)
    hints = runs.printed(output)
    resume = hints[0]
    assert resume == f"bootstrap --state-dir '{state}' up --inventory hosts.ini --config cluster.yaml"
    assert f"bootstrap --state-dir '{state}' up --inventory hosts.ini --config cluster.yaml --from join" in hints
    # The other command printed for the user, with the path quoted as the shell needs it (the state has a space).
    export = next(line for line in output.splitlines() if "export KUBECONFIG=" in line)
    assert shlex.split(export.split("#")[0])[1] == f"KUBECONFIG={state}/clusters/n1@10.0.0.11/admin.conf"
    for command in (resume, f"bootstrap --state-dir '{state}' up --inventory hosts.ini --config cluster.yaml "
                            "--from join"):
        runs.ran.clear()
        runs.failing = None
        code, output = runs(*shlex.split(command)[1:])
        assert code == 0, output
        # The same run: the same inputs, picked up at the phase that failed.
        assert runs.ran[0][0] == "join"
        assert runs.ran and all(ran[1:] == first[1:] for ran in runs.ran)


def test_inits_next_steps_run_as_printed_use_the_files_it_wrote_and_the_state_it_was_given(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    runs = Runs(monkeypatch, capsys)
    (site / "new").mkdir()
    state = site / "state"
    code, output = runs("--state-dir", str(state), "init", "--control-plane", "10.0.0.10", "--dir", "new")
    assert code == 0, output
    steps = [line.strip() for line in output.splitlines() if line.strip().startswith("bootstrap ")]
    assert steps == [f"bootstrap --state-dir {state} preflight --inventory new/hosts.ini --config new/cluster.yaml",
                     f"bootstrap --state-dir {state} up --inventory new/hosts.ini --config new/cluster.yaml"]
    seen = []
    monkeypatch.setattr("provision.nodes.preflight.run.run_preflight",
                        lambda cluster, settings, **_: seen.append((cluster.inventory_path.absolute(), settings,
                                                                    state_root())) or _empty_report())
    assert runs(*shlex.split(steps[0])[1:])[0] == 0
    code, output = runs(*shlex.split(steps[1])[1:])
    assert code == 0, output
    wrote = (site / "new" / "hosts.ini", load_settings(site / "new" / "cluster.yaml"), state)
    assert seen == [wrote]
    assert runs.ran and all(ran[1:] == wrote for ran in runs.ran)


def _empty_report() -> Any:
    from provision.nodes.preflight.run import PreflightReport

    return PreflightReport((), 0.1)


def test_a_refusals_command_run_as_printed_is_the_same_run(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`node add` before any cluster: its refusal names `bootstrap up`, which, run as printed, forms this cluster
    from these inputs, asking for the sudo password as the refused run would have."""
    runs = Runs(monkeypatch, capsys)
    monkeypatch.setattr("getpass.getpass", lambda prompt: "sudo-password")
    code, output = runs("--state-dir", "st", "node", "add", "n2", "-i", "hosts.ini", "-c", "cluster.yaml", "-K")
    assert code == 2
    [command] = runs.printed(output)
    assert command == (f"bootstrap --state-dir {site / 'st'} up --inventory hosts.ini --config cluster.yaml "
                       "--ask-become-pass")
    assert runs(*shlex.split(command)[1:])[0] == 0
    given = (site / "hosts.ini", load_settings(site / "cluster.yaml"), site / "st")
    assert runs.ran and all(ran[1:] == given for ran in runs.ran)


# --- issue 34.2: nothing printed for copying is wrapped, and every command printed runs ----------------------------

def accepted(command: str, inventory: Path) -> list[tuple[Any, dict[str, Any]]]:
    """`command` as the CLI parses it (a placeholder filled with a real file): each level accepted, nothing required
    missing."""
    filled = command.replace("INVENTORY", str(inventory))
    assert "INVENTORY" in command or filled == command
    levels = parse(filled)
    assert len(levels) > 1, command
    return levels


def lines_with_commands(output: str) -> list[str]:
    """Each line holding a backticked `bootstrap ...`: a command is never split over two lines."""
    found = []
    for line in output.splitlines():
        assert line.count("`") % 2 == 0, f"a backticked span broken over lines: {line!r}"
        if "`bootstrap" in line:
            found.append(line)
    return found


def test_smoke_tests_hint_names_what_up_needs_and_the_kubeconfig_it_wrote(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The hint was `bootstrap --state-dir S up --config C`: without --inventory, which `up` requires."""
    runs = Runs(monkeypatch, capsys)
    monkeypatch.setenv("HOME", str(site / "home"))
    monkeypatch.delenv("BOOTSTRAP_INVENTORY", raising=False)
    code, output = runs("--state-dir", "st", "smoke-test", "-c", "cluster.yaml")
    assert code == 1
    [command] = COMMAND.findall(" ".join(lines_with_commands(output)))
    assert command == f"bootstrap --state-dir {site / 'st'} up --config cluster.yaml --inventory INVENTORY"
    levels = accepted(command, site / "hosts.ini")
    assert levels[-1][1]["inventory"] == site / "hosts.ini" and levels[-1][1]["config"] == Path("cluster.yaml")
    # Once `up` formed the cluster (its admin kubeconfig here, not merged into ~/.kube/config): the hint names it,
    # and the command it prints merges it, run as printed.
    runs("--state-dir", "st", "up", "-i", "hosts.ini", "-c", "cluster.yaml")
    code, output = runs("--state-dir", "st", "smoke-test", "-c", "cluster.yaml")
    assert code == 1
    admin = site / "st" / "clusters" / "n1@10.0.0.11" / "admin.conf"
    assert f"pass --kubeconfig {admin}" in " ".join(output.split())
    [merge] = COMMAND.findall(" ".join(lines_with_commands(output)))
    assert merge == f"bootstrap --state-dir {site / 'st'} kubeconfig --merge"
    admin.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "clusters": [
        {"name": "k", "cluster": {"server": "https://10.0.0.11:6443"}}], "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    code, output = runs(*shlex.split(merge)[1:])
    assert code == 0, output
    assert yaml.safe_load((site / "home" / ".kube" / "config").read_text())["current-context"] == "bootstrap-n1"


def test_another_installers_inventory_warnings_are_one_line_each_without_a_terminal(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """They wrapped over 4-5 lines in a log; the bastion's says what to write, on one line, as written."""
    runs = Runs(monkeypatch, capsys)
    monkeypatch.setenv("COLUMNS", "50")
    (site / "kubespray.ini").write_text("[kube_control_plane]\nn1 ansible_host=10.0.0.11\n[kube_node]\n"
                                        "n2 ansible_host=10.0.0.12\n[bastion]\nn2\n"
                                        "[calico_rr]\nn1\n[k8s_cluster:children]\nkube_control_plane\nkube_node\n")
    code, output = runs("config", "validate", "-i", "kubespray.ini")
    assert code == 0, output
    warnings = [line for line in output.splitlines() if line.startswith("warning: ")]
    assert len(warnings) >= 2
    bastion = next(line for line in warnings if "[bastion]" in line)
    assert "ansible_ssh_common_args='-o ProxyJump=USER@BASTION' on them, and remove the group" in bastion
    # Each whole on its line: none continues on the next.
    assert all(line.endswith(("remove it", "remove the group")) for line in warnings), warnings


def test_the_doctors_fix_is_one_line_and_runs_as_printed(
        site: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The doctor hard-wrapped the command it suggests over three lines, even on a 100-column terminal."""
    from provision.diagnose.doctor import DoctorReport
    from provision.findings import Finding
    from provision.nodes.doctor.run import NodeDoctorReport

    runs = Runs(monkeypatch, capsys)
    monkeypatch.setenv("COLUMNS", "60")
    finding = Finding("kubelet", "n2", "fail", "the kubelet is not running (inactive, dead)",
                      "`journalctl -u kubelet -n 50` on n2 says why; once fixed, `bootstrap up --from join` joins it")
    report = DoctorReport((NodeDoctorReport("n1", "control_plane", "10.0.0.11", ()),
                           NodeDoctorReport("n2", "worker", "10.0.0.12", (finding,))), (), 0.5)
    monkeypatch.setattr("provision.diagnose.doctor.run_doctor", lambda *args, **kwargs: report)
    assert runs("--state-dir", "my state", "up", "-i", "hosts.ini", "-c", "cluster.yaml")[0] == 0
    code, output = runs("--state-dir", "my state", "doctor", "-i", "hosts.ini", "-c", "cluster.yaml")
    assert code == 1
    printed = COMMAND.findall(" ".join(lines_with_commands(output)))
    expected = f"bootstrap --state-dir '{site / 'my state'}' up --inventory hosts.ini --config cluster.yaml --from join"
    assert expected in printed and f"bootstrap --state-dir '{site / 'my state'}' doctor --inventory hosts.ini " \
        "--config cluster.yaml" in printed
    for command in printed:
        levels = accepted(command, site / "hosts.ini")
        assert levels[0][1]["state_dir"] == site / "my state"
    # Run as printed: the same inputs, resumed at join.
    runs.ran.clear()
    code, output = runs(*shlex.split(expected)[1:])
    assert code == 0, output
    assert runs.ran[0][0] == "join" and runs.ran[0][1] == site / "hosts.ini"


def test_a_hint_names_the_bootstrap_that_runs_in_a_new_shell(site: Path) -> None:
    """Issue 34: after `./dev.sh up` the hints said `bootstrap ...`, "command not found": the tool was only in
    .venv-modern/bin. Run by its path with that directory off PATH, the hints name the path; a new shell runs them."""
    import subprocess

    tool = Path(sys.executable).parent / "bootstrap"
    assert tool.exists()
    clean = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(site), "BOOTSTRAP_STATE_DIR": str(site / "state")}
    refused = subprocess.run([str(tool), "node", "add", "n2", "-i", "hosts.ini"], cwd=site, env=clean,
                             capture_output=True, text=True)
    assert refused.returncode == 2, refused.stderr
    [command] = re.findall(r"`([^`]*/bootstrap [^`]*)`", refused.stderr)
    assert command == f"{tool} up --inventory hosts.ini"
    again = subprocess.run(["bash", "-c", f"{command} --help"], cwd=site, env=clean, capture_output=True, text=True)
    assert again.returncode == 0 and "Form the cluster" in again.stdout, again.stderr
    # Where PATH finds that same program, the hint says `bootstrap`.
    on_path = clean | {"PATH": f"{tool.parent}:{clean['PATH']}"}
    refused = subprocess.run([str(tool), "node", "add", "n2", "-i", "hosts.ini"], cwd=site, env=on_path,
                             capture_output=True, text=True)
    assert COMMAND.findall(refused.stderr) == ["bootstrap up --inventory hosts.ini"]
