"""`bootstrap bundle build|verify|serve`: an offline bundle of everything `up` fetches, checked and signed, and
served to the nodes (docs/offline.md)."""
from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from provision.bundle.ports import HTTP_PORT, REGISTRY_PORT
from provision.cli.option_table import checked, options_of
from provision.cli.options import ConfigOption, Output, OutputOption
from provision.errors import BootstrapError, InputError
from provision.inputs.addons import AddonName

if TYPE_CHECKING:
    from provision.inputs.platforms import Platform

BUILD_HELP = """Build an offline bundle: every package (with its dependencies), image and manifest `up` fetches for
these platforms and settings, in the layout offline.source reads, with a signed manifest of every file.

Packages are resolved by apt (Debian, Ubuntu) and dnf (the RHEL family) on this machine, from the repositories the
settings name (mirrors.*, or the upstream ones); images are copied with skopeo into a registry's storage (the CNCF
distribution registry, docker-registry), from the registries or container_runtime.registry_mirrors. An interrupted
build run again reuses everything it has. The signing key is made on the first build and kept in this machine's
state directory (or --key: a GnuPG home holding one secret key); its fingerprint is printed, for
offline.bundle_fingerprint.

\b
Example:
    bootstrap bundle build --for debian-12,rocky-9 --gpu --addons volcano,trainer --kubernetes 1.36 -o /srv/bundle
"""
BUILD = options_of("bundle build")
VERIFY = options_of("bundle verify")
SERVE = options_of("bundle serve")


@checked("bundle build")
def build(
    platforms: Annotated[Any, BUILD.option("--for", help="Platforms, comma-separated (debian-12,rocky-9).",
                                                      show_default=False)],
    out: Annotated[Path, BUILD.option("--out", "-o", help="The bundle's directory (new, empty, or an earlier "
                                      "build of it), or FILE.tar.", show_default=False)],
    gpu: Annotated[bool, BUILD.option("--gpu", help="Also the NVIDIA driver, toolkit and device plugin.")] = False,
    addons: Annotated[Any, BUILD.option(
        "--addons", help="Add-ons, comma-separated (default: the settings' addons.enabled).",
        show_default=False)] = None,
    kubernetes: Annotated[str | None, BUILD.option(
        "--kubernetes", help="Kubernetes minor or release (default: the settings').", show_default=False)] = None,
    key: Annotated[Path | None, BUILD.option("--key", help="GnuPG home holding the signing key.",
                                             show_default=False)] = None,
    cache: Annotated[Path | None, BUILD.option(
        "--cache", help="Keep downloads here by sha256, for later builds (default: inside the bundle's .build/).",
        show_default=False)] = None,
    config: ConfigOption = None,
) -> None:
    from provision.bundle.build import BuildRequest, build_bundle
    from provision.bundle.manifest import default_key_home
    from provision.cli.console import console
    from provision.inputs.settings import load_settings

    chosen: list[Platform] = platforms
    enabled: tuple[AddonName, ...] | None = addons
    request = BuildRequest(platforms=tuple(chosen), gpu=gpu, output=out, key_home=key or default_key_home(),
                           addons=enabled, kubernetes=kubernetes, cache=cache)
    settings = load_settings(config)
    started = time.monotonic()

    def progress(line: str) -> None:
        console.print(f"[{time.monotonic() - started:6.1f}s] {line}", soft_wrap=True)

    result = build_bundle(settings, request, progress)
    console.print(f"bundle: {result.archive or result.root} ({result.files} files, "
                  f"{result.size / 1e6:.1f} MB; {result.downloaded / 1e6:.1f} MB downloaded; "
                  f"{result.seconds:.0f} s)", soft_wrap=True)
    for part, size in sorted(result.sizes.items()):
        console.print(f"  {part + '/':28} {size / 1e6:9.1f} MB")
    console.print(f"Kubernetes {result.contents.kubernetes_version}, {len(result.contents.images)} images")
    console.print(f"signed by {result.fingerprint}: set offline.bundle_fingerprint: {result.fingerprint}",
                  soft_wrap=True)


@checked("bundle verify")
def verify(
    directory: Annotated[Path, VERIFY.argument("DIRECTORY", help="The bundle's directory.")],
    key: Annotated[Path | None, VERIFY.option(
        "--key", help="The public key (ASCII-armoured) the bundle must be signed by.", show_default=False)] = None,
    fingerprint: Annotated[str | None, VERIFY.option(
        "--fingerprint", help="The fingerprint of the key it must be signed by.", show_default=False)] = None,
    output: OutputOption = Output.text,
) -> None:
    """Check a bundle: its signature, then every file the manifest lists (present, same size and sha256), and
    no file it does not list. Each problem is named: missing, changed, extra, bad signature. Exit 2 on any."""
    from provision.bundle.manifest import MAX_KEY_BYTES, problem_lines, verify_directory
    from provision.cli.console import console, echo_json
    from provision.inputs.files import read_bytes

    root = directory
    trusted = read_bytes(key, "public key", "give the bundle's public key file (--key)", limit=MAX_KEY_BYTES) \
        if key else None
    verdict = verify_directory(root, trusted_key=trusted, fingerprint=fingerprint)
    if output is Output.json:
        echo_json({"ok": verdict.ok, "problems": list(verdict.problems), "signed_by": verdict.fingerprint,
                   "key_trusted": verdict.key_trusted,
                   "contents": verdict.contents.as_dict() if verdict.contents else None})
    else:
        for line in problem_lines(verdict.problems):
            console.print(line, soft_wrap=True, style="red")
        if verdict.ok:
            console.print(f"{root}: verifies; signed by {verdict.fingerprint}", soft_wrap=True)
            if not verdict.key_trusted:
                console.print("warning: checked against the key inside the bundle: pass --fingerprint or --key "
                              "to check who made it", style="bold yellow", soft_wrap=True)
    if not verdict.ok:
        raise InputError(f"{root}: {len(verdict.problems)} problem{'s' if len(verdict.problems) > 1 else ''}: "
                         "rebuild it or copy it again")


@checked("bundle serve")
def serve_command(
    directory: Annotated[Path, SERVE.argument("DIRECTORY", help="The bundle's directory.")],
    address: Annotated[str, SERVE.option(
        "--address", help="The IPv4 address the nodes reach this machine on; both servers listen there and "
                          "nowhere else.")] = "127.0.0.1",
    http_port: Annotated[int, SERVE.option("--http-port", help="The files' port.")] = HTTP_PORT,
    registry_port: Annotated[int, SERVE.option("--registry-port", help="The registry's port.")] = REGISTRY_PORT,
    fingerprint: Annotated[str | None, SERVE.option(
        "--fingerprint", help="The fingerprint of the key it must be signed by.", show_default=False)] = None,
) -> None:
    """Serve a bundle to the nodes until interrupted: its repositories and files over HTTP, its images through
    a read-only registry (docker-registry). It is verified first; one that does not verify is not served."""
    from provision.bundle.manifest import verify_directory
    from provision.bundle.serve import serve
    from provision.cli.console import console

    if http_port == registry_port:
        raise InputError(f"--http-port and --registry-port are both {http_port}: give the two servers two ports")
    root = directory
    verdict = verify_directory(root, fingerprint=fingerprint)
    if not verdict.ok:
        raise InputError(f"{root} does not verify ({'; '.join(verdict.problems[:3])}): not serving it; "
                         f"`bootstrap bundle verify {shlex.quote(str(root))}` lists every problem")
    try:
        with serve(root, address, http_port, registry_port) as served:
            console.print(f"serving {root} (signed by {verdict.fingerprint})", soft_wrap=True)
            console.print("cluster.yaml:\n  offline:\n"
                          f"    source: {served.http_url}\n    image_repository: {served.registry}\n"
                          f"    bundle_fingerprint: {verdict.fingerprint}\n  container_runtime:\n"
                          f"    registry_mirrors:\n      {served.registry!r}: ['http://{served.registry}']",
                          soft_wrap=True)
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        return
    except OSError as exc:
        raise BootstrapError(f"cannot serve on {address}: {exc.strerror}: choose another --address or port") from None


def register(app: typer.Typer) -> None:
    bundle_app = typer.Typer(help="An offline bundle: build it, verify it, serve it to the nodes.", no_args_is_help=True)
    bundle_app.command("build", help=BUILD_HELP)(build)
    bundle_app.command("verify")(verify)
    bundle_app.command("serve")(serve_command)
    app.add_typer(bundle_app, name="bundle")
