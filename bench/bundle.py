"""Benchmark: `bootstrap bundle build`'s size per OS family, with and without --gpu, and its time on this machine.

    .venv-modern/bin/python -m bench.bundle                          # debian-12 and rocky-9, without and with --gpu
    .venv-modern/bin/python -m bench.bundle --cases debian-12 rocky-9:gpu --cold

Each case is one build (provision/bundle/build.py, as the CLI runs it) into a fresh directory, from the same
upstreams the build tests use (tests/lab/upstream.py): Debian's archive for real (real packages, real
sizes), Docker's containerd.io, Kubernetes' packages, NVIDIA's and the images from small stand-ins, Rocky Linux 9
from the lab's RPM tree (stand-ins too): only the Debian OS part is a real size. Downloads are kept by sha256 in
the build tests' store (a warm build copies from it); --cold gives each case a store of its own (everything is
downloaded again: Debian's archive through this machine's network). A case whose upstream has no stand-in (the
NVIDIA repository for Debian) is reported with the build's own error line. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import yaml

from provision.bundle.build import BuildRequest, build_bundle
from provision.errors import BootstrapError
from provision.inputs.platforms import Platform, platform_named
from provision.inputs.settings import load_settings
from tests.lab.upstream import STORE, serve_upstream

CASES = ("debian-12", "debian-12:gpu", "rocky-9", "rocky-9:gpu")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), help="platform[:gpu] ...")
    parser.add_argument("--cold", action="store_true", help="an empty download store for each case")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-bundle-") as tmp:
        work = Path(tmp)
        with serve_upstream(work / "upstream") as upstream:
            config = work / "cluster.yaml"
            config.write_text(yaml.safe_dump(upstream.settings()))
            settings = load_settings(config)
            for case in args.cases:
                key, _, gpu = case.partition(":")
                platform = platform_named(key)
                if not isinstance(platform, Platform):
                    parser.error(f"{key} is not a platform a bundle is built for")
                request = BuildRequest(platforms=(platform,), gpu=gpu == "gpu", output=work / case.replace(":", "-"),
                                       key_home=work / "gnupg",
                                       cache=work / f"store-{case}" if args.cold else STORE)
                started = time.monotonic()
                try:
                    result = build_bundle(settings, request)
                except BootstrapError as exc:
                    rows.append(f"| {key} | {'yes' if gpu else 'no'} | not built: {exc} | | | |")
                    continue
                parts = ", ".join(f"{part}/ {size / 1e6:.1f}" for part, size in sorted(result.sizes.items()))
                rows.append(f"| {key} | {'yes' if gpu else 'no'} | {result.size / 1e6:.1f} MB | {parts} | "
                            f"{result.downloaded / 1e6:.1f} MB | {time.monotonic() - started:.0f} s |")
    print("| platform | --gpu | bundle | parts (MB) | downloaded | build time |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
