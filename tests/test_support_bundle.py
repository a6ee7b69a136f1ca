"""`bootstrap support-bundle` as a user runs it: one archive from the API (a stand-in server answering what a
cluster would, known secrets planted in every object, event and log it serves), from this machine (inputs, state,
run logs, each with secrets planted) and from the nodes (here unreachable: named, and the rest collected). Not one
planted secret is in the archive, the admin kubeconfig is not in it, the limits hold and are shown, and the API
being down costs only the API's part."""
from __future__ import annotations

import io
import os
import secrets
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from provision.cli.app import app
from provision.inputs.inventory import load_inventory
from provision.inputs.state import cluster_dir
from provision.smoke.manifests import RUN_LABEL
from tests.support.apiserver import FakeApiServer, RecordedRequest, object_list
from tests.support.kube_objects import event, healthy_pods, node, pod


def planted() -> dict[str, str]:
    """Fresh secrets of each kind, so that none can be in the archive by coincidence."""
    hexed = secrets.token_hex(32)
    return {"token": f"{secrets.token_hex(3)}.{secrets.token_hex(8)}", "certificate key": hexed,
            "password": f"pw-{secrets.token_urlsafe(12)}", "jwt": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ" +
            secrets.token_urlsafe(24) + "." + secrets.token_urlsafe(32),
            "private key": secrets.token_urlsafe(48)}


def private_key(body: str) -> str:
    return f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----\n"


class Planted:
    """An inventory of one unreachable node, settings, state and run logs on this machine, and a stand-in API,
    every one holding known secrets."""

    def __init__(self, tmp_path: Path, server: FakeApiServer) -> None:
        self.secret = planted()
        s = self.secret
        self.inventory = tmp_path / "hosts.ini"
        # Port 1 on this machine: nothing listens, the connection is refused at once. An inventory that sets a
        # password is refused, but one left in a comment (from the tool it came from) travels with the file.
        self.inventory.write_text(f"# was: ansible_become_password={s['password']}\n"
                                  "[control_plane]\ncp1 ansible_host=127.0.0.1 ansible_port=1 ansible_user=root\n"
                                  "[workers]\n")
        self.config = tmp_path / "cluster.yaml"
        # A URL with a password in it is refused as a setting; one in a comment travels with the file.
        self.config.write_text(f"# was: https://ops:{s['password']}@mirror.example/k8s\n"
                               "mirrors:\n  kubernetes_repo: https://mirror.example/k8s\n")
        cluster = load_inventory(self.inventory)
        state = cluster_dir(cluster)
        self.kubeconfig = server.write_kubeconfig(state / "admin.conf")
        self.kubeconfig.write_text(self.kubeconfig.read_text().replace("fake-token", s["jwt"]) +
                                   "# the cluster's key: never in a bundle\n")
        (state / "state.json").write_text('{"gpus": {"cp1": 0}, "phases": {}}')
        run = Path(os.environ["BOOTSTRAP_STATE_DIR"]) / "runs" / "20261125-101010-000001-join"
        run.mkdir(parents=True)
        (run / "run.log").write_text(f"TASK [Join the node]\ncp1 failed: kubeadm join --token {s['token']} "
                                     f"--certificate-key {s['certificate key']}\n")
        self.server = server
        self.serve()

    def serve(self) -> None:
        s = self.secret
        annotated = node("cp1")
        annotated["metadata"]["annotations"] = {"example.com/api-token": s["jwt"]}
        self.server.add("GET", "/api/v1/nodes", object_list("NodeList", [annotated]))
        system = healthy_pods(gpu_nodes=())
        leaky = pod("registry-sync-5f7d", "cp1", {"app": "registry-sync"})
        leaky["spec"]["containers"][0]["env"] = [{"name": "REGISTRY_PASSWORD", "value": s["password"]},
                                                 {"name": "LOG_LEVEL", "value": "debug"}]
        self.server.add("GET", "/api/v1/namespaces/kube-system/pods", object_list("PodList", [*system, leaky]))
        smoke = pod("cb-smoke-abc12-0-xk2p", "cp1", {RUN_LABEL: "cb-smoke-abc12"}, namespace="cb-smoke-abc12")
        self.server.add("GET", "/api/v1/pods", object_list("PodList", [smoke]))
        self.server.add("GET", "/api/v1/events", object_list("EventList", [
            event("e1", {"kind": "Pod", "name": "registry-sync-5f7d", "namespace": "kube-system"}, "Failed",
                  f"pull failed: https://robot:{s['password']}@harbor.example/v2/ unauthorized")]))

        def log(request: RecordedRequest) -> str:
            return (f"{request.params['name']}: joined with --token {s['token']}\n"
                    f"{private_key(s['private key'])}Authorization: Bearer {s['jwt']}\n")

        self.server.add("GET", "/api/v1/namespaces/{ns}/pods/{name}/log", log)

    def leaks(self, archive: Path) -> dict[str, list[str]]:
        """Member -> the planted secrets (or the kubeconfig) found in it."""
        found: dict[str, list[str]] = {}
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                text = tar.extractfile(member).read().decode()  # type: ignore[union-attr]
                hits = [kind for kind, value in self.secret.items() if value in text]
                hits += ["the admin kubeconfig"] if "never in a bundle" in text else []
                if hits:
                    found[member.name] = hits
        return found


def members(archive: Path) -> dict[str, str]:
    with tarfile.open(archive) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read().decode()  # type: ignore[union-attr]
                for m in tar.getmembers()}


def bundle(plant: Planted, out: Path, *extra: str) -> Any:
    return CliRunner().invoke(app, ["support-bundle", "-i", str(plant.inventory), "-c", str(plant.config),
                                    "-o", str(out), *extra], env={"COLUMNS": "100"})


@pytest.fixture
def plant(tmp_path: Path) -> Any:
    with FakeApiServer() as server:
        yield Planted(tmp_path, server)


def test_the_bundle_holds_every_part_and_not_one_planted_secret(plant: Planted, tmp_path: Path) -> None:
    out = tmp_path / "support.tar.gz"
    result = bundle(plant, out)
    assert result.exit_code == 0, result.output
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    assert plant.leaks(out) == {}
    files = members(out)
    for wanted in ("MANIFEST.txt", "doctor.txt", "doctor.json", "api/nodes.yaml", "api/events.txt",
                   "api/kube-system/describe/registry-sync-5f7d.txt", "api/kube-system/logs/registry-sync-5f7d/main.log",
                   "api/smoke/cb-smoke-abc12/logs/cb-smoke-abc12-0-xk2p/main.log", "local/inputs/hosts.ini",
                   "local/inputs/cluster.yaml", "local/state.json", "local/runs/20261125-101010-000001-join/run.log"):
        assert wanted in files, (wanted, sorted(files))
    assert not [name for name in files if "admin.conf" in name]
    # Redacted, not dropped: what is around a secret is still there to read.
    described = files["api/kube-system/describe/registry-sync-5f7d.txt"]
    assert "- name: LOG_LEVEL\n" in described and "value: debug\n" in described
    assert "REDACTED" in files["local/runs/20261125-101010-000001-join/run.log"]
    assert "cp1 failed: kubeadm join" in files["local/runs/20261125-101010-000001-join/run.log"]
    # The node could not be reached: named, with why, and everything else collected.
    assert "nodes/cp1: not collected: unreachable" in files["MANIFEST.txt"]
    assert "ssh: not checked: unreachable" in files["doctor.txt"] or "cp1: ssh" in files["doctor.txt"]
    output = " ".join(result.output.split())
    assert f"wrote {out}" in output and "secrets redacted" in output
    assert "limits: 1024 KiB per file (0 files cut), 100 MiB in all" in output


def test_with_the_api_down_the_rest_is_collected(plant: Planted, tmp_path: Path) -> None:
    plant.server.stop()
    out = tmp_path / "support.tar.gz"
    result = bundle(plant, out)
    assert result.exit_code == 0, result.output
    files = members(out)
    assert "api: not collected (the node-side parts are)" in files["MANIFEST.txt"]
    assert "local/runs/20261125-101010-000001-join/run.log" in files and "doctor.json" in files
    assert plant.leaks(out) == {}


def test_each_file_is_cut_at_its_limit_and_the_whole_at_its_own(plant: Planted, tmp_path: Path) -> None:
    big = "".join(f"line {i:06d} of a chatty controller\n" for i in range(3000))  # about 100 KiB
    plant.server.add("GET", "/api/v1/namespaces/{ns}/pods/{name}/log", big)
    out = tmp_path / "small.tar.gz"
    result = bundle(plant, out, "--max-file-kib", "16", "--max-total-mib", "1")
    assert result.exit_code == 0, result.output
    files = members(out)
    log = files["api/kube-system/logs/registry-sync-5f7d/main.log"]
    assert len(log.encode()) == 16 * 1024
    assert "api/kube-system/logs/registry-sync-5f7d/main.log  16384 / " in files["MANIFEST.txt"]
    assert "(cut at 16 KiB)" in files["MANIFEST.txt"]
    assert sum(len(text.encode()) for name, text in files.items() if name != "MANIFEST.txt") <= 1024 * 1024
    output = " ".join(result.output.split())
    assert "limits: 16 KiB per file" in output and "1 MiB in all" in output


def test_an_existing_archive_is_never_overwritten_and_nothing_is_collected(plant: Planted, tmp_path: Path) -> None:
    out = tmp_path / "support.tar.gz"
    out.write_text("the user's own file")
    # Judged as the command line is read (cli/option_table.py: a new file), a usage error: exit 2, one line.
    result = CliRunner().invoke(app, ["support-bundle", "-i", str(plant.inventory), "-o", str(out)])
    assert result.exit_code == 2 and out.read_text() == "the user's own file"
    assert "never overwritten" in result.output
    assert plant.server.requests == []
    result = CliRunner().invoke(app, ["support-bundle", "-i", str(plant.inventory), "-o", str(tmp_path / "no" / "x")])
    assert result.exit_code == 2 and "is not an existing folder" in result.output


def test_a_secret_cut_in_half_by_the_limit_still_goes() -> None:
    """A private key whose END line fell past the size limit is still a private key."""
    from provision.diagnose.redact import redact

    body = secrets.token_urlsafe(60)
    clean, _ = redact(private_key(body)[:60])
    assert body[:20] not in clean
    assert io.StringIO(clean).read().startswith("-----BEGIN RSA PRIVATE KEY----- REDACTED")
