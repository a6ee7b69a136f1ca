"""The cluster add-on manifests under manifests/, rendered from the settings.

Rendering happens here, once, in Python; the roles only copy the rendered text to the control plane and
apply it, so the tests check exactly what is applied.
"""
from __future__ import annotations

from dataclasses import dataclass

import jinja2

from provision.inputs import versions
from provision.inputs.settings import GPU_RESOURCE, Settings
from provision.inputs.sources import resolve_sources
from provision.resources import MANIFESTS_DIR

_env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(MANIFESTS_DIR)), undefined=jinja2.StrictUndefined,
                          trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def image_ref(settings: Settings, image: str) -> str:
    """An upstream image reference, moved to offline.image_repository when one is set.

    `quay.io/calico/node:v3.33.1` becomes `<registry>/calico/node:v3.33.1`: the registry host is replaced
    and the path kept, so one local registry serves images from every upstream registry.
    """
    registry = settings.offline.image_repository
    if not registry:
        return image
    first, _, rest = image.partition("/")
    is_host = "." in first or ":" in first or first == "localhost"
    return f"{registry.rstrip('/')}/{rest if is_host and rest else image}"


def _render(template: str, **values: object) -> str:
    return _env.get_template(template).render(**values)


def device_plugin_manifest(settings: Settings) -> str:
    gpu = settings.gpu
    return _render("nvidia-device-plugin.yaml.j2", version=gpu.device_plugin_version,
                   image=image_ref(settings, f"{gpu.device_plugin_image}:{gpu.device_plugin_version}"),
                   runtime_class=gpu.runtime == "runtimeclass", gpu_resource=GPU_RESOURCE)


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
    """Calico's images as its release manifest names them -> where they are pulled from (moved to
    offline.image_repository when one is set, else unchanged: quay.io, mirrored by containerd's registry mirrors)."""
    return {f"{versions.CALICO_REGISTRY}/{name}": image_ref(settings, f"{versions.CALICO_REGISTRY}/{name}")
            for name in versions.CALICO_IMAGES}


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
