"""A bundle's folder read as a closed world: regular files only, every one of them inside it.

The walk never follows a link: a symbolic link (whatever it points at), a device, a named pipe or a socket is a
problem by name, and so is a hard link that has a name outside the bundle (its content is whatever that other name
is given later). A build's hard links from its own store (`.build/store`, inside the bundle) are the bundle's own.
The walk is bounded in depth and in entries, so a folder made to be walked for ever is refused quickly. Sizes come
from the same lstat; hashing is the caller's, after the cheap checks.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from provision.inputs.files import file_kind

MAX_DEPTH = 64
# A bundle of every platform with the GPU stack holds about 20,000 files; its build store as many again.
MAX_ENTRIES = 500_000


@dataclass(frozen=True)
class Tree:
    """The regular files under a bundle's root by their path relative to it (their sizes), the build's state
    aside, and what the walk refused."""

    files: dict[str, int]
    problems: tuple[str, ...]


def walk(root: str, skip: frozenset[str] = frozenset()) -> Tree:
    """Every entry under `root` by lstat (no link followed). Top-level names in `skip` (the build's state, the
    manifest's own files) are walked for their hard links but not listed."""
    files: dict[str, int] = {}
    problems: list[str] = []
    inside: dict[tuple[int, int], int] = {}
    linked: dict[str, tuple[tuple[int, int], int]] = {}
    stack: list[tuple[str, int, bool]] = [("", 0, True)]
    seen = 0
    while stack:
        relative, depth, listing = stack.pop()
        if depth > MAX_DEPTH:
            problems.append(f"too deep: {relative} (folders nested past {MAX_DEPTH})")
            continue
        try:
            entries = sorted(os.scandir(os.path.join(root, relative) if relative else root), key=lambda e: e.name)
        except OSError as exc:
            problems.append(f"unreadable: {relative or '.'} ({exc.strerror})")
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return Tree(files, (*problems, f"too many files: more than {MAX_ENTRIES} entries"))
            name = f"{relative}/{entry.name}" if relative else entry.name
            listed = listing and not (depth == 0 and entry.name in skip)
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError as exc:
                problems.append(f"unreadable: {name} ({exc.strerror})")
                continue
            if not listed and not stat.S_ISDIR(info.st_mode) and not stat.S_ISREG(info.st_mode):
                continue  # the build's own state: not served, and not part of the bundle
            if stat.S_ISLNK(info.st_mode):
                problems.append(f"link: {name} (a symbolic link: a bundle holds files only)")
            elif stat.S_ISDIR(info.st_mode):
                stack.append((name, depth + 1, listed))
            elif not stat.S_ISREG(info.st_mode):
                problems.append(f"not a file: {name} ({file_kind(info.st_mode)})")
            else:
                key = (info.st_dev, info.st_ino)
                inside[key] = inside.get(key, 0) + 1
                if listed:
                    files[name] = info.st_size
                    if info.st_nlink > 1:
                        linked[name] = (key, info.st_nlink)
    for name, (key, names) in sorted(linked.items()):
        if names > inside[key]:
            problems.append(f"hard link: {name} (it has {names - inside[key]} name(s) outside the bundle, whose "
                            "content it shares)")
    return Tree(files, tuple(problems))
