"""The cluster add-on manifests under manifests/, rendered from the settings.

Rendering happens here, once, in Python; the roles only copy the rendered text to the control plane and
apply it, so the tests check exactly what is applied.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import jinja2
import yaml

from provision.inputs import versions
from provision.inputs.inventory import Cluster
from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.render.endpoint import (
    API_SERVER_CERT_NAME,
    API_SERVER_PORT,
    PROXY_HOST,
    PROXY_PORT,
    ApiEndpoint,
)
from provision.render.node_paths import ADMIN_CONF, KUBERNETES_DIR, STATIC_POD_DIR, SUPER_ADMIN_CONF
from provision.resources import MANIFESTS_DIR, module_utils

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(MANIFESTS_DIR)), undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def image_ref(settings: Settings, image: str) -> str:
    """An upstream image reference, moved to offline.image_repository when one is set.

    `quay.io/calico/node:v3.33.1` becomes `<registry>/calico/node:v3.33.1`: the registry host is replaced
    and the path kept, so one local registry serves images from every upstream registry. The rule is
    module_utils/cb_images.py's, which moves the add-ons' images on the control plane.
    """
    return str(module_utils("cb_images").moved(image, settings.offline.image_repository))


def _render(template: str, **values: object) -> str:
    return _env.get_template(template).render(**values)


DEVICE_PLUGIN_CONFIG_MAP = "nvidia-device-plugin-config"
# Where the MPS control daemon keeps its pipes, logs and /dev/shm on the node (upstream's default).
MPS_ROOT = "/run/nvidia/mps"
# The labels the gpu phase sets on GPU nodes: the device plugin's nodeSelector, and with MPS the control daemon's.
GPU_PRESENT_LABEL = "nvidia.com/gpu.present=true"
MPS_CAPABLE_LABEL = "nvidia.com/mps.capable=true"


def device_plugin_config(settings: Settings) -> dict[str, object]:
    """The device plugin's own configuration file (its README's `version: v1` format): the MIG strategy, and the
    sharing of each advertised resource between gpu.replicas pods."""
    gpu = settings.gpu
    flags: dict[str, object] = {"migStrategy": gpu.mig.strategy, "failOnInitError": True}
    if gpu.sharing == "mps":
        flags["mpsRoot"] = MPS_ROOT
    config: dict[str, object] = {"version": "v1", "flags": flags}
    if gpu.sharing != "none":
        key = "timeSlicing" if gpu.sharing == "time-slicing" else "mps"
        # A request for two replicas is two slices of one GPU, not two GPUs: the plugin refuses it.
        config["sharing"] = {key: {"failRequestsGreaterThanOne": True,
                                   "resources": [{"name": gpu.advertised_resource, "replicas": gpu.replicas}]}}
    return config


def device_plugin_manifest(settings: Settings) -> str:
    """The plugin's ConfigMap, then its DaemonSet (and with MPS the control daemon's)."""
    gpu = settings.gpu
    config = yaml.safe_dump(device_plugin_config(settings), sort_keys=False)
    # The MIG profile is applied on the nodes, not read by the plugin: it is in the hash so that a new layout
    # restarts the plugin, which then advertises the new instances.
    config_hash = hashlib.sha256(f"{config}\n{gpu.mig.profile}".encode()).hexdigest()[:16]
    config_map = {"apiVersion": "v1", "kind": "ConfigMap",
                  "metadata": {"name": DEVICE_PLUGIN_CONFIG_MAP, "namespace": "kube-system",
                               "labels": {"app.kubernetes.io/name": "nvidia-device-plugin",
                                          "app.kubernetes.io/managed-by": "cluster-bootstrap"}},
                  "data": {"config.yaml": config}}
    daemon_sets = _render("nvidia-device-plugin.yaml.j2", version=gpu.device_plugin_version,
                          image=image_ref(settings, f"{gpu.device_plugin_image}:{gpu.device_plugin_version}"),
                          runtime_class=gpu.runtime_class, gpu_resource=GPU_RESOURCE,
                          config_map=DEVICE_PLUGIN_CONFIG_MAP, config_hash=config_hash, mig=gpu.mig.enabled,
                          mps=gpu.sharing == "mps", mps_root=MPS_ROOT)
    return f"{yaml.safe_dump(config_map, sort_keys=False)}---\n{daemon_sets}"


def gpu_node_labels(settings: Settings) -> list[str]:
    """The labels every GPU node gets from the gpu phase (beside its GPU generation); without MPS the MPS label
    is removed, so that a control daemon left from an earlier setting runs nowhere."""
    mps_key = MPS_CAPABLE_LABEL.split("=")[0]
    return [GPU_PRESENT_LABEL, MPS_CAPABLE_LABEL if settings.gpu.sharing == "mps" else f"{mps_key}-"]


def runtimeclass_manifest() -> str:
    return (MANIFESTS_DIR / "runtimeclass-nvidia.yaml").read_text()


@dataclass(frozen=True)
class CalicoSource:
    url: str
    # Name of the downloaded release manifest inside the kustomization directory.
    upstream_file: str
    # File name -> content of the kustomization that customises it.
    kustomization: dict[str, str]


def calico_images(settings: Settings) -> dict[str, str]:
    """The images the pinned Calico release's manifest names -> where they are pulled from (moved to
    offline.image_repository when one is set, else unchanged: quay.io, mirrored by containerd's registry mirrors)."""
    return {image: image_ref(settings, image) for image in versions.calico_images(settings.calico.version)}


def calico_source(settings: Settings) -> CalicoSource:
    version = settings.calico.version
    base = resolve_sources(settings).calico_manifest.rstrip("/")
    upstream_file = f"calico-{version}.yaml"
    moved = {name: new for name, new in calico_images(settings).items() if name != new}
    kustomization = {
        "kustomization.yaml": _render("calico/kustomization.yaml.j2", version=version, upstream_file=upstream_file,
                                      images=moved),
        "calico-node-patch.yaml": _render("calico/calico-node-patch.yaml.j2", pod_cidr=settings.kubernetes.pod_cidr),
    }
    return CalicoSource(url=f"{base}/{version}/manifests/calico.yaml", upstream_file=upstream_file,
                        kustomization=kustomization)


# --- the control-plane endpoint: kube-vip, the local API proxy, kube-proxy's kubeconfig -----------------------

# The Lease kube-vip's control-plane instances elect their leader with (its default name).
KUBE_VIP_LEASE = "plndr-cp-lock"
# The local API proxy's static pod: its name (and app.kubernetes.io/name, which verify looks for) and, on the
# nodes, where its configuration lives; then the static pods' directory.
API_PROXY_NAME = "cb-api-proxy"
API_PROXY_DIR = f"{KUBERNETES_DIR}/{API_PROXY_NAME}"
API_PROXY_MANIFEST = f"{STATIC_POD_DIR}/{API_PROXY_NAME}.yaml"
KUBE_VIP_MANIFEST = f"{STATIC_POD_DIR}/kube-vip.yaml"


def kube_vip_manifest(settings: Settings, *, interface: str, during_init: bool = False) -> str:
    """kube-vip's static pod for one control plane: ARP on `interface` for control_plane.vip. `during_init`: the
    first control plane's copy while `kubeadm init` runs (super-admin.conf)."""
    vip = settings.control_plane.vip
    if vip is None:
        raise ValueError("kube-vip needs control_plane.vip")
    return _render("endpoint/kube-vip.yaml.j2", image=image_ref(settings, settings.control_plane.kube_vip_image),
                   api_server_port=API_SERVER_PORT, interface=interface, lease=KUBE_VIP_LEASE, vip=vip,
                   kubeconfig=SUPER_ADMIN_CONF if during_init else ADMIN_CONF)


@dataclass(frozen=True)
class ApiProxy:
    config: str
    manifest: str


def api_proxy(cluster: Cluster, settings: Settings) -> ApiProxy:
    """The local proxy every node runs in proxy mode: HAProxy's configuration (every control plane a server) and
    the static pod that runs it, the same on every node."""
    listen = f"{PROXY_HOST}:{PROXY_PORT}"
    servers = [{"name": node.name, "address": node.cluster_address or node.address} for node in cluster.control_planes]
    config = _render("endpoint/haproxy.cfg.j2", listen=listen, servers=servers, api_server_port=API_SERVER_PORT)
    manifest = _render("endpoint/api-proxy.yaml.j2", name=API_PROXY_NAME, listen=listen, config_dir=API_PROXY_DIR,
                       config_hash=hashlib.sha256(config.encode()).hexdigest()[:16],
                       image=image_ref(settings, settings.control_plane.proxy_image))
    return ApiProxy(config=config, manifest=manifest)


def kube_proxy_kubeconfig(endpoint: ApiEndpoint) -> str:
    """kube-proxy's kubeconfig (the kubeconfig.conf of its ConfigMap, as kubeadm writes it) with the server every
    node reaches the API on: through the local proxy, the server verified by a name its certificate has."""
    return _render("endpoint/kube-proxy-kubeconfig.yaml.j2", server=endpoint.node_url,
                   tls_server_name=API_SERVER_CERT_NAME)
