"""Hostile inputs and the promise checked for each: refused in one line, or accepted and carried as data.

Shared by the sweep (tests/test_hostile_inputs.py: every string setting and inventory variable against a fixed list
of payloads) and the property tests (the same checks on generated values). A payload that would run a command
touches a marker file; every check ends by asserting the marker was never made.

What "carried as data" means here: every rendered artefact the tool produces from the inputs parses (the
playbooks' variables and each run's inventory through Ansible's own loader and templar, the manifests as YAML, the
settings as `config show` prints them), and the value comes back exactly as written wherever it appears.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from provision.errors import InputError
from provision.inputs.inventory import Cluster, load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.nodes.runner import run_inventory
from provision.render.ansible_data import unsafe_yaml
from provision.render.kubeadm_config import render_init_config
from provision.render.manifests import api_proxy, calico_source, device_plugin_manifest, kube_vip_manifest
from provision.render.playbook_vars import playbook_vars, prepare_vars
from provision.smoke.manifests import render
from provision.smoke.spec import build_spec
from tests.support.node_reports import installed_release

INVENTORY = "[control_plane]\ncp1 ansible_host=10.0.0.1\n[workers]\nw1 ansible_host=10.0.0.2\nw2 ansible_host=10.0.0.3\n"


def payloads(marker: Path) -> list[str]:
    """Template expressions, shell substitutions, quotes, YAML's ': ' and '#', newlines, NUL, non-ASCII digits,
    paths that climb or name the system's folders, numbers written oddly."""
    return [
        f"{{{{ lookup('pipe', 'touch {marker}') }}}}",
        f"{{% set x = lookup('pipe', 'touch {marker}') %}}",
        f"$(touch {marker})", f"`touch {marker}`", f"; touch {marker}", f"' && touch {marker} #",
        "it's", 'say "hi"', "a: b", "a #b", "line\nanother: line", "trailing\n", "nul\x00byte", "tab\there",
        "１２３", "١٢٣", "\u2028", "/./etc", "//usr", "/var/lib", "../../etc/passwd", "/", "", " ", "x" * 300,
        "-1", "1e999", "nan", "0x1F", "[1, 2]", "{a: 1}", "*alias", "&anchor", "!!python/object:os.system",
    ]


def variants(valid: str, payload: str) -> list[str]:
    """The payload alone, and after a valid value (where a check reads a prefix only, the tail is what slips by)."""
    return [payload, valid + payload] if valid else [payload]


def leaves(document: Any) -> Iterator[str]:
    """Every string (keys and values) of a parsed document."""
    stack = [document]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            yield value
        elif isinstance(value, Mapping):
            stack += [*value.keys(), *value.values()]
        elif isinstance(value, (list, tuple)):
            stack += list(value)


def assert_literal(documents: list[Any], value: str) -> None:
    """Where the value shows at all, it shows whole: never cut, joined into other text, or evaluated."""
    core = value.strip()
    if len(core) < 4:
        return
    for leaf in (leaf for document in documents for leaf in leaves(document)):
        if core in leaf:
            assert value in leaf, (value, leaf)


def _through_ansible(text: str) -> Any:
    """`text` (what the tool writes for Ansible) as Ansible reads it, every string then templated as a task would."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    loaded = DataLoader().load(text)
    return Templar(loader=DataLoader(), variables={"value": loaded}).template(trust_as_template("{{ value }}"))


def _plain(document: Any) -> Any:
    return json.loads(json.dumps(document))


_RENDERED: dict[tuple[str, tuple[Any, ...]], list[Any]] = {}


def rendered(cluster: Cluster, settings: Settings, run_dir: Path) -> list[Any]:
    """Everything the tool renders from these inputs, each parsed back (Ansible's loader for what Ansible reads);
    inputs already seen (a variable the tool does not read changes nothing) are not rendered again."""
    key = (settings.model_dump_json(), cluster.nodes)
    if key not in _RENDERED:
        _RENDERED[key] = _rendered(cluster, settings, run_dir)
    return _RENDERED[key]


def _rendered(cluster: Cluster, settings: Settings, run_dir: Path) -> list[Any]:
    variables = playbook_vars(cluster, settings) | prepare_vars(cluster, {n.name: 1 for n in cluster.nodes})
    assert _through_ansible(unsafe_yaml(variables)) == _plain(variables)
    inventory = run_inventory(cluster, run_dir, settings).read_text()
    written = _through_ansible(inventory)
    assert written == _plain(yaml.load(inventory, Loader=_UnsafeAsText))
    documents: list[Any] = [variables, written]
    documents += [yaml.safe_load(text) for text in calico_source(settings).kustomization.values()]
    documents += list(yaml.safe_load_all(device_plugin_manifest(settings)))
    documents += list(yaml.safe_load_all(render_init_config(cluster, settings, installed_release(settings))))
    documents.append(yaml.safe_load(api_proxy(cluster, settings).manifest))
    if settings.control_plane.vip is not None:
        documents.append(yaml.safe_load(kube_vip_manifest(settings, interface=settings.control_plane.interface or
                                                          "eth0")))
    # Every knob of the smoke test's objects reached: the cache (its path, the archive's URL and md5), kept results,
    # and a gang of several pods in the Volcano queue; the trainer's source, which is no input, kept small.
    spec = replace(build_spec(settings, "gpu", namespace="cb-smoke-x"), trainer_files={"train.py": "print()"},
                   dataset="cifar10", cache="hostpath", keep_results=True)
    documents += render(spec)
    documents += render(replace(spec, nodes=2, workload="trainjob", scheduler="volcano", cache="pvc"))
    shown = yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False)
    assert yaml.safe_load(shown) == settings.model_dump(mode="json")
    return documents


class _UnsafeAsText(yaml.SafeLoader):
    """Reads the tool's !unsafe strings as the strings they are (PyYAML, not Ansible)."""


_UnsafeAsText.add_constructor("!unsafe", lambda loader, node: loader.construct_mapping(node, deep=True))  # type: ignore[arg-type]


def one_line(error: InputError, source: str) -> None:
    text = str(error)
    assert "\n" not in text and "\r" not in text and "Traceback" not in text, text
    assert text.startswith(source), text


def check_settings(data: dict[str, Any], cluster: Cluster, run_dir: Path, marker: Path, value: object) -> str:
    """One settings document: refused in one line naming cluster.yaml, or accepted and rendered as data."""
    try:
        settings = parse_settings(data, "cluster.yaml")
    except InputError as exc:
        one_line(exc, "cluster.yaml: ")
        return "refused"
    if isinstance(value, float):
        assert math.isfinite(value), data
    documents = rendered(cluster, settings, run_dir)
    if isinstance(value, str):
        assert_literal(documents, value)
    assert not marker.exists()
    return "accepted"


def check_inventory(path: Path, run_dir: Path, marker: Path, value: object) -> str:
    """One inventory: refused in one line naming the file, or accepted and handed to Ansible as data."""
    try:
        cluster = load_inventory(path)
    except InputError as exc:
        one_line(exc, str(path))
        return "refused"
    documents = rendered(cluster, Settings(), run_dir)
    if isinstance(value, str):
        assert_literal(documents, value)
    assert not marker.exists()
    return "accepted"
