"""The version tables of docs/settings.md, rendered from provision/inputs/versions.py. The docs hold each
between `<!-- versions:NAME -->` and `<!-- /versions:NAME -->`; tests/test_versions.py holds them to the table,
and `python -m tests.support.versions_doc` rewrites them after the table changed."""
from __future__ import annotations

import re
import sys

from provision.inputs import versions as v
from provision.inputs.platforms import PLATFORMS, Platform
from tests.support.paths import REPO_ROOT

DOCS = (REPO_ROOT / "docs" / "settings.md",)


def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _containerd(release: v.KubernetesRelease) -> str:
    if release.containerd_minimum < release.containerd_warn_below:
        return f"1.x warned, {v.shown_version(release.containerd_warn_below)}+ recommended"
    return f"{v.shown_version(release.containerd_minimum)} or newer (1.x refused)"


def kubernetes_table() -> str:
    lines = [_row("Kubernetes", "end of life", "newest patch seen", "pause", "Calico", "containerd"),
             _row(*["---"] * 6)]
    for release in v.KUBERNETES_RELEASES:
        default = " (default)" if release.name == v.KUBERNETES_DEFAULT else ""
        lines.append(_row(f"`{release.name}`{default}", release.end_of_life.isoformat(), release.latest_patch,
                          f"`{release.pause}`", f"`{release.calico}`", _containerd(release)))
    refused = ", ".join(f"1.{minor} ({day.isoformat()})" for minor, day in sorted(v.KUBERNETES_END_OF_LIFE.items()))
    lines += ["", f"Refused as past their end of life: {refused}; older minors too. A newer minor than "
              f"1.{v.KUBERNETES_RELEASES[-1].minor} is refused unless `kubernetes.allow_untested_versions: true`."]
    return "\n".join(lines)


def components_table() -> str:
    toolkit_min, plugin_min = v.shown_version(v.CONTAINER_TOOLKIT_MINIMUM), v.shown_version(v.DEVICE_PLUGIN_MINIMUM)
    calico_lines = "; ".join(f"{line}: 1.{low}-1.{high}" for line, (low, high) in sorted(v.CALICO_KUBERNETES.items()))
    branches = ", ".join(v.branch_text(b) for b in v.DRIVER_BRANCHES.values() if b.supported)
    rows = [
        ("Kubernetes", f"`{v.KUBERNETES_DEFAULT}`", f"{v.supported_text()}", v.SOURCES["Kubernetes"]),
        ("kubeadm config API", f"`{v.KUBEADM_API_VERSION}`", "v1beta4 only", v.SOURCES["kubeadm"]),
        ("containerd", "2.x: Docker's `containerd.io` (2.1.5 or newer) or the distribution's where it is 2.0+",
         f"configuration version {v.CONTAINERD_CONFIG_VERSION[2]} for 2.x, {v.CONTAINERD_CONFIG_VERSION[1]} for 1.x "
         "(1.x only with 1.35)", v.SOURCES["containerd"]),
        ("Calico", f"`{v.KUBERNETES_RELEASES[-1].calico}` (images from `{v.CALICO_REGISTRY}`)",
         f"lines and their Kubernetes: {calico_lines}", v.SOURCES["Calico"]),
        ("NVIDIA driver branch", f"`{v.DRIVER_BRANCH_DEFAULT}`", branches, v.SOURCES["NVIDIA driver"]),
        ("NVIDIA container toolkit", f"`{v.CONTAINER_TOOLKIT_DEFAULT}`", f"{toolkit_min} or newer",
         v.SOURCES["container toolkit"]),
        ("NVIDIA device plugin", f"`{v.DEVICE_PLUGIN_DEFAULT}`", f"v{plugin_min} or newer", v.SOURCES["device plugin"]),
        ("smoke-test image", f"`{v.SMOKE_IMAGE_DEFAULT}`", "per GPU generation, below", v.SOURCES["PyTorch"]),
        ("kube-vip (`control_plane.kube_vip_image`)", f"`{v.KUBE_VIP_IMAGE}`", "several control planes with a VIP",
         v.SOURCES["kube-vip"]),
        ("local API proxy (`control_plane.proxy_image`)", f"`{v.API_PROXY_IMAGE}`",
         "several control planes without a VIP", v.SOURCES["HAProxy"]),
    ]
    lines = [_row("component", "default", "supported", "checked against"), _row(*["---"] * 4)]
    lines += [_row(*row) for row in rows]
    return "\n".join(lines)


def gpu_table() -> str:
    lines = [_row("GPU generation", "driver branches", "kernel module", "CUDA up to", "smoke-test image"),
             _row(*["---"] * 5)]
    for generation in v.GPU_GENERATIONS:
        last = f"{generation.last_branch}" if generation.last_branch else "newer"
        branches = (f"{generation.oldest_branch}" if generation.last_branch == generation.oldest_branch
                    else f"{generation.oldest_branch} to {last}")
        image = v.smoke_image_for([generation.name])
        smoke = f"`{image}`" if image else "none: set `smoke_test.image` to a CUDA 11 image"
        lines.append(_row(generation.name, branches, "open" if generation.open_module else "proprietary",
                          generation.cuda_major, smoke))
    minimums = ", ".join(f"CUDA {major} needs driver {branch}+" for major, branch in sorted(v.CUDA_MINIMUM_BRANCH.items()))
    lines += ["", f"Images and drivers: {minimums}. Generations are told apart by PCI device id "
              f"({v.SOURCES['GPU generations']})."]
    return "\n".join(lines)


def distributions_table() -> str:
    lines = [_row("distribution", "its containerd", "`containerd_source: auto` installs", "Docker beside it"),
             _row(*["---"] * 4)]
    for row in PLATFORMS:
        if not isinstance(row, Platform):
            continue
        source = v.auto_containerd_source(v.parse_version(row.containerd or ""))
        containerd, docker = v.CONTAINERD_PACKAGES[source]
        lines.append(_row(row.name, row.containerd or "none", f"`{containerd}`", f"`{docker}`"))
    return "\n".join(lines)


BLOCKS = {"kubernetes": kubernetes_table, "components": components_table, "gpus": gpu_table,
          "distributions": distributions_table}


def block_re(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- versions:{name} -->\n)(.*?)\n?(<!-- /versions:{name} -->)", re.DOTALL)


def rendered(text: str) -> str:
    """`text` with every versions block it holds rendered anew."""
    for name, render in BLOCKS.items():
        text = block_re(name).sub(lambda m, r=render: f"{m.group(1)}{r()}\n{m.group(3)}", text)  # type: ignore[misc]
    return text


def main() -> int:
    for path in DOCS:
        path.write_text(rendered(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
