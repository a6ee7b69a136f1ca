"""Image references in Kubernetes objects, and their move to an offline registry: one copy, read by the addon role's
module on the control plane (Python 3.9 there, standard library only) and by the tool itself (the offline bundle,
the image lists it compares: provision/render/images.py loads this file).

Where a release names an image: every container's `image` (containers, initContainers, which include sidecars, and
ephemeralContainers), and, as text the controllers turn into containers later, env values, command and args
(`--x-image=REF` or a REF after `--x-image`), and ConfigMap data (KServe's inferenceservice-config JSON,
Argo's workflow-controller-configmap YAML): there a value counts when it has a tag or digest and sits under a key
or variable whose name says image, or has a registry path of its own.
"""
from __future__ import annotations

import json
import re

_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = r"sha256:[0-9a-f]{64}"
# The reference grammar of distribution/reference (docker's): [host[:port]/]path[:tag][@digest].
IMAGE_RE = re.compile(rf"(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?", re.ASCII)
_PINNED = re.compile(rf".*(?::{_TAG}|@{_DIGEST})", re.ASCII)
# A line of YAML or JSON that names an image under an image-ish key ("image": "...", image: ..., defaultJobImage).
_KEYED = re.compile(r"""["']?([A-Za-z_]*[Ii]mage)["']?\s*[:=]\s*["']?([^\s"',}]+)""", re.ASCII)
_ARG = re.compile(r"--?[A-Za-z0-9-]*image[A-Za-z0-9-]*(?:=(.+))?", re.ASCII | re.IGNORECASE)
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_BOUNDARY = r"A-Za-z0-9_./:@-"


def is_image(value, *, pinned=True):
    """Whether `value` is an image reference (with a tag or digest, when `pinned`)."""
    if not isinstance(value, str) or not IMAGE_RE.fullmatch(value):
        return False
    return bool(_PINNED.fullmatch(value)) if pinned else True


def _has_registry_path(value):
    return "/" in value


def _from_text(text, found):
    for match in _KEYED.finditer(text):
        if is_image(match.group(2)):
            found.append(match.group(2))


def _from_config_value(value, found):
    try:
        parsed = json.loads(value)
    except ValueError:
        _from_text(value, found)
        return
    _walk_json(parsed, found, None)


def _walk_json(node, found, key):
    if isinstance(node, dict):
        for k, v in node.items():
            _walk_json(v, found, k)
    elif isinstance(node, list):
        for item in node:
            _walk_json(item, found, key)
    elif isinstance(node, str) and key is not None and "image" in str(key).lower() and is_image(node):
        found.append(node)


def _from_container(container, found):
    if isinstance(container.get("image"), str):
        found.append(container["image"])
    for variable in container.get("env") or []:
        if not isinstance(variable, dict):
            continue
        value = variable.get("value")
        name = str(variable.get("name", ""))
        if is_image(value) and ("IMAGE" in name.upper() or _has_registry_path(value)):
            found.append(value)
    words = [w for w in (container.get("command") or []) + (container.get("args") or []) if isinstance(w, str)]
    for index, word in enumerate(words):
        flag = _ARG.fullmatch(word)
        if flag and flag.group(1) and is_image(flag.group(1)):
            found.append(flag.group(1))
        elif flag and not flag.group(1) and index + 1 < len(words) and is_image(words[index + 1]):
            found.append(words[index + 1])


def _walk(node, found):
    if isinstance(node, dict):
        if node.get("kind") == "ConfigMap" and isinstance(node.get("data"), dict):
            for value in node["data"].values():
                if isinstance(value, str):
                    _from_config_value(value, found)
        for key, value in node.items():
            if key in CONTAINER_LISTS and isinstance(value, list):
                for container in value:
                    if isinstance(container, dict):
                        _from_container(container, found)
            _walk(value, found)
    elif isinstance(node, list):
        for item in node:
            _walk(item, found)


def find_images(objects):
    """Every image the objects name, in the order found, once each."""
    found = []
    _walk(list(objects), found)
    return list(dict.fromkeys(found))


def moved(image, registry):
    """`image` under `registry` (offline.image_repository): the registry host replaced, the path kept, so one
    registry serves images from every upstream one (quay.io/calico/node:v3 -> REGISTRY/calico/node:v3)."""
    if not registry:
        return image
    first, _, rest = image.partition("/")
    is_host = "." in first or ":" in first or first == "localhost"
    return f"{registry.rstrip('/')}/{rest if is_host and rest else image}"


def move_in_text(text, images, registry):
    """`text` with every whole occurrence of each image moved under `registry` (an image inside a longer
    reference is not touched)."""
    for image in sorted(set(images), key=len, reverse=True):
        target = moved(image, registry)
        if target == image:
            continue
        pattern = f"(?<![{_BOUNDARY}]){re.escape(image)}(?![{_BOUNDARY}])"
        text = re.sub(pattern, lambda _, target=target: target, text)
    return text
