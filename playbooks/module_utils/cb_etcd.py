"""What the etcd roles do on a control plane, in one place: read etcd's configuration (a kubeadm static pod's
manifest, or a systemd unit's environment), ask the local member through etcdctl, take a snapshot and keep the
last N, restore one into a data directory.

Shared by the modules (cb_etcd_probe, cb_etcd_snapshot, cb_etcd_restore) and by the snapshot timer: the etcd_timer
role installs this file on the node and its service runs `python3 cb_etcd.py snapshot CONFIG.json`, so a snapshot
the timer takes is the same as one `bootstrap etcd snapshot` takes. Standard library only. Every path and
command line comes from the caller (Python on the operator's machine decides them once); this file derives only
what etcd's own configuration says (where the local member answers, with which certificates).
"""
from __future__ import annotations

import base64
import contextlib
import datetime
import fcntl
import glob
import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# The version of the report's and the snapshot record's shape: provision/nodes/etcd reads exactly these.
SCHEMA = 1
REPORT_KEY = "cb_etcd"
RECORD_SCHEMA = 1
SNAPSHOT_SUFFIX = ".db"
RECORD_SUFFIX = ".json"
PART_SUFFIX = ".part"
LOCK_NAME = ".lock"
# The static pods a restore stops, etcd last and started first.
CONTROL_PLANE_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
# A snapshot's file name: <cluster>-<UTC time>-r<revision>.db
SNAPSHOT_NAME_RE = re.compile(r"^(?P<cluster>[A-Za-z0-9._-]+)-(?P<time>[0-9]{8}T[0-9]{6}Z)-r(?P<revision>[0-9]+)\.db$")
# etcdctl and etcdutl say what failed on their last line; a line is enough for the report.
ERROR_CHARS = 400


class EtcdError(Exception):
    pass


# --- etcd's configuration -----------------------------------------------------------------------------------------

def flag_of_variable(name: str) -> str | None:
    """etcd reads every flag from ETCD_<FLAG> too: ETCD_INITIAL_CLUSTER -> initial-cluster."""
    if not name.startswith("ETCD_") or name in ("ETCD_UNSUPPORTED_ARCH",):
        return None
    return name[len("ETCD_"):].lower().replace("_", "-")


def parse_environment(text: str) -> dict[str, str]:
    """A systemd EnvironmentFile (or /etc/default file): KEY=VALUE lines, values optionally quoted, comments and
    `export` ignored."""
    found = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export "):].strip()
        key, sep, value = line.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key.strip()):
            continue
        value = value.strip()
        try:
            parts = shlex.split(value) if value else [""]
        except ValueError:
            parts = [value]
        found[key.strip()] = " ".join(parts)
    return found


def parse_arguments(argv: list[str]) -> dict[str, str]:
    """etcd's command-line flags: --name=n1, --name n1, and --flag alone (true)."""
    flags: dict[str, str] = {}
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("-"):
            continue
        key, sep, value = word.lstrip("-").partition("=")
        if not sep:
            if index < len(argv) and not argv[index].startswith("-"):
                value = argv[index]
                index += 1
            else:
                value = "true"
        flags[key] = value
    return flags


def manifest_configuration(text: str) -> tuple[dict[str, str], str | None]:
    """kubeadm's etcd static pod manifest -> (the flags of its `etcd` command, its image). kubeadm writes one
    flag per list item (`- --name=n1`); a YAML parser is not needed for what kubeadm writes, nor available on
    every node."""
    flags: dict[str, str] = {}
    image = None
    for line in text.splitlines():
        item = re.match(r"^\s*-\s+(--[a-z0-9-]+(?:=.*)?)\s*$", line)
        if item:
            flags.update(parse_arguments([_unquote(item.group(1))]))
            continue
        found = re.match(r"^\s*image:\s*(\S+)\s*$", line)
        if found and image is None:
            image = _unquote(found.group(1))
    return flags, image


def _unquote(text: str) -> str:
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'" else text


def parse_systemctl_show(text: str) -> dict[str, list[str]]:
    """`systemctl show -p ...` -> property -> its values (EnvironmentFiles= repeats, one per file)."""
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            found.setdefault(key, []).append(value)
    return found


def unit_configuration(show: dict[str, list[str]], read=None) -> dict[str, str]:
    """A systemd unit's etcd flags: its Environment=, then each EnvironmentFile= in order (a later one wins, as in
    systemd), then the flags in DAEMON_ARGS (Debian's unit passes them on etcd's command line, where they win)."""
    read = read or _read_text
    variables: dict[str, str] = {}
    for assignment in show.get("Environment", []):
        try:
            words = shlex.split(assignment)
        except ValueError:
            words = assignment.split()
        for word in words:
            key, sep, value = word.partition("=")
            if sep:
                variables[key] = value
    for entry in show.get("EnvironmentFiles", []):
        path = entry.split(" (")[0].strip()
        text = read(path) if path else None
        if text is not None:
            variables.update(parse_environment(text))
    flags = {}
    for key, value in variables.items():
        flag = flag_of_variable(key)
        if flag:
            flags[flag] = value
    try:
        flags.update(parse_arguments(shlex.split(variables.get("DAEMON_ARGS", ""))))
    except ValueError:
        pass
    return flags


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def local_client(flags: dict[str, str]) -> dict[str, str | None] | None:
    """Where this member answers its clients, with which credentials: a loopback URL it listens on (kubeadm
    listens on https://127.0.0.1:2379), else the first it advertises; its own server certificate as the client's
    (kubeadm's carries client auth too) and its CA. None when etcd's configuration names no client URL."""
    listen = [u for u in flags.get("listen-client-urls", "").split(",") if u]
    advertised = [u for u in flags.get("advertise-client-urls", "").split(",") if u]
    loopback = [u for u in listen if re.match(r"^https?://(127\.0\.0\.1|localhost|\[::1\])(:|/|$)", u)]
    endpoint = (loopback or advertised or listen or [None])[0]
    if endpoint is None:
        return None
    secure = endpoint.startswith("https://")
    return {"endpoint": endpoint,
            "cacert": flags.get("trusted-ca-file") if secure else None,
            "cert": flags.get("cert-file") if secure else None,
            "key": flags.get("key-file") if secure else None}


def etcdctl_argv(etcdctl: str, client: dict[str, str | None]) -> list[str]:
    argv = [etcdctl, f"--endpoints={client['endpoint']}"]
    for option in ("cacert", "cert", "key"):
        if client.get(option):
            argv.append(f"--{option}={client[option]}")
    return argv


def certificate_sha256(path: str | None) -> str | None:
    """The SHA-256 of the first certificate's DER in a PEM file (the cluster's identity: its etcd CA)."""
    text = _read_text(path) if path else None
    if not text:
        return None
    match = re.search(r"-----BEGIN CERTIFICATE-----(.+?)-----END CERTIFICATE-----", text, re.S)
    if not match:
        return None
    try:
        der = base64.b64decode("".join(match.group(1).split()))
    except ValueError:
        return None
    return hashlib.sha256(der).hexdigest()


# --- running etcdctl and etcdutl ----------------------------------------------------------------------------------

def run(argv: list[str], timeout: float = 60):
    env = dict(os.environ, ETCDCTL_API="3")
    try:
        return subprocess.run(argv, capture_output=True, env=env, timeout=timeout, text=True)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EtcdError(f"{os.path.basename(argv[0])}: {exc}") from None


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    # etcd logs JSON lines; their message is what a person reads.
    try:
        data = json.loads(line)
        if isinstance(data, dict):
            line = " ".join(str(data.get(k)) for k in ("msg", "error") if data.get(k)) or line
    except ValueError:
        pass
    return line[:ERROR_CHARS]


def run_json(argv: list[str], what: str, timeout: float = 60):
    """Run an etcdctl/etcdutl command that writes JSON (`what` names it in errors); its document, or EtcdError
    with its last error line."""
    result = run(argv, timeout)
    if result.returncode != 0:
        error = last_line(result.stderr) or last_line(result.stdout) or f"exit code {result.returncode}"
        raise EtcdError(f"{what} failed: {error}")
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise EtcdError(f"{what} wrote no JSON: {last_line(result.stdout)}") from None


def tool_version(path: str | None) -> str | None:
    """`etcdctl version` / `etcdutl version` / `etcd --version` -> "3.5.16"."""
    if not path:
        return None
    argv = [path, "--version"] if os.path.basename(path) == "etcd" else [path, "version"]
    try:
        result = run(argv, timeout=20)
    except EtcdError:
        return None
    match = re.search(r"[Vv]ersion:\s*v?([0-9]+\.[0-9]+\.[0-9]+)", result.stdout)
    return match.group(1) if match else None


# Kubernetes keeps each Node object under this prefix ("minions", the Node's old name: kubernetes'
# test/integration/etcd/data.go expects /registry/minions/node1).
NODES_PREFIX = "/registry/minions/"


def _status(argv: list[str]):
    answer = run_json([*argv, "endpoint", "status", "-w", "json"], "endpoint status", 30)
    return answer[0]["Status"] if isinstance(answer, list) and answer else None


def _members(argv: list[str]) -> dict:
    answer = run_json([*argv, "member", "list", "-w", "json"], "member list", 30)
    return {"members": [{"id": f"{int(m['ID']):x}", "name": m.get("name", ""),
                         "peer_urls": m.get("peerURLs") or [], "client_urls": m.get("clientURLs") or [],
                         "learner": bool(m.get("isLearner"))} for m in answer.get("members", [])],
            "cluster_id": f"{int(answer['header']['cluster_id']):x}",
            "member_id": f"{int(answer['header']['member_id']):x}"}


def _health(argv: list[str]) -> dict:
    try:
        answer = run_json([*argv, "endpoint", "health", "-w", "json"], "endpoint health", 30)
    except EtcdError as exc:
        # `endpoint health` exits 1 when the member is unhealthy, still writing its JSON on stdout.
        return {"healthy": False, "error": str(exc)}
    entry = answer[0] if isinstance(answer, list) and answer else {}
    return {"healthy": entry.get("health") is True, "error": entry.get("error")}


def member_state(argv: list[str], registry_nodes: bool = False) -> dict:
    """The local member as etcd sees it: `endpoint status`, `member list`, `endpoint health`, how many keys it
    holds and the cluster's alarms, each under its own key; an answer that failed is None, with its error under
    `errors`. With `registry_nodes`, also the Kubernetes Nodes its store holds (a restore judges the API by them).
    The questions are asked at once: each is a process of its own, and a member that does not answer makes each
    wait for its timeout."""
    questions = {"status": _status, "members": _members, "health": _health,
                 "keys": lambda a: count_keys(a, serializable=True), "alarms": alarms}
    if registry_nodes:
        questions["nodes"] = stored_nodes
    with ThreadPoolExecutor(max_workers=len(questions)) as pool:
        futures = {key: pool.submit(ask, argv) for key, ask in questions.items()}
    state: dict = {"status": None, "members": None, "health": None, "keys": None, "nodes": None, "alarms": None,
                   "errors": []}
    for key, future in futures.items():
        try:
            answer = future.result()
        except (EtcdError, KeyError, TypeError, ValueError, IndexError) as exc:
            state["errors"].append(str(exc))
            continue
        if key == "members":
            state.update(answer)
        else:
            state[key] = answer
    if state["status"] is None:
        # A member that gives no status gives no trustworthy count or alarms either.
        state["keys"] = state["alarms"] = state["nodes"] = None
    return state


# etcd's AlarmType (etcdserverpb): etcdctl's JSON writes it as its number.
ALARM_NAMES = {0: "NONE", 1: "NOSPACE", 2: "CORRUPT"}


def alarms(argv: list[str]) -> list[dict]:
    """The cluster's active alarms (`alarm list`): each member (hex id) and its alarm (NOSPACE, CORRUPT)."""
    answer = run_json([*argv, "alarm", "list", "-w", "json"], "alarm list", 30)
    found = []
    for entry in answer.get("alarms") or []:
        kind = entry.get("alarm")
        name = ALARM_NAMES.get(kind, str(kind)) if isinstance(kind, int) else str(kind)
        found.append({"member_id": f"{int(entry['memberID']):x}", "alarm": name})
    return found


def stored_nodes(argv: list[str]) -> list[str]:
    """The names of the Node objects the member's own store holds (a serializable read of their keys)."""
    answer = run_json([*argv, "get", NODES_PREFIX, "--prefix", "--keys-only", "--consistency=s", "-w", "json"],
                      "get", 60)
    names = []
    for entry in answer.get("kvs") or []:
        key = base64.b64decode(entry["key"]).decode("utf-8", "replace")
        if key.startswith(NODES_PREFIX) and "/" not in key[len(NODES_PREFIX):]:
            names.append(key[len(NODES_PREFIX):])
    return sorted(names)


def count_keys(argv: list[str], revision: int | None = None, serializable: bool = False) -> int:
    """How many keys the store holds (at `revision`): a range read of one key reports the whole range's count."""
    extra = [f"--rev={revision}"] if revision else []
    if serializable:
        extra.append("--consistency=s")
    answer = run_json([*argv, "get", "", "--prefix", "--keys-only", "--limit=1", "-w", "json", *extra], "get", 60)
    return int(answer.get("count", 0))


# --- snapshots ----------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _locked(directory: str):
    """The snapshot directory, held: the timer's run and `bootstrap etcd snapshot` never work in it at once."""
    # A snapshot holds every Secret of the cluster: root's alone.
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    with open(os.path.join(directory, LOCK_NAME), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: str, document: dict) -> None:
    part = path + PART_SUFFIX
    with open(part, "w") as handle:
        json.dump(document, handle, indent=2, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(part, 0o600)
    os.replace(part, path)


def snapshot_status(status_argv: list[str], path: str) -> dict:
    """`etcdutl snapshot status FILE -w json` (or etcdctl's, before 3.5) -> hash, revision, totalKey, totalSize."""
    answer = run_json([*status_argv, path, "-w", "json"], "snapshot status", 600)
    return {"hash": int(answer["hash"]), "revision": int(answer["revision"]), "total_key": int(answer["totalKey"]),
            "total_size": int(answer["totalSize"])}


def file_status(status_argv: list[str], path: str) -> dict:
    """A snapshot file on the node as a restore checks it: its size, SHA-256 and `snapshot status`."""
    return {"path": path, "size": os.path.getsize(path), "sha256": _sha256(path),
            "status": snapshot_status(status_argv, path)}


def list_snapshots(directory: str) -> list[dict]:
    """The complete snapshots in `directory` (a .db with its .json record), oldest first."""
    found = []
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        if not SNAPSHOT_NAME_RE.match(name) or name[:-len(SNAPSHOT_SUFFIX)] + RECORD_SUFFIX not in names:
            continue
        text = _read_text(os.path.join(directory, name[:-len(SNAPSHOT_SUFFIX)] + RECORD_SUFFIX))
        try:
            record = json.loads(text or "")
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("name") == name:
            found.append(record)
    return sorted(found, key=lambda r: (str(r.get("taken_at")), str(r.get("name"))))


def clean_leftovers(directory: str) -> list[str]:
    """Remove what a run killed midway left in `directory`: parts, a snapshot without its record, a record without
    its snapshot. Call with the lock held (no run is under way then)."""
    names = os.listdir(directory)
    complete = {r["name"] for r in list_snapshots(directory)}
    removed = []
    for name in names:
        stem = name[:-len(SNAPSHOT_SUFFIX)] if name.endswith(SNAPSHOT_SUFFIX) else (
            name[:-len(RECORD_SUFFIX)] if name.endswith(RECORD_SUFFIX) else None)
        orphan = stem is not None and SNAPSHOT_NAME_RE.match(stem + SNAPSHOT_SUFFIX) and \
            stem + SNAPSHOT_SUFFIX not in complete
        if name.endswith(PART_SUFFIX) or orphan:
            _remove(os.path.join(directory, name), removed)
    return sorted(removed)


def prune(directory: str, cluster: str, keep: int) -> list[str]:
    """Keep the newest `keep` complete snapshots of this cluster, removing older ones (each with its record).
    Call with the lock held."""
    complete = [r["name"] for r in list_snapshots(directory) if r.get("cluster") == cluster]
    removed: list[str] = []
    for name in complete[:-keep] if keep > 0 else complete:
        _remove(os.path.join(directory, name), removed)
        _remove(os.path.join(directory, name[:-len(SNAPSHOT_SUFFIX)] + RECORD_SUFFIX), removed)
    return sorted(removed)


def _remove(path: str, removed: list[str]) -> None:
    try:
        os.remove(path)
        removed.append(os.path.basename(path))
    except OSError:
        pass


def take_snapshot(config: dict) -> dict:
    """Save a snapshot of the local member into config["directory"], check it, record it, keep the last
    config["keep"]. The .db appears under its final name only complete and checked, its record beside it first;
    a run killed midway leaves a .part that the next one removes. Returns the record."""
    directory, cluster = config["directory"], config["cluster"]
    argv = etcdctl_argv(config["etcdctl"], config["client"])
    with _locked(directory):
        clean_leftovers(directory)
        part = os.path.join(directory, f".{cluster}-{os.getpid()}{SNAPSHOT_SUFFIX}{PART_SUFFIX}")
        # datetime.UTC is 3.11's: the nodes run older Pythons (EL9's 3.9).
        taken_at = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
        result = run([*argv, "snapshot", "save", part], timeout=float(config.get("timeout_s", 1800)))
        if result.returncode != 0:
            raise EtcdError(f"etcdctl snapshot save failed: {last_line(result.stderr) or last_line(result.stdout)}")
        os.chmod(part, 0o600)
        status = snapshot_status(config["status_argv"], part)
        state = member_state(argv)
        member = next((m["name"] for m in state.get("members") or [] if m["id"] == state.get("member_id")), None)
        try:
            live_keys = count_keys(argv, revision=status["revision"])
        except EtcdError:
            live_keys = None  # compacted past the snapshot's revision meanwhile: the count is not known
        name = f"{cluster}-{taken_at.strftime('%Y%m%dT%H%M%SZ')}-r{status['revision']}{SNAPSHOT_SUFFIX}"
        record = dict(status, schema=RECORD_SCHEMA, name=name, cluster=cluster,
                      ca_sha256=certificate_sha256(config["client"].get("cacert")),
                      etcd_cluster_id=state.get("cluster_id"), member=member,
                      etcd_version=(state.get("status") or {}).get("version"),
                      members=sorted(m["name"] for m in state.get("members") or [] if m["name"]),
                      taken_at=taken_at.strftime("%Y-%m-%dT%H:%M:%SZ"), size=os.path.getsize(part),
                      sha256=_sha256(part), live_keys=live_keys, node=config.get("node"))
        final = os.path.join(directory, name)
        _write_json(final[:-len(SNAPSHOT_SUFFIX)] + RECORD_SUFFIX, record)
        os.replace(part, final)
        record["removed"] = prune(directory, cluster, int(config["keep"]))
        record["path"] = final
        return record


def disk_free(path: str) -> int | None:
    """Bytes free (to root) on the file system that holds `path`, or its nearest parent that exists."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        stat = os.statvfs(path or "/")
    except OSError:
        return None
    return stat.f_bavail * stat.f_frsize


# --- restore ------------------------------------------------------------------------------------------------------

# A restored data directory carries this file (etcd ignores it, with a warning): which restore wrote it, from which
# snapshot, with which arguments, and what its files were when it was written. Only a directory whose marker
# names this very restore, and whose files are still exactly as the restore left them (etcd has never run on it,
# so nothing was ever written to it), may be removed: it is a copy of the snapshot and nothing else.
RESTORE_MARKER = "cb-restore.json"


def _fingerprint(directory: str) -> list:
    """Every file under `directory` (the marker aside) with its size and modification time: etcd, once started,
    writes its WAL and its database, and the fingerprint changes."""
    found = []
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            if root == directory and name == RESTORE_MARKER:
                continue
            stat = os.lstat(path)
            found.append([os.path.relpath(path, directory), stat.st_size, stat.st_mtime_ns])
    return found


def read_marker(directory: str):
    """The restore marker of a data directory, or None (none, unreadable, or not a marker)."""
    text = _read_text(os.path.join(directory, RESTORE_MARKER))
    try:
        marker = json.loads(text or "")
    except ValueError:
        return None
    return marker if isinstance(marker, dict) else None


def pristine_copy_of(directory: str, restore_id: str, arguments: str) -> bool:
    """Whether `directory` is what this restore (`restore_id`, these arguments) wrote and etcd never ran on."""
    marker = read_marker(directory)
    return (marker is not None and marker.get("restore_id") == restore_id and marker.get("arguments") == arguments
            and marker.get("files") == _fingerprint(directory))


def fresh_name(base: str) -> str:
    """`base`, or `base.2`, `base.3`, ... : the first name nothing holds (nothing is ever overwritten)."""
    if not os.path.lexists(base):
        return base
    number = 2
    while os.path.lexists(f"{base}.{number}"):
        number += 1
    return f"{base}.{number}"


def restore_arguments(config: dict) -> str:
    """What makes two restores write the same directory: the snapshot's SHA-256 and the member's arguments."""
    keys = ("sha256", "name", "initial_cluster", "token", "peer_urls", "bump_revision", "uid", "gid")
    return json.dumps({key: config.get(key) for key in keys}, sort_keys=True)


def restore_data_dir(config: dict) -> dict:
    """Restore a snapshot into etcd's data directory, re-runnable after a kill at any point, deleting nothing that
    etcd ever served.

    The snapshot is restored into <data dir>.cb-restoring-<id> (a directory of that name is this restore's own
    scratch, left by a killed run, and is removed first); the restore marker is written into it. Then the data
    directory in place is moved aside under a fresh name, <data dir>.cb-before-<id> (or .2, .3, ... when that is
    taken), unless it is this restore's own pristine copy (its marker names this restore and these arguments, and
    its files are as the restore wrote them): then it is already what this run would write, and is kept as it is.
    The restored directory, owned by etcd's user, takes its place. Data from before the restore stays aside until
    the operator removes it."""
    data_dir, restore_id = config["data_dir"].rstrip("/"), config["restore_id"]
    arguments = restore_arguments(config)
    if os.path.isdir(data_dir) and not os.path.islink(data_dir) and pristine_copy_of(data_dir, restore_id, arguments):
        return {"data_dir": data_dir, "moved_aside": None, "restored": False, "relabeled": False}
    work = f"{data_dir}.cb-restoring-{restore_id}"
    if os.path.lexists(work):
        shutil.rmtree(work)
    argv = [*config["restore_argv"], config["snapshot"], f"--data-dir={work}", f"--name={config['name']}",
            f"--initial-cluster={config['initial_cluster']}", f"--initial-cluster-token={config['token']}",
            f"--initial-advertise-peer-urls={config['peer_urls']}"]
    if config.get("bump_revision"):
        argv += [f"--bump-revision={int(config['bump_revision'])}", "--mark-compacted"]
    result = run(argv, timeout=float(config.get("timeout_s", 1800)))
    if result.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
        raise EtcdError(f"snapshot restore failed: {last_line(result.stderr) or last_line(result.stdout)}")
    os.chmod(work, 0o700)
    uid, gid = int(config.get("uid", 0)), int(config.get("gid", 0))
    for root, dirs, files in os.walk(work):
        for entry in [root] + [os.path.join(root, d) for d in dirs] + [os.path.join(root, f) for f in files]:
            os.lchown(entry, uid, gid)
    marker = {"restore_id": restore_id, "arguments": arguments, "snapshot": config.get("snapshot"),
              "files": _fingerprint(work)}
    _write_json(os.path.join(work, RESTORE_MARKER), marker)
    os.lchown(os.path.join(work, RESTORE_MARKER), uid, gid)
    moved_aside = None
    if os.path.lexists(data_dir):
        moved_aside = fresh_name(f"{data_dir}.cb-before-{restore_id}")
        os.rename(data_dir, moved_aside)
    os.rename(work, data_dir)
    return {"data_dir": data_dir, "moved_aside": moved_aside, "restored": True, "relabeled": relabel(data_dir)}


def relabel(path: str) -> bool:
    """Where SELinux is on (enforcing or permissive), give `path` the label its policy names for it: the restored
    directory was made beside the data directory and renamed, keeping the label of its parent, not etcd's."""
    enabled = shutil.which("selinuxenabled")
    restorecon = shutil.which("restorecon")
    if not enabled or not restorecon or run([enabled], timeout=30).returncode != 0:
        return False
    result = run([restorecon, "-R", path], timeout=600)
    if result.returncode != 0:
        raise EtcdError(f"restorecon -R {path} failed: {last_line(result.stderr) or last_line(result.stdout)}")
    return True


# --- maintenance: defragmentation and the space alarm -------------------------------------------------------------

def _status_of(argv: list[str], endpoint: str) -> dict:
    answer = run_json([*argv, f"--endpoints={endpoint}", "endpoint", "status", "-w", "json"], "endpoint status", 30)
    return answer[0]["Status"] if isinstance(answer, list) and answer else {}


def defragment(config: dict) -> dict:
    """Defragment each member in the order given (the leader last: a member answers nothing while it is
    defragmented), through one member's etcdctl; where NOSPACE is raised, compact to the current revision first
    (etcd's own recovery: compact, defragment, disarm) and disarm the alarm once every member's database is under
    the quota again. Returns each member's database size before and after, and whether the alarm was disarmed."""
    argv = [word for word in config["etcdctl"] if not word.startswith("--endpoints=")]
    quota = int(config["quota_bytes"])
    local = [*argv, f"--endpoints={config['endpoints'][-1]}"]
    raised = [a["alarm"] for a in alarms(local)]
    compacted = None
    if "NOSPACE" in raised:
        revision = int(_status_of(argv, config["endpoints"][-1])["header"]["revision"])
        result = run([*local, "compact", str(revision), "--physical"], timeout=600)
        if result.returncode != 0 and "required revision has been compacted" not in result.stderr:
            raise EtcdError(f"compact {revision} failed: {last_line(result.stderr) or last_line(result.stdout)}")
        compacted = revision
    members = []
    for endpoint in config["endpoints"]:
        before = _status_of(argv, endpoint).get("dbSize")
        result = run([*argv, f"--endpoints={endpoint}", "defrag", f"--command-timeout={int(config['timeout_s'])}s"],
                     timeout=float(config["timeout_s"]) + 30)
        if result.returncode != 0:
            raise EtcdError(f"defrag of {endpoint} failed: {last_line(result.stderr) or last_line(result.stdout)}")
        after = _status_of(argv, endpoint).get("dbSize")
        members.append({"endpoint": endpoint, "before": before, "after": after})
    disarmed = False
    if "NOSPACE" in raised and all(m["after"] is not None and int(m["after"]) < quota for m in members):
        result = run([*local, "alarm", "disarm"], timeout=60)
        if result.returncode != 0:
            raise EtcdError(f"alarm disarm failed: {last_line(result.stderr) or last_line(result.stdout)}")
        disarmed = True
    return {"members": members, "compacted": compacted, "alarms": raised, "disarmed": disarmed}


# --- the probe: a control plane's etcd as one document --------------------------------------------------------------

IMAGE_VERSION_RE = re.compile(r":v?([0-9]+\.[0-9]+\.[0-9]+)(?:[-+][0-9A-Za-z.-]*)?(?:@sha256:[0-9a-f]{64})?$")


def systemctl_show(unit: str, properties: list[str]) -> dict[str, list[str]]:
    try:
        result = run(["systemctl", "show", unit] + ["--property=" + p for p in properties], timeout=30)
    except EtcdError:
        return {}
    return parse_systemctl_show(result.stdout) if result.returncode == 0 else {}


def first(show: dict[str, list[str]], key: str) -> str:
    return (show.get(key) or [""])[-1]


def static_pod_running() -> bool | None:
    """Whether the kubelet runs an etcd container (crictl), None when crictl cannot tell."""
    if not shutil.which("crictl"):
        return None
    try:
        result = run(["crictl", "ps", "--name", "^etcd$", "--state", "running", "-q"], timeout=30)
    except EtcdError:
        return None
    return bool(result.stdout.strip()) if result.returncode == 0 else None


def tools_for(kind: str, version: str | None, tools_dir: str) -> dict[str, str | None]:
    """etcdctl and etcdutl: for a static pod, those copied out of its image (tools_dir/<version>/), else those on
    PATH (Debian's etcd-client and etcd-server, kubespray's /usr/local/bin)."""
    found: dict[str, str | None] = {}
    for tool in ("etcdctl", "etcdutl"):
        copied = os.path.join(tools_dir, version or "-", tool)
        on_path = shutil.which(tool) or next((p for p in ("/usr/local/bin/" + tool, "/usr/bin/" + tool)
                                              if os.access(p, os.X_OK)), None)
        found[tool] = copied if kind == "static_pod" and os.access(copied, os.X_OK) else on_path
    return found


def restore_bumps(etcdutl: str | None) -> bool:
    """Whether this etcdutl can raise the revision on restore (--bump-revision, --mark-compacted)."""
    if not etcdutl:
        return False
    try:
        result = run([etcdutl, "snapshot", "restore", "--help"], timeout=20)
    except EtcdError:
        return False
    return "--bump-revision" in result.stdout + result.stderr and "--mark-compacted" in result.stdout + result.stderr


def data_dir_facts(path: str | None) -> dict:
    facts: dict = {"path": path, "exists": False, "member": False, "uid": None, "gid": None, "db_bytes": None}
    if not path:
        return facts
    try:
        stat = os.stat(path)
    except OSError:
        return facts
    facts.update(exists=True, uid=stat.st_uid, gid=stat.st_gid, member=os.path.isdir(os.path.join(path, "member")))
    try:
        facts["db_bytes"] = os.path.getsize(os.path.join(path, "member", "snap", "db"))
    except OSError:
        pass
    return facts


def probe(params: dict) -> dict:
    """A control plane's etcd as one document (the cb_etcd_probe module's, and the doctor's over SSH): how etcd
    runs here, its configuration, tools, what the local member answers, its data directory and room, the node's
    snapshots and the timer. Only reads."""
    manifests_dir, stopped_dir = params["manifests_dir"], params["stopped_dir"]
    report: dict = {"schema": SCHEMA, "python": sys.executable, "kind": "none", "source": None, "flags": {},
                    "image": None, "version": None, "running": False, "user": "root", "errors": [],
                    "manifests": {"active": [p for p in CONTROL_PLANE_PODS
                                             if os.path.exists(os.path.join(manifests_dir, p + ".yaml"))],
                                  "stopped": [p for p in CONTROL_PLANE_PODS
                                              if os.path.exists(os.path.join(stopped_dir, p + ".yaml"))]}}
    manifest = next((p for p in (os.path.join(manifests_dir, "etcd.yaml"), os.path.join(stopped_dir, "etcd.yaml"))
                     if os.path.exists(p)), None)
    if manifest:
        with open(manifest, encoding="utf-8", errors="replace") as handle:
            flags, image = manifest_configuration(handle.read())
        match = IMAGE_VERSION_RE.search(image or "")
        report.update(kind="static_pod", source=manifest, flags=flags, image=image,
                      version=match.group(1) if match else None)
        running = static_pod_running()
        report["running"] = bool(running) if running is not None else "etcd" in report["manifests"]["active"]
    else:
        show = systemctl_show(params["unit"], ["LoadState", "ActiveState", "User", "Environment",
                                               "EnvironmentFiles", "FragmentPath"])
        if first(show, "LoadState") == "loaded":
            etcd = shutil.which("etcd")
            report.update(kind="systemd", source=first(show, "FragmentPath") or params["unit"],
                          flags=unit_configuration(show), running=first(show, "ActiveState") in ("active", "reloading"),
                          user=first(show, "User") or "root", version=tool_version(etcd))
    tools = tools_for(report["kind"], report["version"], params["tools_dir"])
    with ThreadPoolExecutor(max_workers=3) as pool:  # three processes of their own, at once
        versions = [pool.submit(tool_version, tools["etcdctl"]), pool.submit(tool_version, tools["etcdutl"]),
                    pool.submit(restore_bumps, tools["etcdutl"])]
    report["tools"] = dict(tools, etcdctl_version=versions[0].result(), etcdutl_version=versions[1].result(),
                           restore_bumps=versions[2].result())
    try:
        account = pwd.getpwnam(report["user"])
        report["user_ids"] = {"uid": account.pw_uid, "gid": account.pw_gid}
    except KeyError:
        report["user_ids"] = None
    client = local_client(report["flags"])
    report["client"] = client
    report["etcdctl"] = etcdctl_argv(tools["etcdctl"], client) if tools["etcdctl"] and client else None
    report["member"] = None
    if params["ask"] and report["running"] and report["etcdctl"]:
        report["member"] = member_state(report["etcdctl"], registry_nodes=params["nodes"])
    report["ca_sha256"] = certificate_sha256(report["flags"].get("trusted-ca-file"))
    data_dir = report["flags"].get("data-dir")
    report["data_dir"] = data_dir_facts(data_dir)
    # Data directories a restore (.cb-before-<id>) or a replace (.cb-replaced-<id>) kept aside.
    report["backups"] = sorted(glob.glob(glob.escape(data_dir.rstrip("/")) + ".cb-*")) if data_dir else []
    report["free_bytes"] = {"data_dir": disk_free(os.path.dirname(data_dir.rstrip("/"))) if data_dir else None,
                            "snapshot_dir": disk_free(params["snapshot_dir"])}
    report["snapshots"] = list_snapshots(params["snapshot_dir"])
    timer = systemctl_show(params["timer_unit"], ["LoadState", "UnitFileState", "ActiveState"])
    service = systemctl_show(params["timer_unit"].replace(".timer", ".service"), ["Result", "ExecMainExitTimestamp"])
    report["timer"] = {"installed": first(timer, "LoadState") == "loaded",
                       "enabled": first(timer, "UnitFileState") == "enabled",
                       "active": first(timer, "ActiveState") == "active",
                       "last_result": first(service, "Result") or None,
                       "last_run": first(service, "ExecMainExitTimestamp") or None}
    return report


# --- the timer's entry point --------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "probe":
        # The doctor's read of etcd over SSH: the same document as the cb_etcd_probe module's, on one line.
        sys.stdout.write(json.dumps({REPORT_KEY: probe(json.loads(argv[2]))}) + "\n")
        return 0
    if len(argv) != 3 or argv[1] != "snapshot":
        sys.stderr.write(f"usage: {argv[0]} snapshot CONFIG.json | probe PARAMETERS\n")
        return 2
    with open(argv[2]) as handle:
        config = json.load(handle)
    try:
        record = take_snapshot(config)
    except (EtcdError, OSError, KeyError, ValueError) as exc:
        sys.stderr.write(f"etcd snapshot failed: {exc}\n")
        return 1
    sys.stdout.write(f"saved {record['path']} (revision {record['revision']}, {record['total_key']} keys, "
                     f"{record['size']} bytes)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
