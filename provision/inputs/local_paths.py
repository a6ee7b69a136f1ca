"""Paths on this machine that a command-line option names, judged before anything is read, written or connected.

Every path option has a role, and each role is one function here (`text -> Path`, ValueError with one line): the
spelling first, the same for every role, then what the role needs of the place.

- Spelling (`spelling_problem`): one line, no control characters (C0, DEL, C1, line separators, the surrogates an
  undecodable file name becomes), at most 4096 characters and 255 bytes a component, and nothing a shell or Python
  would have expanded: `$VAR`, `${VAR}`, `$(cmd)`, `` `cmd` ``, a `*` or `?` glob the shell left as it was, a `~`
  anywhere but at the start, a `~user` with no such user. A leading `~` is expanded, as the shell would.
- `input_file`, `input_directory`: something to read (the reader that opens it bounds it and names it).
- `output_directory`: a folder a command fills: new, or empty, or one this tool filled before (a mark the caller
  names, so a re-run resumes), never a file, a system directory, a home directory or a place the kernel makes up.
- `store_directory`: a folder a command keeps files of its own in among others (snapshots, a download cache, a
  GnuPG home): new or existing, never a file or a system directory.
- `new_file`: a file a command creates and never overwrites, in a folder that exists.
- `working_directory`: an existing folder a command writes named files into (`bootstrap init --dir`).

A symbolic link is followed and its target judged: a link into /etc is /etc. Nothing here creates anything.
Imports are the standard library's and shapes.py's only: the command line's parsers run before anything heavy.
"""
from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable
from pathlib import Path

from provision.inputs.shapes import SYSTEM_DIRECTORIES, SYSTEM_TREES, _shape

LOCAL_PATH = _shape("a path", r"[^\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]+",
                    "one line without control characters", "~/clusters/lab", max_length=4096)
parse_local_path = LOCAL_PATH.parse
# Linux's NAME_MAX: a longer component is refused by the kernel itself, after work has begun.
MAX_COMPONENT_BYTES = 255
# Where this machine keeps what Linux makes up as it is read (writing there fails, or changes the kernel).
VIRTUAL_FILE_SYSTEMS = ("/proc", "/sys", "/dev")
# What a command of this tool may not fill or keep files in on this machine: the system's own trees (the nodes'
# list less the homes, where a user's own folders live) and the directories that only hold others.
LOCAL_SYSTEM_TREES = tuple(tree for tree in SYSTEM_TREES if tree not in ("/home", "/root"))
LOCAL_SYSTEM_DIRECTORIES = (*SYSTEM_DIRECTORIES, "/home", "/root")
# What a shell (or Python's os.path.expandvars) would have replaced: left in, the user meant something else.
_EXPANDED = re.compile(r"[$`*?]")


def spelling_problem(text: str) -> str | None:
    """Why `text` is not a path this tool takes as written, or None."""
    problem = LOCAL_PATH.problem(text)
    if problem:
        return problem
    found = _EXPANDED.search(text)
    if found:
        return (f"{_shown(text)} has {found.group()!r}, which a shell would have expanded ($VAR, `cmd`, a * or ? "
                "pattern): write the path itself")
    parts = text.split("/")
    if any(part.startswith("~") for part in parts[1:]):
        return f"{_shown(text)} has a '~' inside it, which only a leading one expands: write the path itself"
    if parts[0].startswith("~") and parts[0] != "~":
        try:
            pwd.getpwnam(parts[0][1:])
        except KeyError:
            return f"{_shown(text)} starts with {parts[0]!r}, and there is no such user: write the path itself"
    long = next((part for part in parts if len(part.encode("utf-8", "surrogatepass")) > MAX_COMPONENT_BYTES), None)
    if long is not None:
        return f"{_shown(text)} has a component longer than {MAX_COMPONENT_BYTES} bytes, which no file system takes"
    return None


def _shown(text: str) -> str:
    from provision.inputs.files import shown

    return shown(text)


def _spelled(text: str) -> Path:
    problem = spelling_problem(text)
    if problem:
        raise ValueError(problem)
    return Path(os.path.normpath(Path(text).expanduser().absolute()))


def _resolved(path: Path) -> Path:
    """Where writing at `path` lands: symbolic links followed (a path that does not exist yet below its deepest
    existing folder)."""
    return Path(os.path.realpath(path))


def _inside(path: Path, trees: tuple[str, ...]) -> str | None:
    text = str(path)
    return next((tree for tree in trees if text == tree or text.startswith(f"{tree}/")), None)


def _home_directories() -> set[str]:
    homes = {str(Path.home())}
    try:
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        pass
    return homes


def place_problem(path: Path, *, keeps_others: bool = False) -> str | None:
    """Why this tool may not fill (or, `keeps_others`, keep files in) the folder `path`: under a virtual file
    system, a system directory or inside one, a home directory itself; judged where links lead. None if it may."""
    target = _resolved(path)
    where = "" if target == path else f" (it leads to {target})"
    virtual = _inside(target, VIRTUAL_FILE_SYSTEMS)
    if virtual:
        return f"{path}{where} is under {virtual}, which the kernel makes up: name a folder on a disk"
    tree = _inside(target, LOCAL_SYSTEM_TREES)
    if tree:
        return f"{path}{where} is inside the system directory {tree}: name a folder of its own, e.g. ~/cluster-files"
    text = str(target)
    if text in LOCAL_SYSTEM_DIRECTORIES or any(d.startswith(f"{text}/") for d in (*LOCAL_SYSTEM_DIRECTORIES,
                                                                                 *LOCAL_SYSTEM_TREES)):
        return f"{path}{where} is the system directory {text}: name a folder of its own inside it"
    if text in _home_directories() or (not keeps_others and str(target.parent) == "/home"):
        return f"{path}{where} is a home directory: name a folder of its own inside it"
    return None


def _writable_problem(path: Path, folder: str = "a folder") -> str | None:
    """Why this user cannot create `path` (or write in it): the deepest part that exists must be a folder it
    writes in."""
    try:
        existing = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    except OSError as exc:
        return f"{path} cannot be checked ({exc.strerror})"
    if not existing.is_dir():
        return f"{path}: {existing} exists and is not {folder}"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{path}: {existing} is not writable by this user"
    return None


def creatable_directory_problem(path: Path) -> str | None:
    """Why `path` cannot be (or become) a directory this user writes in, or None. Nothing is created."""
    virtual = _inside(path, VIRTUAL_FILE_SYSTEMS)
    if virtual:
        return f"{path} is under {virtual}, which the kernel makes up: name a directory on a disk"
    return _writable_problem(path, "a directory")


# --- the roles ---------------------------------------------------------------------------------------------------

def input_file(text: str) -> Path:
    """A file to read: its spelling (the reader bounds it, and names it when it is missing or not a file); the path
    as written, for the messages and the commands printed that name it."""
    _spelled(text)
    return Path(text)


def input_directory(text: str) -> Path:
    """A folder that exists, to read."""
    path = _spelled(text)
    if not path.is_dir():
        raise ValueError(f"{path} is not a folder: name an existing one" if path.exists() or path.is_symlink()
                         else f"{path} does not exist: name an existing folder")
    return path


def output_directory(text: str, *, own_mark: str | None = None) -> Path:
    """A folder a command fills: new, or empty, or holding `own_mark` (what this tool left there before)."""
    path = _spelled(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file: name a folder (new, or empty)")
    problem = place_problem(path) or _writable_problem(path)
    if problem:
        raise ValueError(problem)
    if path.is_dir():
        try:
            entries = {entry.name for entry in os.scandir(path)}
        except OSError as exc:
            raise ValueError(f"{path} cannot be read ({exc.strerror})") from None
        if entries and not (own_mark and own_mark in entries):
            raise ValueError(f"{path} is a folder with files in it ({len(entries)}) that this tool did not put "
                             "there: name a new or empty folder")
    return path


def store_directory(text: str) -> Path:
    """A folder a command keeps files of its own in, among others: new or existing, on a disk, not the system's."""
    path = _spelled(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file: name a folder (it is created if it does not exist)")
    problem = place_problem(path, keeps_others=True) or _writable_problem(path)
    if problem:
        raise ValueError(problem)
    return path


def new_file(text: str) -> Path:
    """A file a command creates, never over one that exists, in a folder that exists."""
    path = _spelled(text)
    if path.exists() or path.is_symlink():
        raise ValueError(f"{path} exists: it is never overwritten; name a new file")
    if not path.parent.is_dir():
        raise ValueError(f"{path.parent} is not an existing folder: name a file in one")
    problem = place_problem(path.parent, keeps_others=True) or _writable_problem(path.parent)
    if problem:
        raise ValueError(problem)
    return path


def working_directory(text: str) -> Path:
    """An existing folder this user writes named files into; the path as written (the commands printed that name
    the files in it say it as the user did)."""
    path = _spelled(text)
    if not path.is_dir():
        raise ValueError(f"{path} is not an existing folder: pass one")
    problem = place_problem(path, keeps_others=True) or _writable_problem(path)
    if problem:
        raise ValueError(problem)
    return Path(text).expanduser()


def directory_path(text: str) -> Path:
    """A folder that may not exist yet (read when it does): its spelling, and not a file."""
    path = _spelled(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file: name a folder")
    return path


ROLES: dict[str, Callable[[str], Path]] = {
    "input_file": input_file, "input_directory": input_directory, "output_directory": output_directory,
    "store_directory": store_directory, "new_file": new_file, "working_directory": working_directory,
    "directory_path": directory_path,
}
