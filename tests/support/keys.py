"""A file that passes for a private key where only its shape is read (no connection is made with it)."""
from __future__ import annotations

from pathlib import Path

PRIVATE_KEY_TEXT = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
                    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
                    "-----END OPENSSH PRIVATE KEY-----\n")


def write_private_key(path: Path) -> Path:
    """A private key as OpenSSH wants it: the right header, readable by its owner only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(PRIVATE_KEY_TEXT)
    path.chmod(0o600)
    return path
