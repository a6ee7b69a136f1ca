"""What the scheduler will see of a node's GPUs once the gpu settings are applied: how many of which resource the
device plugin advertises (whole GPUs, MIG instances, and each of those `gpu.replicas` times when shared), and why a
node's GPUs cannot take the MIG settings. Decided once, here, from preflight's PCI device ids; preflight records
it, verify holds allocatable to it, the summary says it."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provision.inputs import versions
from provision.inputs.settings import GpuSettings


@dataclass(frozen=True)
class Advertised:
    resource: str
    count: int
    # How the count comes about: "8 GPUs", "8 GPUs x 7 MIG 1g.10gb", "... x 4 time-slicing replicas".
    detail: str


def mig_problem(gpu: GpuSettings, device_ids: Sequence[int]) -> tuple[str, str] | None:
    """(what, fix) when a node's GPUs cannot be cut as gpu.mig says; None when they can (or MIG is off)."""
    profile = gpu.mig.profile
    if not gpu.mig.enabled or not device_ids or profile is None:
        return None
    for device in sorted(set(device_ids)):
        product = versions.mig_product(device)
        if product is None:
            return (f"NVIDIA device 0x{device:04x} does not support MIG (only the {versions.MIG_PRODUCTS_TEXT} do)",
                    "set gpu.mig.strategy: none (gpu.sharing: time-slicing shares any GPU), or gpu=false for the node")
        if profile not in product.profiles:
            return (f"{product.name} GPUs have no MIG profile {profile}",
                    f"set gpu.mig.profile to one of {', '.join(product.profiles)}")
    return None


def advertised(gpu: GpuSettings, device_ids: Sequence[int], physical: int) -> Advertised:
    """What the device plugin will advertise on a node with `physical` NVIDIA GPUs whose PCI device ids are
    `device_ids` (one per GPU). Call mig_problem first: a GPU without the profile counts as one whole GPU here."""
    count = physical
    detail = f"{physical} GPU{'s' if physical != 1 else ''}"
    profile = gpu.mig.profile
    if gpu.mig.enabled and profile is not None and len(device_ids) == physical:
        per_gpu = [(versions.mig_product(d) or versions.MigProduct("", (), {})).profiles.get(profile, 1)
                   for d in device_ids]
        count = sum(per_gpu)
        detail += f" x {per_gpu[0]} MIG {profile}" if len(set(per_gpu)) == 1 else f" as {count} MIG {profile}"
    if gpu.sharing != "none" and gpu.replicas:
        count *= gpu.replicas
        detail += f" x {gpu.replicas} {gpu.sharing} replicas"
    return Advertised(gpu.advertised_resource, count, detail)
