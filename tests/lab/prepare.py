"""`bootstrap prepare` on lab nodes, the one way the CLI runs it: the prepare phase through the phase engine
(provision/phases), for the lab tests and bench/prepare.py.

What a preflight found (the GPU counts, the interpreters, the GPU generations) can be handed in: it goes into the
cluster's state as preflight records it, and the phase reads it from there. Without GPU counts the engine runs
preflight first, as `bootstrap prepare` does on a cluster it has not checked yet.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from provision.inputs.inventory import Cluster
from provision.inputs.platforms import NodePython
from provision.inputs.settings import Settings
from provision.inputs.state import ClusterState
from provision.nodes.prepare import PrepareResult
from provision.nodes.runner import RunProgress
from provision.phases import PHASES, PhaseContext, run_phases


def prepare_nodes(cluster: Cluster, settings: Settings, *, gpus: Mapping[str, int] | None = None,
                  limit: Sequence[str] | None = None, pythons: Mapping[str, NodePython] | None = None,
                  generations: Mapping[str, Sequence[str]] | None = None,
                  on_progress: Callable[[RunProgress], None] | None = None) -> PrepareResult:
    """Prepare the cluster's nodes (`limit`: these node names only), as `bootstrap prepare [--limit]` does.

    Raises the phase's BootstrapError (the nodes that failed or are not ready, one line each) when it fails."""
    state = ClusterState.load(cluster)
    if gpus is not None:
        state.gpus = {**(state.gpus or {}), **gpus}
    state.pythons |= dict(pythons or {})
    state.gpu_generations |= {name: list(found) for name, found in (generations or {}).items()}
    ctx = PhaseContext(cluster=cluster, settings=settings, state=state, nodes=tuple(limit) if limit else None,
                       on_progress=on_progress)
    result = run_phases([PHASES["prepare"]], ctx)
    if result.error:
        raise result.error
    assert ctx.results.prepare is not None, "the prepare phase ran to its check, which records its result"
    return ctx.results.prepare
