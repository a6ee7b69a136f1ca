"""Every image a run pulls, and where from: the one list the offline rewrite (`image_ref`) and the offline bundle
(provision/bundle) both read.

The images come in three kinds, by who names their tag:

- ours: the versions table and the settings name the whole reference (pause, Calico, the device plugin, kube-vip,
  HAProxy, the DNS probe, the smoke test's trainers);
- kubeadm's: the control-plane images of the exact Kubernetes release (`kubeadm config images list` says which,
  the release's kubeadm being the authority: `kubeadm_images`);
- the add-ons': their release manifests name them (tags included), so they are read from the rendered manifests
  (`manifest_images`), wherever a manifest names one: containers and the images its controllers start later.

Each is pulled from `image_ref(settings, image)`: the upstream reference, or the same path under
`offline.image_repository` when one is set.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import yaml

from provision.inputs import versions
from provision.inputs.settings import Settings
from provision.render.manifests import calico_images, image_ref
from provision.render.playbook_vars import sandbox_image
from provision.resources import module_utils

# kubeadm's control-plane images live here upstream; kubeadm moves them to its imageRepository (the settings').
KUBEADM_REGISTRY = "registry.k8s.io"


def own_images(settings: Settings, *, gpu: bool, endpoint_modes: Iterable[str] = ("vip", "proxy")) -> list[str]:
    """The upstream references of the images whose tags the versions table and the settings name, for a cluster
    with GPUs (`gpu`) and the control-plane endpoints `endpoint_modes` may choose. The pause image is kubeadm's
    (containerd pins the same one) and is listed here too: containerd pulls it before kubeadm runs."""
    pause = sandbox_image(settings).rsplit("/", 1)[-1]
    calico = [f"{image}:{settings.calico.version}" for image in calico_images(settings)]
    found = [f"{KUBEADM_REGISTRY}/{pause}", *calico, settings.verify.dns_probe_image]
    if gpu:
        found.append(f"{settings.gpu.device_plugin_image}:{settings.gpu.device_plugin_version}")
    modes = set(endpoint_modes)
    if "vip" in modes:
        found.append(settings.control_plane.kube_vip_image)
    if "proxy" in modes:
        found.append(settings.control_plane.proxy_image)
    # The smoke test: the image cluster.yaml names, or every image the versions table may choose by GPU generation
    # (on a cluster without GPUs the newest one).
    if "image" in settings.smoke_test.model_fields_set:
        found.append(settings.smoke_test.image)
    else:
        found.extend(image.image for image in versions.SMOKE_IMAGES) if gpu else found.append(
            versions.SMOKE_IMAGE_DEFAULT)
    return list(dict.fromkeys(found))


def kubeadm_images(listed: str) -> list[str]:
    """The upstream references in `kubeadm config images list --image-repository registry.k8s.io` output, one per
    line; ValueError when a line is not an image under registry.k8s.io (a kubeadm that did not answer)."""
    images = [line.strip() for line in listed.splitlines() if line.strip()]
    bad = [line for line in images if not re.fullmatch(r"registry\.k8s\.io/[a-z0-9./_-]+:[A-Za-z0-9_.-]+", line,
                                                        re.ASCII)]
    if bad or not images:
        raise ValueError(f"kubeadm listed no images, or something else ({(bad or ['nothing'])[0][:80]!r})")
    return images


def manifest_images(text: str) -> list[str]:
    """Every image a manifest's objects name, in the order found, once each: containers, init (and sidecar) and
    ephemeral containers in any pod template, and the images named as text that the controllers start later (env
    values, args, ConfigMaps). The rule is module_utils/cb_images.py's, which the addon role runs on the control
    plane over the same manifests."""
    objects = [doc for doc in yaml.safe_load_all(text) if doc]
    return list(module_utils("cb_images").find_images(objects))


def pulled_from(settings: Settings, images: Iterable[str]) -> dict[str, str]:
    """Each upstream reference -> where the nodes pull it (image_ref: offline.image_repository's path for it)."""
    return {image: image_ref(settings, image) for image in images}
