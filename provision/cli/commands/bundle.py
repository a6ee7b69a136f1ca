"""`bootstrap bundle build|verify|serve`: an offline bundle of everything `up` fetches, checked and signed, and
served to the nodes (docs/offline.md)."""
from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from provision.bundle.ports import HTTP_PORT, REGISTRY_PORT
from provision.cli.options import ConfigOption, Output, OutputOption
from provision.cli.parsers import value
from provision.errors import BootstrapError, InputError
from provision.inputs.addons import ADDON_ORDER, AddonName

if TYPE_CHECKING:
    from provision.inputs.platforms import Platform

parse_fingerprint = value("parse_fingerprint")
parse_host_address = value("parse_host_address")
parse_kubernetes_version = value("parse_kubernetes_version")
parse_port = value("parse_port")

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


def _platforms(value: str) -> list[Platform]:
    from provision.inputs.platforms import Platform, platform_named, supported_text
    from provision.inputs.values import parse_platform_key

    found = []
    for key in [part.strip() for part in value.split(",") if part.strip()]:
        try:
            parse_platform_key(key)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        row = platform_named(key)
        if row is None:
            raise typer.BadParameter(f"{key} is not a platform this release knows: use one of "
                                     f"{supported_text()}, written as debian-12, ubuntu-24.04, rocky-9")
        if not isinstance(row, Platform):
            raise typer.BadParameter(f"{key} is refused: {row.reason}: {row.fix}")
        found.append(row)
    if not found:
        raise typer.BadParameter("name at least one platform, e.g. debian-12")
    return found


def _addons(value: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    for name in names:
        if name not in ADDON_ORDER:
            raise typer.BadParameter(f"{name} is not an add-on: use {', '.join(ADDON_ORDER)}")
    return names


def _path(value: str) -> str:
    from provision.inputs.values import parse_local_path

    return parse_local_path(value)


def register(app: typer.Typer) -> None:
    bundle_app = typer.Typer(help="An offline bundle: build it, verify it, serve it to the nodes.", no_args_is_help=True)

    @bundle_app.command("build", help=BUILD_HELP)
    def build(
        platforms: Annotated[str, typer.Option("--for", help="Platforms, comma-separated (debian-12,rocky-9).",
                                               show_default=False)],
        out: Annotated[str, typer.Option("--out", "-o", parser=_path, help="The bundle's directory, or FILE.tar.",
                                         show_default=False)],
        gpu: Annotated[bool, typer.Option("--gpu", help="Also the NVIDIA driver, toolkit and device plugin.")] = False,
        addons: Annotated[str | None, typer.Option(
            "--addons", help="Add-ons, comma-separated (default: the settings' addons.enabled).",
            show_default=False)] = None,
        kubernetes: Annotated[str | None, typer.Option(
            "--kubernetes", parser=parse_kubernetes_version, help="Kubernetes minor or release (default: the "
            "settings').", show_default=False)] = None,
        key: Annotated[str | None, typer.Option("--key", parser=_path, help="GnuPG home holding the signing key.",
                                                show_default=False)] = None,
        cache: Annotated[str | None, typer.Option(
            "--cache", parser=_path, help="Keep downloads here by sha256, for later builds (default: inside the "
            "bundle's .build/).", show_default=False)] = None,
        config: ConfigOption = None,
    ) -> None:
        from provision.bundle.build import BuildRequest, build_bundle
        from provision.bundle.manifest import default_key_home
        from provision.cli.console import console
        from provision.inputs.settings import load_settings

        chosen = _platforms(platforms)
        enabled: tuple[AddonName, ...] | None = None
        if addons is not None:
            enabled = tuple(name for name in ADDON_ORDER if name in _addons(addons))
        request = BuildRequest(platforms=tuple(chosen), gpu=gpu, output=Path(out).expanduser().absolute(),
                               key_home=Path(key).expanduser().absolute() if key else default_key_home(),
                               addons=enabled, kubernetes=kubernetes,
                               cache=Path(cache).expanduser().absolute() if cache else None)
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

    @bundle_app.command("verify")
    def verify(
        directory: Annotated[str, typer.Argument(parser=_path, help="The bundle's directory.")],
        key: Annotated[str | None, typer.Option(
            "--key", parser=_path, help="The public key (ASCII-armoured) the bundle must be signed by.",
            show_default=False)] = None,
        fingerprint: Annotated[str | None, typer.Option(
            "--fingerprint", parser=parse_fingerprint, help="The fingerprint of the key it must be signed by.",
            show_default=False)] = None,
        output: OutputOption = Output.text,
    ) -> None:
        """Check a bundle: its signature, then every file the manifest lists (present, same size and sha256), and
        no file it does not list. Each problem is named: missing, changed, extra, bad signature. Exit 2 on any."""
        from provision.bundle.manifest import problem_lines, verify_directory
        from provision.cli.console import console, echo_json

        root = Path(directory).expanduser()
        trusted = None
        if key:
            try:
                trusted = Path(key).expanduser().read_bytes()
            except OSError as exc:
                raise InputError(f"--key {key}: {exc.strerror}: give the bundle's public key file") from None
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

    @bundle_app.command("serve")
    def serve_command(
        directory: Annotated[str, typer.Argument(parser=_path, help="The bundle's directory.")],
        address: Annotated[str, typer.Option("--address", parser=parse_host_address,
                                             help="The address the nodes reach this machine on.")] = "127.0.0.1",
        http_port: Annotated[int, typer.Option("--http-port", parser=parse_port)] = HTTP_PORT,
        registry_port: Annotated[int, typer.Option("--registry-port", parser=parse_port)] = REGISTRY_PORT,
        fingerprint: Annotated[str | None, typer.Option(
            "--fingerprint", parser=parse_fingerprint, help="The fingerprint of the key it must be signed by.",
            show_default=False)] = None,
    ) -> None:
        """Serve a bundle to the nodes until interrupted: its repositories and files over HTTP, its images through
        a read-only registry (docker-registry). It is verified first; one that does not verify is not served."""
        from provision.bundle.manifest import verify_directory
        from provision.bundle.serve import serve
        from provision.cli.console import console

        root = Path(directory).expanduser()
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

    app.add_typer(bundle_app, name="bundle")
