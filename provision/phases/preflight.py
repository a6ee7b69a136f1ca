"""preflight: read-only checks on every node of the run; it provides the GPU counts, the interfaces that carry the
VIP, link speeds and the Python each node runs Ansible with."""
from __future__ import annotations

from provision.bundle.check import check_offline_bundle, node_problems
from provision.errors import BootstrapError
from provision.findings import describe, group_findings
from provision.inputs.settings import GPU_RESOURCE
from provision.nodes.preflight.run import PreflightReport, run_preflight
from provision.nodes.sources_check import check_sources
from provision.phases.engine import Phase, PhaseContext


def check(ctx: PhaseContext) -> str:
    report = run_preflight(ctx.cluster, ctx.settings, nodes=list(ctx.target_nodes), on_progress=ctx.on_progress,
                           become_password=ctx.become_password)
    ctx.results.preflight = report
    # What the settings accept but upstream no longer supports (containerd 1.x on 1.35, cgroup v1 allowed) is said
    # on every run, not only by `bootstrap preflight`.
    # Each once, with the nodes it holds for (the same two on fifty nodes are two lines, not a hundred).
    warnings = [f for f in report.findings if f.status == "warn"]
    for group in group_findings(warnings):
        ctx.say(f"warning: {describe(group, ctx.target_nodes)}")
    if report.blocking:
        more = (f" (and {len(report.blocking) - 1} more; `bootstrap preflight` lists them)"
                if len(report.blocking) > 1 else "")
        raise BootstrapError(f"preflight: {report.blocking[0].describe()}{more}")
    judge_bundle(ctx, report)
    sources = prove_sources(ctx, report)
    # Recorded only now, once nothing is refused: the GPU counts satisfy the next run's need for them (`prepare`
    # alone would skip preflight), so a failed preflight (an unreachable GPU node counted 0) must leave none.
    record(ctx, report)
    gpus = ctx.state.gpus or {}
    total = sum(gpus.get(n, 0) for n in ctx.target_nodes)
    warned = f", {len(report.warnings)} warnings" if report.warnings else ""
    schedulable: dict[str, int] = {}
    for found in report.gpu_advertised.values():
        schedulable[found.resource] = schedulable.get(found.resource, 0) + found.count
    shared = "" if schedulable in ({}, {GPU_RESOURCE: total}) else \
        f" ({', '.join(f'{count} {resource}' for resource, count in schedulable.items())} schedulable)"
    return f"{len(ctx.target_nodes)} nodes ready to prepare, {total} GPUs found{shared}{warned}{sources}"


def record(ctx: PhaseContext, report: PreflightReport) -> None:
    """What the phases after preflight build on, for this run's nodes (the others' as an earlier run left them):
    the GPUs and their generations, what the device plugin will offer, the VIP's interfaces, link speeds and the
    Python each node runs Ansible with."""
    targets = ctx.target_nodes
    ctx.state.gpus = dict(ctx.state.gpus or {}) | {name: int(report.gpu_counts.get(name, 0)) for name in targets}
    ctx.state.vip_interfaces |= report.vip_interfaces
    ctx.state.link_gbps = {name: speed for name, speed in ctx.state.link_gbps.items() if name not in targets} \
        | report.link_speeds
    ctx.state.pythons = {name: python for name, python in ctx.state.pythons.items() if name not in targets} \
        | report.pythons
    ctx.state.gpu_generations |= {name: report.gpu_generations.get(name, []) for name in targets}
    ctx.state.gpu_offered = {name: found for name, found in ctx.state.gpu_offered.items() if name not in targets} \
        | {name: {o.resource: o.count} for name, o in report.gpu_advertised.items()}


def judge_bundle(ctx: PhaseContext, report: PreflightReport) -> None:
    """With a bundle as offline.source: it carries every node's platform, and the NVIDIA stack for GPU nodes (the
    inputs' check, before any connection, judged what the settings need; only the nodes say what they run)."""
    contents = check_offline_bundle(ctx.settings, ctx.cluster, files=False)
    problems = node_problems(contents, report.sources_targets.values()) if contents else []
    if problems:
        raise BootstrapError("preflight: the offline bundle lacks what these nodes need (nothing was changed):\n"
                             + "\n".join(problems))


def prove_sources(ctx: PhaseContext, report: PreflightReport) -> str:
    """Request, from the nodes, the index of every repository and manifest the phases planned after this one will
    fetch (prepare: the packages; network: Calico's manifest; an add-on phase: its release), before any of them
    changes a node. Raises BootstrapError with one line per source that fails."""
    packages, calico = "prepare" in ctx.planned, "network" in ctx.planned
    addons = tuple(name for name in ctx.settings.addons.enabled if name in ctx.planned)
    if not packages and not calico and not addons:
        return ""
    settings = ctx.settings.model_copy(update={"addons": ctx.settings.addons.model_copy(update={"enabled": addons})})
    found = check_sources(ctx.cluster, settings, report.sources_targets, become_password=ctx.become_password,
                          packages=packages, calico=calico)
    lines = found.lines()
    if lines:
        raise BootstrapError("preflight: sources this run needs fail from the nodes (nothing was changed; "
                             "`bootstrap config check-sources` asks again):\n" + "\n".join(lines))
    asked = sum(len(answers) for answers in found.answers.values())
    return f", {asked} source indexes answered"


PHASE = Phase("preflight", "check every node can take part", check, provides=("gpus", "vip_interfaces"),
              read_only=True)
