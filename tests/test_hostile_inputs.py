"""Every string setting and every inventory variable the tool reads, against hostile values: template expressions,
shell substitutions, quotes, ': ', '#', newlines, NUL, non-ASCII digits, odd paths and numbers. Each is refused
in one line naming the file, or accepted and then rendered as data: the playbooks' variables and each run's
inventory through Ansible's own loader and templar, the manifests and kubeadm's configuration as YAML, the
settings as `config show` prints them; the value comes back exactly as written, and no command runs.

The sweep walks a fixed list of payloads over every field; the property tests (hypothesis) generate values, and
run the real command line on some of them (exit 2, one line, no traceback, nothing created in the state folder
or HOME). Their budget is bounded (max_examples) so the whole file stays well under a minute.
"""
from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings
from tests.support.hostile import INVENTORY, check_inventory, check_settings, payloads, variants
from tests.support.refusal import run_main

# --- what there is to sweep -----------------------------------------------------------------------------------

SCHEMA = Settings.model_json_schema()


def _accepts(schema: dict[str, Any], kind: str) -> bool:
    if "$ref" in schema:
        schema = SCHEMA["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema.get("type") == kind or any(_accepts(option, kind) for option in schema.get("anyOf", []))


def string_fields() -> Iterator[tuple[str, str, str]]:
    """(section, field, shape): every setting a string reaches, as a scalar, a mapping's key or value, or a list's
    item ('scalar', 'key', 'value', 'item')."""
    for section, reference in SCHEMA["properties"].items():
        model = SCHEMA["$defs"][reference["$ref"].rsplit("/", 1)[-1]]
        for name, schema in model["properties"].items():
            if _accepts(schema, "string") or "enum" in schema or "$ref" in schema:
                yield section, name, "scalar"
            extra = schema.get("additionalProperties")
            if isinstance(extra, dict):
                yield section, name, "key"
                yield section, name, "value" if _accepts(extra, "string") else "item"
            elif _accepts(schema, "array"):
                yield section, name, "item"


FIELDS = list(string_fields())
DEFAULTS = Settings().model_dump(mode="json")


def document(section: str, name: str, shape: str, value: object) -> dict[str, Any]:
    default = DEFAULTS[section][name]
    if shape == "scalar":
        field: object = value
    elif shape == "key":
        sample = next(iter(default.values())) if isinstance(default, dict) and default else "1"
        field = {value: sample}
    elif shape == "value":
        field = {"vendor.example/device" if "resource" in name else "A100" if "floor" in name else "NCCL_DEBUG": value}
    elif isinstance(default, dict):
        field = {"docker.io": [value]}
    else:
        field = [value]
    return {section: {name: field}}


def valid_text(section: str, name: str) -> str:
    default = DEFAULTS[section][name]
    return default if isinstance(default, str) else ""


# Settings a later check reads against another section: left out of the sweep's pairs, they are in the properties.
CROSS = {("control_plane", "interface"), ("control_plane", "vip")}

INVENTORY_VARIABLES = [
    "ansible_host", "ansible_ssh_host", "ansible_port", "ansible_user", "ansible_ssh_user",
    "ansible_ssh_private_key_file", "ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_python_interpreter",
    "ansible_become", "ansible_become_user", "node_ip", "ip", "access_ip", "k8s_nodename", "kube_override_hostname",
    "gpu", "ansible_connection", "my_own_variable", "CLUSTER_CIDR", "kube_version",
]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def test_every_field_the_sweep_covers_is_a_real_setting() -> None:
    assert len({(s, n) for s, n, _ in FIELDS}) >= 40
    assert ("smoke_test", "env", "value") in FIELDS and ("mirrors", "github_raw", "scalar") in FIELDS
    assert ("container_runtime", "registry_mirrors", "item") in FIELDS


@pytest.mark.parametrize(("section", "name", "shape"), FIELDS, ids=[f"{s}.{n}.{k}" for s, n, k in FIELDS])
def test_every_string_setting_refuses_or_carries_each_hostile_value(tmp_path: Path, home: Path, section: str,
                                                                   name: str, shape: str) -> None:
    marker = tmp_path / "ran"
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    cluster = load_inventory(inventory)
    outcomes = set()
    for payload in payloads(marker):
        for value in variants(valid_text(section, name) if shape == "scalar" else "", payload):
            data = document(section, name, shape, value)
            if (section, name) in CROSS:
                data["control_plane"] = {"vip": "10.0.0.100", "endpoint": "vip"} | data["control_plane"]
            run_dir = tmp_path / "run"
            run_dir.mkdir(exist_ok=True)
            outcomes.add(check_settings(data, cluster, run_dir, marker, value))
    assert "refused" in outcomes
    assert sorted(home.rglob("*")) == []


@pytest.mark.parametrize("variable", INVENTORY_VARIABLES)
def test_every_inventory_variable_refuses_or_carries_each_hostile_value(tmp_path: Path, home: Path,
                                                                        variable: str) -> None:
    marker = tmp_path / "ran"
    for index, payload in enumerate(payloads(marker)):
        for position, value in enumerate(variants("10.0.0.9" if variable in ("node_ip", "ip") else "", payload)):
            path = tmp_path / f"hosts-{index}-{position}.yml"
            path.write_text(yaml.safe_dump({"all": {"children": {
                "control_plane": {"hosts": {"cp1": {"ansible_host": "10.0.0.1"}}},
                "workers": {"hosts": {"w1": {"ansible_host": "10.0.0.2", variable: value}}}}}}))
            run_dir = tmp_path / "run"
            run_dir.mkdir(exist_ok=True)
            check_inventory(path, run_dir, marker, value)
    assert sorted(home.rglob("*")) == []


def test_a_hostile_host_name_is_refused_or_carried(tmp_path: Path, home: Path) -> None:
    marker = tmp_path / "ran"
    for index, payload in enumerate(payloads(marker)):
        path = tmp_path / f"hosts-{index}.yml"
        path.write_text(yaml.safe_dump({"all": {"children": {
            "control_plane": {"hosts": {"cp1": {"ansible_host": "10.0.0.1"}}},
            "workers": {"hosts": {payload or "w": {"ansible_host": "10.0.0.2"}}}}}}))
        run_dir = tmp_path / "run"
        run_dir.mkdir(exist_ok=True)
        check_inventory(path, run_dir, marker, payload)


# --- properties: generated values -------------------------------------------------------------------------------

PIECES = st.sampled_from(["{{", "}}", "{%", "%}", "$(", "`", "'", '"', ": ", " #", "\n", "\x00", "\\", "/", "..",
                          "lookup('pipe', 'id')", "٣", "１", "\u2028", "*", "&", "!", "-", "=", "@", ":", ","])
HOSTILE_TEXT = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=6).map("".join)
NUMBERS = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(2**70), max_value=2**70),
                    st.booleans())
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True,
                             suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@PROPERTY_SETTINGS
@given(field=st.sampled_from(FIELDS), text=HOSTILE_TEXT, prefixed=st.booleans())
def test_generated_strings_in_any_setting_are_refused_or_carried(tmp_path_factory: pytest.TempPathFactory,
                                                                 field: tuple[str, str, str], text: str,
                                                                 prefixed: bool) -> None:
    tmp_path = tmp_path_factory.mktemp("property")
    section, name, shape = field
    value = (valid_text(section, name) + text) if prefixed and shape == "scalar" else text
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_settings(document(section, name, shape, value), load_inventory(inventory), run_dir, tmp_path / "ran", value)


NUMBER_FIELDS = [(s, n) for s, n, k in FIELDS if k == "scalar"] + [
    (section, name) for section, reference in SCHEMA["properties"].items()
    for name, schema in SCHEMA["$defs"][reference["$ref"].rsplit("/", 1)[-1]]["properties"].items()
    if _accepts(schema, "number") or _accepts(schema, "integer")]


@PROPERTY_SETTINGS
@given(field=st.sampled_from(NUMBER_FIELDS), number=NUMBERS)
def test_generated_numbers_in_any_setting_are_refused_or_finite(tmp_path_factory: pytest.TempPathFactory,
                                                                field: tuple[str, str], number: object) -> None:
    tmp_path = tmp_path_factory.mktemp("property")
    inventory = tmp_path / "hosts.ini"
    inventory.write_text(INVENTORY)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    section, name = field
    outcome = check_settings({section: {name: number}}, load_inventory(inventory), run_dir, tmp_path / "ran", number)
    if outcome == "accepted" and isinstance(number, float):
        assert math.isfinite(number)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(variable=st.sampled_from(INVENTORY_VARIABLES), value=st.one_of(HOSTILE_TEXT, NUMBERS),
       where=st.sampled_from(["settings", "inventory"]), setting=st.sampled_from(FIELDS))
def test_the_command_line_refuses_in_one_line_and_creates_nothing(tmp_path_factory: pytest.TempPathFactory,
                                                                  variable: str, value: object, where: str,
                                                                  setting: tuple[str, str, str]) -> None:
    """The whole promise through `bootstrap config validate`: exit 0, or exit 2 with one line and no traceback;
    nothing in the state folder or HOME either way."""
    tmp_path = tmp_path_factory.mktemp("cli")
    state, home = tmp_path / "state", tmp_path / "home"
    home.mkdir()
    hosts = {"ansible_host": "10.0.0.2"} | ({variable: value} if where == "inventory" else {})
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {
        "control_plane": {"hosts": {"cp1": {"ansible_host": "10.0.0.1"}}}, "workers": {"hosts": {"w1": hosts}}}}}))
    config = tmp_path / "cluster.yaml"
    section, name, shape = setting
    config.write_text(yaml.safe_dump(document(section, name, shape, value) if where == "settings" else {}))
    saved = os.environ.get("HOME")
    os.environ["HOME"] = str(home)
    try:
        outcome = run_main("--state-dir", str(state), "config", "validate", "-i", str(inventory), "-c", str(config))
    finally:
        os.environ["HOME"] = saved or ""
    assert "Traceback" not in outcome.stderr, outcome.stderr
    assert outcome.code in (0, 2), outcome
    if outcome.code == 2:
        assert len(outcome.lines) == 1 and outcome.lines[0].startswith("error: "), outcome.lines
        assert outcome.stdout == ""
    assert not state.exists() and sorted(home.rglob("*")) == []
