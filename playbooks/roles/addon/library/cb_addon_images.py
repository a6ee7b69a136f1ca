#!/usr/bin/python
"""Every image a fetched release manifest names, read from its objects (module_utils/cb_images.py), and with an
offline registry each of them moved there in the file itself: containers, init and sidecar containers, and the
images the controllers start later, named in env values, args and ConfigMaps, which kustomize's image transformer
never sees. The objects are read as kubectl reads them (`kubectl patch --local`: no server is asked, custom kinds
included), so the node needs no YAML library."""
from __future__ import annotations

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cb_images import find_images, move_in_text, moved

DOCUMENTATION = r"""
module: cb_addon_images
short_description: List the images of a release manifest and move them to an offline registry (cb_addon_images)
options:
  path:
    description: The manifest (one or many YAML documents).
    type: path
    required: true
  registry:
    description: offline.image_repository; every image found is moved under it. Left out, nothing is changed.
    type: str
  kubectl:
    description: The kubectl that reads the manifest's objects.
    type: str
    default: kubectl
"""


def read_objects(module: AnsibleModule, path: str) -> list:
    """The manifest's objects as JSON, as kubectl decodes them (a no-op patch applied locally prints them)."""
    rc, out, err = module.run_command([module.params["kubectl"], "patch", "--local", "--type", "merge", "-p", "{}",
                                       "-o", "json", "-f", path], environ_update={"KUBECONFIG": os.devnull})
    if rc != 0:
        module.fail_json(msg=f"kubectl cannot read {path}: {' '.join(err.split())[-300:]}")
    decoder, objects, at = json.JSONDecoder(), [], 0
    while True:
        while at < len(out) and out[at].isspace():
            at += 1
        if at >= len(out):
            return objects
        found, at = decoder.raw_decode(out, at)
        objects.extend((found.get("items") or []) if found.get("kind") == "List" else [found])


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}, "registry": {"type": "str"},
                                          "kubectl": {"type": "str", "default": "kubectl"}},
                           supports_check_mode=True)
    path, registry = module.params["path"], module.params["registry"]
    with open(path) as manifest:
        text = manifest.read()
    images = find_images(read_objects(module, path)) if text.strip() else []
    result = {"changed": False, "path": path, "images": images,
              "moved": {image: moved(image, registry) for image in images} if registry else {}}
    if registry:
        new = move_in_text(text, images, registry)
        if new != text:
            result["changed"] = True
            if not module.check_mode:
                with open(path + ".tmp", "w") as out:
                    out.write(new)
                os.replace(path + ".tmp", path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
