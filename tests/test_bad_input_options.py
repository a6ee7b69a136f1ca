"""Every command, a bad value of each of its options: exit 2, one line naming the option, nothing on stdout, and
nothing created: no state directory, nothing in a fresh HOME (no ~/.ansible), nothing in the working folder, no
output folder or file. The bad values are chosen by the option's kind in the one table of options
(provision/cli/option_table.py), so an option added there is swept here without a line of this file changing.

The unit passes run in an empty network namespace (dev.sh), so a command that got past its checks would meet
"network unreachable" rather than a machine; none gets that far.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from provision.cli import option_table as table
from tests.support.refusal import run_main

GOOD_INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\n"

# Bad values by kind; {HOME}, {FILE}, {FULL}, {TAR} and {MISSING} are filled in per case (see Site.fill).
SPELLING = ["bad\nline", "$HOME/x", "~/a/~/b", "x*", "~nosuchuser-cb/x", "a" * 300 + "/x"]
BAD: dict[str, list[str]] = {
    table.INPUT_FILE.name: SPELLING,
    table.INPUT_DIRECTORY.name: [*SPELLING[:3], "{MISSING}", "{FILE}"],
    table.OUTPUT_DIRECTORY.name: [*SPELLING[:3], "/etc", "/", "{HOME}", "{FULL}", "{FILE}", "/proc/cb"],
    table.STORE_DIRECTORY.name: [*SPELLING[:3], "/etc/cb", "/usr", "{FILE}", "/proc/cb", "{HOME}"],
    table.NEW_FILE.name: [*SPELLING[:3], "{FILE}", "/etc/cb.tar.gz", "{MISSING}/x.tar.gz"],
    table.WORKING_DIRECTORY.name: [*SPELLING[:3], "{MISSING}", "{FILE}", "/etc"],
    table.DIRECTORY_PATH.name: [*SPELLING[:3], "{FILE}"],
    table.STATE_DIRECTORY.name: [*SPELLING[:3], "{FILE}/x", "/proc/cb"],
    table.BUNDLE_OUTPUT.name: [*SPELLING[:3], "{FULL}", "/etc/bundle", "{HOME}", "{TAR}", "{FILE}"],
    table.SAVE_DIRECTORY.name: [*SPELLING[:3], "{FULL}", "/etc/results", "{FILE}"],
    table.SNAPSHOT.name: ["$HOME/x.db", "bad\nline", "snap`id`.db"],
    table.PORT.name: ["0", "65536", "+22", "２２", "22\n", "0x16"],
    table.KUBERNETES_VERSION.name: ["1.36\n", "1.x", "latest", "１.36"],
    table.HOST_ADDRESS.name: ["10.0.0.300", "0.0.0.0", "a b"],
    table.BIND_ADDRESS.name: ["10.0.0.300", "0.0.0.0", "lab.example.com", "127.0.0.1\n"],
    table.FINGERPRINT.name: ["abc", "Z" * 40, "A" * 40 + "\n"],
    table.IMAGE_REFERENCE.name: ["busybox", "busybox:latest", "docker.io/X:1", "x:1 y"],
    table.IPV4_NETWORK.name: ["10.0.0.1/24", "10.0.0.0/33", "10.0.0.0"],
    table.USER_NAME.name: ["root\n", "a b", "$(id)"],
    table.NODE_NAME.name: ["a b", "w1\n", "{{x}}", "-w1x"],
    table.NODE_NAMES.name: ["cp1,cp1", "cp1 x", "cp1,,w1"],
    table.ADDRESSES.name: ["10.0.0.300", "10.0.0.1,,10.0.0.2", "[::1]", "a b"],
    table.PLATFORMS.name: ["windows-11", "centos-7", ",", "Debian 12"],
    table.ADDON_NAMES.name: ["kubeflow", "volcano,nope"],
    table.ADDON_NAME.name: ["volcan", "VOLCANO"],
    table.PHASE.name: ["netwrk", ""],
    table.CONTEXT_NAME.name: ["a b", "$(id)", "x\n"],
    table.BOX.name: ["nobox", "a/b c"],
    table.LAB_OS.name: ["windows-11"],
    table.LAB_MACHINE.name: ["cp1", "lab-X"],
    table.PROVIDER.name: ["vmware"],
    table.LIBVIRT_DRIVER.name: ["xen"],
    table.CHOICE.name: ["nope"],
}
NUMBER_BAD = ["+2", " 2", "2_0", "2.0", "٢", "0x10", "-1", "", "1e3"]

# What each command needs besides the option under test (positional arguments in order, then options).
# INVENTORY: a good inventory; EXISTING: an existing empty folder; NEW: a folder that does not exist yet.
BASE: dict[str, tuple[list[str], dict[str, str]]] = {
    "bootstrap": ([], {}),
    "init": ([], {"--control-plane": "10.0.0.10", "--dir": "EXISTING"}),
    "config show": ([], {}),
    "config validate": ([], {"--inventory": "INVENTORY"}),
    "lab up": ([], {}),
    "lab down": ([], {}),
    "lab status": ([], {}),
    "lab ssh": (["lab-control-plane"], {}),
    "smoke-test": ([], {}),
    "bundle build": ([], {"--for": "debian-12", "--out": "NEW"}),
    "bundle verify": (["EXISTING"], {}),
    "bundle serve": (["EXISTING"], {}),
    "node add": (["w1"], {"--inventory": "INVENTORY"}),
    "node remove": (["w1"], {"--inventory": "INVENTORY"}),
    "node replace": (["cp1"], {"--inventory": "INVENTORY"}),
    "addons install": (["volcano"], {"--inventory": "INVENTORY"}),
    "addons remove": (["volcano"], {"--inventory": "INVENTORY"}),
    "etcd restore": (["snap.db"], {"--inventory": "INVENTORY"}),
    "reset": ([], {"--inventory": "INVENTORY"}),
    "completion": (["bash"], {}),
}
# Commands whose options are the node options alone take a good inventory too.
NODE = ([], {"--inventory": "INVENTORY"})


@dataclass
class Site:
    """A fresh place per case: HOME, the working folder, the state directory, and the files the bad values name."""

    root: Path

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def state(self) -> Path:
        return self.root / "state" / "not-yet"

    def fill(self, value: str) -> str:
        return (value.replace("{HOME}", str(self.home)).replace("{FILE}", str(self.root / "a-file"))
                .replace("{FULL}", str(self.root / "full")).replace("{TAR}", str(self.root / "old.tar"))
                .replace("{MISSING}", str(self.root / "missing")).replace("INVENTORY", str(self.root / "hosts.ini"))
                .replace("EXISTING", str(self.root / "existing")).replace("NEW", str(self.root / "new")))

    def snapshot(self) -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(self.root)): (p.stat().st_mode, p.stat().st_size)
                for p in sorted(self.root.rglob("*"))}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    place = Site(tmp_path)
    for folder in (place.home, place.work, tmp_path / "existing", tmp_path / "full"):
        folder.mkdir()
    (tmp_path / "full" / "notes.txt").write_text("the user's own\n")
    (tmp_path / "a-file").write_text("a file\n")
    (tmp_path / "old.tar").write_text("not ours\n")
    (tmp_path / "hosts.ini").write_text(GOOD_INVENTORY)
    monkeypatch.chdir(place.work)
    monkeypatch.setenv("HOME", str(place.home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    yield place


def _kind_bad(kind: table.Kind) -> list[str]:
    if kind.function == "whole_number":
        arguments = dict(kind.arguments)
        return [*NUMBER_BAD, str(arguments["low"] - 1), str(arguments["high"] + 1)]
    return BAD[kind.name]


def _cases() -> list[tuple[str, str, str]]:
    cases = []
    for command, described in table.COMMANDS.items():
        for option, kind in described.options.items():
            if kind is table.FLAG:
                continue
            cases += [(command, option, bad) for bad in _kind_bad(kind)]
    return cases


CASES = _cases()


def test_every_kind_has_bad_values_and_the_sweep_is_large() -> None:
    kinds = {kind.name for c in table.COMMANDS.values() for kind in c.options.values()} - {table.FLAG.name}
    assert {k for k in kinds if not k.startswith("whole number")} <= set(BAD)
    assert len(CASES) > 300


def _arguments(command: str, option: str, value: str, site: Site) -> list[str]:
    positional, options = BASE.get(command, NODE if "--inventory" in table.COMMANDS[command].options else ([], {}))
    positional, options = list(positional), dict(options)
    names = [name for name in table.COMMANDS[command].options if name.isupper()]
    if option.isupper():
        index = names.index(option)
        positional = positional + [""] * (index + 1 - len(positional))
        positional[index] = value
    else:
        options[option] = value
    words = [site.fill(word) for word in positional]
    flags = [part for name, given in options.items() for part in (name, given if given == value else site.fill(given))]
    if command == "bootstrap":
        return [*flags, "config", "show"]
    return [*command.split(), *flags, "--", *words] if words and any(w.startswith("-") for w in words) else \
        [*command.split(), *flags, *words]


@pytest.mark.parametrize(("command", "option", "bad"), CASES, ids=[f"{c}:{o}:{b!r}" for c, o, b in CASES])
def test_a_bad_option_value_is_one_line_exit_2_and_creates_nothing(site: Site, command: str, option: str,
                                                                    bad: str) -> None:
    before = site.snapshot()
    value = site.fill(bad)
    outcome = run_main("--state-dir", str(site.state), *_arguments(command, option, value, site))
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code == 2, outcome
    assert len(outcome.lines) == 1, outcome.lines
    line = outcome.lines[0]
    assert line.startswith("error: "), line
    named = [option] if not option.isupper() else []
    assert all(name in line for name in named) or "Missing" in line or "requires an argument" in line, line
    assert outcome.stdout == ""
    # Nothing created, nothing changed: the state directory, HOME (no ~/.ansible), the working folder, the
    # folders and files the values named.
    assert not site.state.exists() and not site.state.parent.exists()
    assert site.snapshot() == before
    assert not os.listdir(site.home) and not os.listdir(site.work)


RULES = [(command, rule) for command, described in table.COMMANDS.items() for rule in described.rules]
# A value for each option a rule names (flags take none).
RULE_VALUES = {"--gpus": "1", "--timeout": "600", "--nodes": "1", "--workload": "job", "--scheduler": "default",
               "--save": "NEW", "--print-manifests": "job", "--output": "json", "--only": "gpu", "--from": "prepare",
               "--context": "mine"}


@pytest.mark.parametrize(("command", "rule"), RULES, ids=[f"{c}:{r.option}+{r.other}" for c, r in RULES])
def test_each_refused_combination_is_one_line_exit_2_and_creates_nothing(site: Site, command: str,
                                                                         rule: table.Excludes | table.Requires) -> None:
    before = site.snapshot()
    given = [rule.option, rule.other] if isinstance(rule, table.Excludes) else [rule.option]
    kinds = table.COMMANDS[command].options
    words = [part for name in given
             for part in ([name] if kinds[name] is table.FLAG else [name, site.fill(RULE_VALUES[name])])]
    positional, options = BASE.get(command, NODE if "--inventory" in kinds else ([], {}))
    base = [part for name, value in options.items() for part in (name, site.fill(value))]
    outcome = run_main("--state-dir", str(site.state), *command.split(), *base, *words,
                       *[site.fill(p) for p in positional])
    assert outcome.code == 2 and len(outcome.lines) == 1, outcome
    assert rule.option in outcome.lines[0] and rule.other in outcome.lines[0], outcome.lines
    assert not site.state.parent.exists() and site.snapshot() == before
    assert not os.listdir(site.home) and not os.listdir(site.work)
