"""A stand-in for Ubuntu's archive, for the Ubuntu-shaped lab nodes (flavours ubuntu2204, ubuntu2404).

Ubuntu's archive cannot be reached here, and an Ubuntu-shaped node is Debian bookworm underneath: its stand-in
archive is Debian bookworm's packages published in Ubuntu's layout, as a mirror of archive.ubuntu.com lays it out
(what `mirrors.os_repo` names, with /ubuntu appended by os_prep):

    ubuntu/dists/<codename>{,-updates,-backports,-security}/{main,restricted,universe,multiverse}/binary-amd64/

main of <codename> is bookworm's main, of -updates bookworm-updates', of -security bookworm-security's; the other
components and -backports are empty. Each suite's Release names Ubuntu's suite and codename and is signed by a
throwaway key (the node must trust it, as it would a local mirror's re-signed archive). The packages themselves
are Debian's, unchanged: the index keeps their pool paths, and the server answers a pool path with a redirect to
deb.debian.org (or debian-security), which the lab's nodes reach. So `apt-get update` reads Ubuntu's suite names
and components for real, and what installs is what a bookworm node would install.

Run on this host: `build_ubuntu_archive` (Debian's indexes downloaded once into the lab's cache). In the hub:
`python ubuntu_archive.py ADDRESS PORT ROOT` (Lab.serve_in_hub).
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import lzma
import shutil
import sys
import urllib.request
from email.utils import formatdate
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the hub runs this file as a script, without the tests package on its path
    from tests.lab.repos import SigningKey

COMPONENTS = ("main", "restricted", "universe", "multiverse")
DEBIAN = "http://deb.debian.org"
# Ubuntu's suite (after the codename) -> the Debian archive and suite whose main it carries (None: empty).
SUITES: dict[str, tuple[str, str] | None] = {
    "": ("debian", "bookworm"), "-updates": ("debian", "bookworm-updates"), "-backports": None,
    "-security": ("debian-security", "bookworm-security")}
# Debian's pool paths: the security archive's are under pool/updates/ (bookworm-security's Filename fields).
SECURITY_POOL = "pool/updates/"


def _debian_index(cache: Path, archive: str, suite: str) -> bytes:
    """main/binary-amd64/Packages.xz of a Debian suite, downloaded once into `cache` (its signature is not
    checked here: the lab re-signs what it publishes, and apt on the node checks each package's hash)."""
    path = cache / f"{archive}-{suite}-main-amd64-Packages.xz"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        url = f"{DEBIAN}/{archive}/dists/{suite}/main/binary-amd64/Packages.xz"
        with urllib.request.urlopen(url, timeout=300) as response, path.with_suffix(".part").open("wb") as out:
            shutil.copyfileobj(response, out)
        path.with_suffix(".part").rename(path)
    return path.read_bytes()


def build_ubuntu_archive(dest: Path, codename: str, key: SigningKey, cache: Path) -> Path:
    """Write `dest/ubuntu/dists/...` for `codename` (jammy, noble), every Release signed by `key`; returns `dest`."""
    for suffix, source in SUITES.items():
        suite = codename + suffix
        dists = dest / "ubuntu" / "dists" / suite
        files: list[str] = []
        for component in COMPONENTS:
            packed = _debian_index(cache, *source) if source and component == "main" else lzma.compress(b"")
            binary = dists / component / "binary-amd64"
            binary.mkdir(parents=True, exist_ok=True)
            (binary / "Packages.xz").write_bytes(packed)
            files.append(f"{component}/binary-amd64/Packages.xz")
        lines = ["Origin: Ubuntu", "Label: Ubuntu", f"Suite: {suite}", "Version: stand-in", f"Codename: {codename}",
                 f"Date: {formatdate(usegmt=True)}", "Architectures: amd64", f"Components: {' '.join(COMPONENTS)}",
                 "Description: Debian bookworm in Ubuntu's layout (cluster-bootstrap lab stand-in)", "SHA256:"]
        for name in files:
            packed = (dists / name).read_bytes()
            # apt checks the index it unpacks against the plain file's entry, as Ubuntu's Release lists both.
            for data, listed in ((packed, name), (lzma.decompress(packed), name.removesuffix(".xz"))):
                lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data)} {listed}")
        (dists / "Release").write_text("\n".join(lines) + "\n")
        key.run("--clearsign", "--output", str(dists / "InRelease"), str(dists / "Release"))
        key.detach_sign(dists / "Release", ".gpg")
    for path in [dest, *dest.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return dest


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The indexes from the directory; a pool path redirected to Debian's archive, where the package is."""

    def do_GET(self) -> None:
        path = self.path.lstrip("/")
        if path.startswith("ubuntu/pool/"):
            pool = path[len("ubuntu/"):]
            archive = "debian-security" if pool.startswith(SECURITY_POOL) else "debian"
            self.send_response(302)
            self.send_header("Location", f"{DEBIAN}/{archive}/{pool}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.command} {self.path} {args[1] if len(args) > 1 else ''}\n")


class _Server(http.server.ThreadingHTTPServer):
    def server_bind(self) -> None:  # no reverse lookup of the address (no DNS in the hub)
        import socketserver

        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])


if __name__ == "__main__":
    address, port, root = sys.argv[1:4]
    _Server((address, int(port)), functools.partial(_Handler, directory=root)).serve_forever()
