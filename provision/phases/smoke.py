"""smoke: the CIFAR-10 training Job (or TrainJob, PyTorchJob) and its verdict."""
from __future__ import annotations

from provision.errors import BootstrapError
from provision.kube.kubeconfig import admin_kubeconfig_path
from provision.phases.engine import Phase, PhaseContext
from provision.smoke.driver import run_smoke_test


def skip_reason(ctx: PhaseContext) -> str | None:
    return None if ctx.settings.smoke_test.enabled else "smoke_test.enabled is false"


def check(ctx: PhaseContext) -> str:
    # smoke_test.mode (auto: GPU when the cluster advertises one) is applied by the smoke test itself.
    # The slowest link preflight read between the nodes, to set beside the all-reduce bandwidth.
    links = ctx.state.link_gbps.values()
    verdict = run_smoke_test(admin_kubeconfig_path(ctx.cluster), ctx.settings, on_progress=ctx.on_smoke_progress,
                             link_gbps=min(links) if links else None)
    ctx.results.smoke = verdict
    if not verdict.passed:
        # A FAIL summary already carries the cause and its detail.
        raise BootstrapError(f"smoke test: {verdict.summary}")
    return verdict.summary


PHASE = Phase("smoke", "CIFAR-10 training Job", check, needs=("kubeconfig",), skip_reason=skip_reason)
