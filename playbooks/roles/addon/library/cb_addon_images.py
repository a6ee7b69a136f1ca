#!/usr/bin/python
"""What a fetched release manifest asks of the run, read from its objects: every image it names
(module_utils/cb_images.py), each moved to the offline registry in the file itself when one is set (containers,
init and sidecar containers, and the images the controllers start later, named in env values, args and ConfigMaps,
which kustomize's image transformer never sees); and the Services behind its admission webhooks, whose endpoints
must be ready before anything those webhooks admit is applied. The objects are read as kubectl reads them
(`kubectl patch --local`: no server is asked, custom kinds included), so the node needs no YAML library."""
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


WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def webhook_services(objects: list) -> list:
    """[{"namespace", "name"}] of every Service an admission webhook of the objects calls, once each (a webhook
    with a URL calls no Service of the cluster)."""
    found = []
    for obj in objects:
        if obj.get("kind") not in WEBHOOK_KINDS:
            continue
        for webhook in obj.get("webhooks") or []:
            service = (webhook.get("clientConfig") or {}).get("service") or {}
            if service.get("name") and service.get("namespace"):
                entry = {"namespace": service["namespace"], "name": service["name"]}
                if entry not in found:
                    found.append(entry)
    return found


def main() -> None:
    module = AnsibleModule(argument_spec={"path": {"type": "path", "required": True}, "registry": {"type": "str"},
                                          "kubectl": {"type": "str", "default": "kubectl"}},
                           supports_check_mode=True)
    path, registry = module.params["path"], module.params["registry"]
    with open(path) as manifest:
        text = manifest.read()
    objects = read_objects(module, path) if text.strip() else []
    images = find_images(objects)
    result = {"changed": False, "path": path, "images": images, "webhooks": webhook_services(objects),
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
