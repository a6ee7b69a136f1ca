"""What the settings' sections share: the constants their rules name, the field types built from values.py's
shapes, and the strict base model every section is. The sections: settings_cluster.py (the cluster's shape),
settings_sources.py (where everything comes from, and how nodes are reached), settings_workloads.py (GPUs, the
smoke test, add-ons); settings.py holds the whole and reads cluster.yaml into it."""
from __future__ import annotations

import ipaddress
import math
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
)

from provision.inputs import versions
from provision.inputs.values import (
    COUNT,
    DNS_LABEL,
    EXTENDED_RESOURCE,
    IMAGE_NAME,
    QUANTITY,
    RELEASE_TAG,
    VERSION,
)

# The Kubernetes minors this release installs: the versions table's (provision/inputs/versions.py).
OLDEST_KUBE_MINOR = versions.KUBERNETES_RELEASES[0].minor
NEWEST_KUBE_MINOR = versions.KUBERNETES_RELEASES[-1].minor
# kubeadm refuses an IPv4 service range wider than /12; the cluster's DNS service takes the range's 10th address.
WIDEST_SERVICE_PREFIX = 12
NARROWEST_SERVICE_PREFIX = 28
# kube-controller-manager gives each node a /24 and refuses a cluster range more than 16 bits wider than that.
WIDEST_POD_PREFIX = 8
# Ranges that cannot carry pod or service traffic.
UNUSABLE_RANGES = {
    "0.0.0.0/8": "'this network' (0.0.0.0/8)", "127.0.0.0/8": "loopback (127.0.0.0/8)",
    "169.254.0.0/16": "link-local (169.254.0.0/16)", "224.0.0.0/4": "multicast (224.0.0.0/4)",
    "240.0.0.0/4": "reserved (240.0.0.0/4)",
}
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
# The file the smoke test leaves in a cache folder (smoke_test.cache_path) it made its own; `reset` removes the
# folder only where it finds it (smoke/manifests.py writes it, the reset role looks for it).
CACHE_MARKER = ".cluster-bootstrap-cache"
# images/s per GPU (see SmokeTestSettings.throughput_floors): a quarter of airbench94's published A100 rate
# (500,000 images in 3.83 s, about 130,000/s), scaled by dense bf16 throughput relative to the A100.
DEFAULT_THROUGHPUT_FLOORS: dict[str, float] = {
    "A100": 32_000.0, "H100": 75_000.0, "H200": 75_000.0, "H800": 75_000.0, "B200": 110_000.0,
    "A800": 32_000.0, "L40S": 28_000.0, "A10": 10_000.0, "L4": 9_000.0, "T4": 3_000.0, "V100": 8_000.0,
}

# The shapes below under the names the fields give them (provision/inputs/values.py holds every shape).
CalicoVersion = Annotated[str, AfterValidator(RELEASE_TAG.named("a Calico release tag", "v3.33.1").parse)]
ToolkitVersion = Annotated[str, AfterValidator(VERSION.named("a container toolkit release", "1.19.1").parse)]
DevicePluginVersion = Annotated[str, AfterValidator(RELEASE_TAG.named("a device plugin release tag", "v0.20.1").parse)]
QueueName = Annotated[str, AfterValidator(DNS_LABEL.named("a valid queue name").parse)]
DevicePluginImage = Annotated[str, AfterValidator(IMAGE_NAME.parse)]
GpuResource = Annotated[str, AfterValidator(EXTENDED_RESOURCE.named("an extended resource name", "nvidia.com/gpu").parse)]
# Extended resources take whole amounts only (Kubernetes refuses 0.5 or 500m of one).
ResourceAmount = Annotated[str, AfterValidator(COUNT.named(
    "a Kubernetes quantity", "1").parse)]


def _text_of_number(value: object) -> object:
    """YAML reads `shm_size: 2` or `rdma/hca: 0.5` as numbers: their text, which the shape then checks (a whole
    float as the integer it is; a bool stays a bool, and is refused)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    return value


SizeQuantity = Annotated[str, BeforeValidator(_text_of_number), AfterValidator(QUANTITY.parse)]


def kube_minor_problem(minor: int, *, allow_untested: bool = False) -> str | None:
    """Why Kubernetes 1.<minor> cannot be installed by this release (the versions table's range; a newer minor
    only with kubernetes.allow_untested_versions), or None."""
    return versions.kubernetes_minor_problem(minor, allow_untested=allow_untested)


def _cidr_problem(network: ipaddress.IPv4Network) -> str | None:
    for text, name in UNUSABLE_RANGES.items():
        if network.overlaps(ipaddress.ip_network(text)):
            return f"overlaps the {name} range: pick a private range such as 10.244.0.0/16"
    return None


class _Section(BaseModel):
    # Unknown keys are refused (with a did-you-mean) rather than silently ignored. Strict: YAML's `true` is not
    # the number 1, and 22.5 is not 22.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
