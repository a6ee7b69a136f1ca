"""Stand-in container images for the lab: the real ones (registry.k8s.io, quay.io, Docker Hub, nvcr.io, ghcr.io)
cannot be pulled here.

Each stand-in is a real OCI image (one small layer holding a file that names the image it stands for), written
here as an OCI layout and pushed with skopeo into a real registry (docker-registry) under the path the upstream
image has on its registry, so that a mirror entry (container_runtime.registry_mirrors) pointing at that registry
serves it as the upstream would. They are pulled, never run.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from provision.bundle.images import Registry, split_image


def _blob(layout: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return f"sha256:{digest}", len(data)


def write_standin(layout: Path, image: str) -> str:
    """One stand-in for `image` in the OCI layout `layout`; returns its reference name in the layout."""
    content = f"stand-in for {image} (cluster-bootstrap lab)\n".encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("standin.txt")
        info.size, info.mtime, info.mode = len(content), 0, 0o644
        tar.addfile(info, io.BytesIO(content))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/standin"]},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [f"sha256:{hashlib.sha256(raw.getvalue()).hexdigest()}"]}}).encode()
    layer_digest, layer_size = _blob(layout, layer)
    config_digest, config_size = _blob(layout, config)
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                   "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest,
                    "size": layer_size}]}).encode()
    manifest_digest, manifest_size = _blob(layout, manifest)
    name = hashlib.sha256(image.encode()).hexdigest()[:16]
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["manifests"].append({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest,
                               "size": manifest_size, "annotations": {"org.opencontainers.image.ref.name": name}})
    index_path.write_text(json.dumps(index))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    return name


def fill_registry(storage: Path, images: list[str], work: Path) -> None:
    """A registry storage holding a stand-in for each image, at its path on its own registry."""
    layout = work / "oci"
    with Registry(storage) as registry:
        for image in images:
            name = write_standin(layout, image)
            subprocess.run(["skopeo", "copy", "--dest-tls-verify=false", f"oci:{layout}:{name}",
                            f"docker://{registry.host}/{split_image(image)[1]}"], check=True, capture_output=True,
                           timeout=120)
