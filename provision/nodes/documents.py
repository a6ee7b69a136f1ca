"""The one reader of what roles report to Python: a document under a key of its own (cb_report, cb_etcd,
cb_kube_versions, cb_certs, cb_package_lock, ... or a fact a role sets for Python, as reset's reset_left_alone),
found in a task's result whatever the task was called, and validated as the pydantic model of that document.

`result_document` finds it in one result (a live event, as the tally reads the package lock's wait);
`module_documents` in a playbook run's saved events (ansible-runner's job_events: each host's last); `validated` reads one as its
model, refusing a document of another shape as a whole with one line (the playbooks and the Python package from
different releases); `sent` and `read_documents` do both for a run. Python never scrapes a task's text.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from provision.errors import BootstrapError
from provision.inputs.inventory import Node

Model = TypeVar("Model", bound=BaseModel)


class PlaybookRun(Protocol):
    """What read_documents needs of a run (runner.PlaybookResult; the runner's tally reads documents too, so this
    module does not import it)."""

    @property
    def phase(self) -> str: ...

    @property
    def run_dir(self) -> Path: ...

    def raise_for_failure(self) -> None: ...


def result_document(result: Mapping[str, Any], key: str) -> Any | None:
    """A task result's document under `key`: what a module returned under it, or the fact of that name a set_fact
    set (ansible_facts); None when the result carries neither."""
    if key in result:
        return result[key]
    facts = result.get("ansible_facts")
    return facts.get(key) if isinstance(facts, Mapping) else None


def module_documents(run_dir: Path, key: str) -> dict[str, Any]:
    """Each host's last document under `key` in a playbook run's saved events (ansible-runner's job_events, in the
    order they were written)."""
    found: dict[str, tuple[int, Any]] = {}
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") != "runner_on_ok":
            continue
        document = result_document(data.get("res") or {}, key)
        if document is None:
            continue
        counter = int(event.get("counter", 0))
        host = data["host"]
        if host not in found or found[host][0] < counter:
            found[host] = (counter, document)
    return {host: document for host, (_, document) in found.items()}


def validated(model: type[Model], document: Any, *, phase: str, who: str, what: str) -> Model:
    """`document` read as `model`; a document of another shape raises one BootstrapError line naming the phase,
    the node and `what` it reports."""
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the document"
        raise BootstrapError(f"{phase}: {who} sent a report of {what} that this version of cluster-bootstrap cannot "
                             f"read ({where}: {first['msg']}); the playbooks and the Python package must come from "
                             "the same release") from None


def parsed(model: type[Model], document: Any) -> Model | None:
    """`document` read as `model`, or None where it has another shape (for what only informs, as a live view)."""
    try:
        return model.model_validate(document)
    except ValidationError:
        return None


def sent(run_dir: Path, key: str, model: type[Model], *, phase: str, what: str) -> dict[str, Model]:
    """Host -> its last document under `key` in the run, validated as `model` (hosts that sent none are absent)."""
    return {host: validated(model, document, phase=phase, who=host, what=what)
            for host, document in module_documents(run_dir, key).items()}


def read_documents(playbook: PlaybookRun, nodes: Iterable[Node], key: str, model: type[Model],
                   what: str) -> dict[str, Model]:
    """Node name -> the document its node sent under `key`, validated as `model` (`what` it reports, for the
    messages). Raises BootstrapError for the run's failed nodes, and for a node that sent none, or one this version
    cannot read."""
    playbook.raise_for_failure()
    found = module_documents(playbook.run_dir, key)
    read: dict[str, Model] = {}
    for node in nodes:
        document = found.get(node.host)
        if document is None:
            raise BootstrapError(f"{playbook.phase}: {node.name} sent no report of {what} "
                                 f"(full log: {playbook.run_dir / 'run.log'})")
        read[node.name] = validated(model, document, phase=playbook.phase, who=node.name, what=what)
    return read
