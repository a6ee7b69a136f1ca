"""Which `smoke-test` options go together: a pure judge of the options a user gave (None: not given), checked
before anything else (no settings file, no kubeconfig, no cluster), so that an option another one makes
meaningless is refused in one line instead of being ignored.

- `--cpu` trains on no GPU: `--gpus` contradicts it.
- `--pipeline` runs the seeds' pipeline: one PyTorchJob on one node with one GPU, its own steps and clean-up, no
  model copied back. `--gpus`, `--nodes`, `--keep`, `--workload`, `--scheduler` and `--save` do not apply to it
  (`--cpu`, `--image`, `--epochs`, `--timeout`, `--serve` do).
- `--print-manifests` prints the workload it names and exits: `--workload` (it names one itself), `--serve`,
  `--pipeline`, `--keep` and `--output json` (there is no verdict to print) mean nothing beside it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SmokeOptions:
    """The options given on the command line (None or False: not given)."""

    gpus: int | None = None
    nodes: int | None = None
    cpu: bool = False
    keep: bool = False
    workload: str | None = None
    scheduler: str | None = None
    save: str | None = None
    serve: bool = False
    pipeline: bool = False
    print_manifests: str | None = None
    output: str = "text"

    def given(self) -> list[str]:
        """The options given, as the command line spells them."""
        found = []
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name == "output":
                if value != "text":
                    found.append(f"--output {value}")
            elif value not in (None, False):
                found.append(f"--{item.name.replace('_', '-')}")
        return found


# Each option that excludes others: (the option, the ones it excludes, why).
EXCLUSIONS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("--cpu", ("--gpus",), "trains on no GPU"),
    ("--print-manifests", ("--pipeline", "--serve", "--keep", "--workload", "--output json"),
     "prints the objects of the workload it names and exits, creating nothing"),
    ("--pipeline", ("--gpus", "--nodes", "--keep", "--workload", "--scheduler", "--save"),
     "trains one PyTorchJob on one node with one GPU, in steps that clean up after themselves"),
)


def combination_problem(options: SmokeOptions) -> str | None:
    """The first pair of given options that do not go together, as the one line that says so; None when they do."""
    given = set(options.given())
    for option, excluded, why in EXCLUSIONS:
        if option not in given:
            continue
        clash = next((other for other in excluded if other in given), None)
        if clash:
            return f"{option} {why}: {clash} does not apply to it; leave one of them out"
    return None
