"""The documents our modules return under a key of their own (cb_etcd_report, cb_kube_versions, cb_certs, ...), read
from ansible-runner's saved events: whatever a task was called, the result that carries the key is the document."""
from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from provision.errors import BootstrapError
from provision.inputs.inventory import Node
from provision.nodes.runner import PlaybookResult

Model = TypeVar("Model", bound=BaseModel)


def module_documents(run_dir: Path, key: str) -> dict[str, Any]:
    """Each host's last document under `key` in a playbook run's saved events (ansible-runner's job_events, in
    the order they were written): what a module reported, whatever the task's title."""
    found: dict[str, tuple[int, Any]] = {}
    for path in run_dir.glob("artifacts/*/job_events/*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        document = (data.get("res") or {}).get(key)
        if event.get("event") != "runner_on_ok" or document is None:
            continue
        counter = int(event.get("counter", 0))
        host = data["host"]
        if host not in found or found[host][0] < counter:
            found[host] = (counter, document)
    return {host: document for host, (_, document) in found.items()}


def read_documents(playbook: PlaybookResult, nodes: Iterable[Node], key: str, model: type[Model],
                   what: str) -> dict[str, Model]:
    """Node name -> the document its node sent under `key`, validated as `model` (`what` it reports, for the
    messages). Raises BootstrapError for the run's failed nodes, and for a node that sent none, or one this version
    cannot read."""
    playbook.raise_for_failure()
    documents = module_documents(playbook.run_dir, key)
    found: dict[str, Model] = {}
    for node in nodes:
        document = documents.get(node.host)
        if document is None:
            raise BootstrapError(f"{playbook.phase}: {node.name} sent no report of {what} "
                                 f"(full log: {playbook.run_dir / 'run.log'})")
        try:
            found[node.name] = model.model_validate(document)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise BootstrapError(f"{playbook.phase}: {node.name} sent a report of {what} that this version of "
                                 f"cluster-bootstrap cannot read ({where}: {first['msg']}); the playbooks and the "
                                 "Python package must come from the same release") from None
    return found
