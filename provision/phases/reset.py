"""reset (reset, down, node remove): kubeadm reset and every trace it leaves, on the nodes of the run."""
from __future__ import annotations

from pydantic import RootModel

from provision.nodes.documents import sent
from provision.phases.engine import Phase, PhaseContext

# The reset role's set_fact: the data cache paths it found unmarked and kept.
LEFT_ALONE_KEY = "reset_left_alone"


class LeftAlone(RootModel[list[str]]):
    """reset_left_alone: the paths the role kept."""


def check(ctx: PhaseContext) -> str:
    result = ctx.playbook_results[-1]
    changed = {h: c for h, c in result.changed.items() if c}
    left = sent(result.run_dir, LEFT_ALONE_KEY, LeftAlone, phase="reset", what="what it left alone")
    # The smoke test's cache path holds a folder the smoke test did not mark as its own: kept, and said.
    for host, paths in sorted(left.items()):
        for path in paths.root:
            ctx.say(f"{host}: {path} left alone: it is smoke_test.cache_path but does not carry the smoke test's mark "
                    "(the smoke test did not make it); remove it yourself if it is not needed")
    return (f"{len(result.tally)} nodes clean; changed: {', '.join(sorted(changed))}" if changed
            else f"{len(result.tally)} nodes were already clean")


PHASE = Phase("reset", "kubeadm reset and every trace it leaves", check, playbook="reset.yml",
              limit=lambda ctx: list(ctx.nodes) if ctx.nodes is not None else None, undoes=True)
