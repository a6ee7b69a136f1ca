"""The add-ons (Volcano, Kubeflow Training Operator v1, Kubeflow Trainer v2): where each release is fetched from
(the profile, a mirror, the offline source), what the addon role does on the control plane (run for real
against a stand-in kubectl: a second run changes nothing, a removal deletes the last part first), and how
each is verified through the real kubernetes client against a stand-in API server: CRDs Established,
controllers Available, the objects the smoke test needs present."""
from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from provision.cli.app import app
from provision.errors import BootstrapError, InputError
from provision.inputs.addons import ADDON_ORDER, ADDONS, AddonName
from provision.inputs.inventory import load_inventory
from provision.inputs.settings import Settings, parse_settings
from provision.inputs.state import ClusterState
from provision.kube.addons import expected_objects, wait_for_addon, wait_for_removal
from provision.kube.client import load_api_client
from provision.nodes.runner import run_playbook
from provision.phases import PHASES, UP_PHASES, Phase, PhaseContext, run_phases, select_phases
from provision.render.addons import addon_plan, part_source
from tests.support.apiserver import FakeApiServer, object_list, status
from tests.support.kube_objects import crd, daemon_set, deployment, pod

RELEASE_IMAGES = {
    "volcano": "docker.io/volcanosh/vc-scheduler:v1.15.2",
    "training_operator": "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
    "trainer": "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
    "cert_manager": "quay.io/jetstack/cert-manager-controller:v1.21.2",
    "kserve": "kserve/kserve-controller:v0.21.0",
    "pipelines": "ghcr.io/kubeflow/kfp-api-server:2.17.0",
    "node_feature_discovery": "registry.k8s.io/nfd/node-feature-discovery:v0.19.0",
    "gpu_feature_discovery": "nvcr.io/nvidia/k8s-device-plugin:v0.20.1",
    "dcgm_exporter": "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
}


# --- where the releases come from ------------------------------------------------------------------------------

def test_upstream_sources_are_the_pinned_releases() -> None:
    settings = Settings()
    assert part_source(settings, "volcano", "installer") == (
        "url", "https://raw.githubusercontent.com/volcano-sh/volcano/v1.15.2/installer/volcano-development.yaml")
    assert part_source(settings, "trainer", "manager") == (
        "kustomize", "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0")
    assert part_source(settings, "trainer", "runtimes") == (
        "kustomize", "https://github.com/kubeflow/trainer.git/manifests/overlays/runtimes?ref=v2.3.0")
    assert part_source(settings, "training_operator", "standalone") == (
        "kustomize", "https://github.com/kubeflow/trainer.git/manifests/overlays/standalone?ref=v1.9.4")
    pinned = parse_settings({"addons": {"volcano_version": "v1.14.2"}})
    assert "/v1.14.2/installer/" in part_source(pinned, "volcano", "installer")[1]


def test_the_cn_profile_the_offline_source_and_a_mirror_move_every_release() -> None:
    cn = parse_settings({"mirrors": {"profile": "cn"}})
    assert part_source(cn, "volcano", "installer")[1].startswith("https://files.m.daocloud.io/raw.githubusercontent.com/")
    offline = parse_settings({"offline": {"source": "/srv/cb"}})
    mirrored = parse_settings({"mirrors": {"addon_manifests": "https://files.lan/addons"}})
    for name in ADDON_ORDER:
        for part in ADDONS[name].parts:
            version = ADDONS[name].version
            assert part_source(offline, name, part.name) == (
                "url", f"file:///srv/cb/addons/{name}/{version}/{part.name}.yaml")
            assert part_source(mirrored, name, part.name) == (
                "url", f"https://files.lan/addons/{name}/{version}/{part.name}.yaml")


def test_the_plan_applies_the_parts_in_order_and_waits_between_them() -> None:
    trainer = addon_plan(Settings(), "trainer")
    assert [(p.name, p.fetch, p.wait_after) for p in trainer.parts] == [
        ("manager", "kustomize", True), ("runtimes", "kustomize", False)]
    assert trainer.directory == "/etc/kubernetes/addons/trainer" and trainer.namespace == "kubeflow-system"
    assert [p.file for p in trainer.parts] == ["manager-v2.3.0.yaml", "runtimes-v2.3.0.yaml"]
    volcano = addon_plan(parse_settings({"addons": {"volcano_queue": "gangs"}}), "volcano")
    # The queue is ours, applied once Volcano's webhook can admit it.
    assert [(p.name, p.fetch, p.wait_after) for p in volcano.parts] == [
        ("installer", "url", True), ("cluster-bootstrap", "local", False)]
    queue = yaml.safe_load(volcano.parts[-1].content)
    assert (queue["kind"], queue["metadata"]["name"], queue["spec"]["weight"]) == ("Queue", "gangs", 1)
    assert yaml.safe_load(volcano.parts[0].kustomization) == {
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["installer-v1.15.2.yaml"]}


@pytest.mark.parametrize("minor,warned", [("1.35", False), ("1.36", True), ("1.37", True)])
def test_volcano_outside_its_tested_kubernetes_range_is_installed_with_a_warning_naming_it(
        tmp_path: Path, minor: str, warned: bool) -> None:
    from provision.inputs.validation import settings_warnings
    settings = parse_settings({"kubernetes": {"version": minor}, "addons": {"enabled": ["volcano", "trainer"]}})
    warnings = settings_warnings(settings)
    volcano = [w for w in warnings if "Volcano" in w]
    assert bool(volcano) is warned
    if warned:
        assert "Volcano v1.15.2 is tested with Kubernetes 1.23-1.35" in volcano[0] and f"not {minor}" in volcano[0]
    # The Trainer documents 1.31 and newer: no warning for any supported minor.
    assert not [w for w in warnings if "Trainer" in w]
    # A release pinned in the settings has a range the table does not know: nothing is claimed about it.
    pinned = parse_settings({"kubernetes": {"version": minor}, "addons": {"enabled": ["volcano"],
                                                                          "volcano_version": "v1.16.0"}})
    assert not [w for w in settings_warnings(pinned) if "Volcano" in w]


def test_every_addon_names_its_release_source_and_what_proves_it_up() -> None:
    for name in ADDON_ORDER:
        addon = ADDONS[name]
        assert addon.version_source.startswith("https://") and addon.version in addon.version_source
        # What proves it up: its CRDs and controllers, or for the node agents their DaemonSets.
        assert (addon.crds and addon.deployments) or addon.daemonsets, name
        assert addon.parts and addon.images
    docs = (Path(__file__).parents[1] / "docs" / "addons.md").read_text()
    for name in ADDON_ORDER:
        addon = ADDONS[name]
        assert f"| `{name}` | {addon.title} | `{addon.version}` |" in docs, name
        assert f"- {addon.title.removesuffix(' v1').removesuffix(' v2')} {addon.version}: Kubernetes " \
               f"{addon.kubernetes_text()} (" in docs, name
        for thing in (*addon.crds, *addon.deployments, *addon.daemonsets, addon.namespace):
            assert f"`{thing}`" in docs, thing


# --- verification through the API -----------------------------------------------------------------------------

def serve_addon(api: FakeApiServer, name: AddonName, settings: Settings | None = None, *,
                not_established: str | None = None, pulling: str | None = None,
                missing_objects: bool = False, stripped: tuple[str, ...] = ()) -> None:
    """A cluster that runs the add-on, with one thing wrong when asked (`stripped`: keys its ConfigMaps lack)."""
    addon = ADDONS[name]
    for crd_name in addon.crds:
        api.add("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd_name}",
                crd(crd_name, established=crd_name != not_established))
    for deployment_name in addon.deployments:
        ready = 0 if deployment_name == pulling else 1
        api.add("GET", f"/apis/apps/v1/namespaces/{addon.namespace}/deployments/{deployment_name}",
                deployment(deployment_name, addon.namespace, RELEASE_IMAGES[name], ready=ready))
    for name_ds in addon.daemonsets:
        api.add("GET", f"/apis/apps/v1/namespaces/{addon.namespace}/daemonsets/{name_ds}",
                daemon_set(name_ds, addon.namespace, RELEASE_IMAGES[name]))
    pods = []
    if pulling:
        pods.append(pod(f"{pulling}-7d9f8-abcde", "cp1", {"app": pulling}, namespace=addon.namespace, phase="Pending",
                        image=RELEASE_IMAGES[name], waiting="ImagePullBackOff",
                        waiting_message=f'Back-off pulling image "{RELEASE_IMAGES[name]}"'))
    api.add("GET", f"/api/v1/namespaces/{addon.namespace}/pods", object_list("PodList", pods))
    for config_map, keys in addon.config_keys:
        kept = [key for key in keys if key not in stripped]
        api.add("GET", f"/api/v1/namespaces/{addon.namespace}/configmaps/{config_map}",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": config_map},
                 "data": dict.fromkeys(kept, "{}")})
    for group, version, plural, object_name in expected_objects(addon, settings or Settings()):
        path = f"/apis/{group}/{version}/{plural}/{object_name}"
        api.add("GET", path, status(404, "NotFound", f'{plural} "{object_name}" not found') if missing_objects else
                {"apiVersion": f"{group}/{version}", "kind": plural, "metadata": {"name": object_name}})


def check(tmp_path: Path, api: FakeApiServer, name: AddonName, settings: Settings | None = None):  # type: ignore[no-untyped-def]
    client = load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
    return wait_for_addon(client, name, settings or Settings(), timeout_s=0, sleep=lambda _: None)


@pytest.mark.parametrize("name", ADDON_ORDER)
def test_an_addon_is_up_when_its_crds_are_established_and_its_controllers_available(tmp_path: Path, name) -> None:
    with FakeApiServer() as api:
        serve_addon(api, name)
        found = check(tmp_path, api, name)
        asked = {r.path for r in api.requests}
    assert found.ok, found.problems
    proof = f"{len(ADDONS[name].crds)} CRDs Established" if ADDONS[name].crds else \
        f"{ADDONS[name].daemonsets[0]} ready on 1/1 nodes"
    assert found.summary().startswith(f"{ADDONS[name].title} {RELEASE_IMAGES[name].rsplit(':', 1)[1]}: {proof}")
    assert {f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{c}" for c in ADDONS[name].crds} <= asked


def test_a_crd_whose_names_are_not_accepted_yet_is_named(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        serve_addon(api, "volcano", not_established="podgroups.scheduling.volcano.sh")
        found = check(tmp_path, api, "volcano")
    assert [p.describe() for p in found.problems] == [
        "podgroups.scheduling.volcano.sh: CRD not Established: Installing: the names are not accepted yet"]


def test_a_controller_that_cannot_pull_its_image_is_explained_by_its_pod(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        serve_addon(api, "trainer", pulling="jobset-controller-manager")
        found = check(tmp_path, api, "trainer")
    assert len(found.problems) == 1
    problem = found.problems[0].describe()
    assert problem.startswith("kubeflow-system/jobset-controller-manager: not Available (0/1 ready): ")
    assert "cannot pull its image ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0" in problem


def test_trainer_without_the_torch_runtime_and_volcano_without_the_queue_are_not_up(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        serve_addon(api, "trainer", missing_objects=True)
        serve_addon(api, "volcano", missing_objects=True)
        trainer, volcano = check(tmp_path, api, "trainer"), check(tmp_path, api, "volcano")
    assert [p.describe() for p in trainer.problems] == [
        "clustertrainingruntimes.trainer.kubeflow.org/torch-distributed: not found: Kubeflow Trainer v2 came "
        "without it: re-run `bootstrap addons install trainer`"]
    assert volcano.problems[0].subject == "queues.scheduling.volcano.sh/cluster-bootstrap"


def test_kserve_whose_configuration_lost_the_releases_keys_is_not_up(tmp_path: Path) -> None:
    # What a shared field manager did to KServe's configuration: only our `deploy` key left.
    with FakeApiServer() as api:
        serve_addon(api, "kserve", stripped=("ingress", "storageInitializer", "credentials", "agent", "router"))
        found = check(tmp_path, api, "kserve")
    assert [p.describe() for p in found.problems] == [
        "kserve/inferenceservice-config: lacks ingress, storageInitializer, credentials, agent, router: the release's "
        "configuration was overwritten: re-run `bootstrap addons install kserve`"]


def test_an_addon_never_applied_says_how_to_install_it(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        found = check(tmp_path, api, "training_operator")
    assert not found.installed
    assert found.problems[0].describe() == ("pytorchjobs.kubeflow.org: CRD not found: the Kubeflow Training Operator "
                                            "v1 release was not applied: `bootstrap addons install training_operator`")


def test_a_removal_is_done_once_no_crd_and_no_namespace_is_left(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pytorchjobs.kubeflow.org",
                crd("pytorchjobs.kubeflow.org"), status(404, "NotFound", "gone"))
        api.add("GET", "/api/v1/namespaces/kubeflow", {"metadata": {"name": "kubeflow"}},
                {"metadata": {"name": "kubeflow"}}, status(404, "NotFound", "gone"))
        client = load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig"))
        found = wait_for_removal(client, "training_operator", timeout_s=30, sleep=lambda _: None)
        polls = len(api.requests_to("GET", "/api/v1/namespaces/kubeflow"))
    assert found.ok and polls == 3


# --- the addon role, run for real against a stand-in kubectl ------------------------------------------------------

FAKE_KUBECTL = r'''#!PYTHON
"""kubectl as far as the addon role uses it: kustomize renders a stub, diff compares with what was applied."""
import hashlib, json, os, pathlib, sys
args = sys.argv[1:]
state = pathlib.Path(os.environ["FAKE_KUBECTL_STATE"])
state.mkdir(exist_ok=True)
with open(state / "calls.jsonl", "a") as log:
    log.write(json.dumps(args) + "\n")
for flag in ("--kubeconfig", "--namespace"):
    if flag in args:
        i = args.index(flag)
        del args[i:i + 2]
verb = args[0]
def content(directory):
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(pathlib.Path(directory).iterdir()))).hexdigest()
def record(directory):
    return state / directory.strip("/").replace("/", "_")
if verb == "kustomize":
    if "unreachable" in args[1]:
        sys.exit("error: accumulating resources: git cmd = '/usr/bin/git fetch': exit status 128")
    pathlib.Path(args[args.index("--output") + 1]).write_text("kind: List\nitems: []\n# from " + args[1] + "\n")
elif verb == "diff":
    target = args[args.index("-k") + 1]
    sys.exit(0 if record(target).exists() and record(target).read_text() == content(target) else 1)
elif verb == "apply":
    target = args[args.index("-k") + 1]
    record(target).write_text(content(target))
    print("deployment.apps/x serverside-applied")
elif verb == "patch" and "--local" in args:
    import yaml
    for doc in yaml.safe_load_all(pathlib.Path(args[args.index("-f") + 1]).read_text()):
        if doc:
            print(json.dumps(doc, indent=4))
elif verb == "get" and args[1] == "endpointslices":
    # A webhook's Service: no ready endpoint on the first look, one on the next.
    service = args[args.index("--selector") + 1].split("=", 1)[1]
    looked = state / f"looked-{service}"
    print("10.244.1.7" if looked.exists() else "", end="")
    looked.touch()
elif verb == "delete":
    target = args[args.index("-k") + 1]
    if record(target).exists():
        record(target).unlink()
        print("deployment.apps \"x\" deleted")
'''


# An inventory may not make a node's tasks run on this machine (bad input): the tests ask for it as an extra variable.
LOCAL = {"ansible_connection": "local"}


@pytest.fixture
def control_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A local-connection control plane whose kubectl is the stand-in above."""
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL.replace("PYTHON", sys.executable, 1))
    kubectl.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_KUBECTL_STATE", str(tmp_path / "kubectl"))
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[control_plane]\ncp1 ansible_host=127.0.0.11\n"
                         f"[all:vars]\nansible_python_interpreter={sys.executable}\n"
                         "ansible_become=false\n")
    return load_inventory(inventory), tmp_path


def run_role(control_plane, settings: Settings, name: AddonName, state: str):  # type: ignore[no-untyped-def]
    cluster, tmp_path = control_plane
    plan = replace(addon_plan(settings, name), directory=str(tmp_path / "addons" / name))
    return run_playbook("addon.yml", cluster, settings, phase=name,
                        extra_vars=LOCAL | {"cb_addon": plan.as_vars(), "cb_addon_state": state, "cb_addon_timeout_s": 5})


def kubectl_calls(tmp_path: Path) -> list[list[str]]:
    lines = (tmp_path / "kubectl" / "calls.jsonl").read_text().splitlines()
    return [[a for a in json.loads(line) if a != "--kubeconfig" and not a.endswith("admin.conf")] for line in lines]


def test_the_role_fetches_applies_server_side_and_a_second_run_changes_nothing(control_plane) -> None:
    tmp_path = control_plane[1]
    archive = tmp_path / "offline" / "addons" / "volcano" / "v1.15.2"
    archive.mkdir(parents=True)
    (archive / "installer.yaml").write_text("kind: List\nitems: []\n")
    settings = parse_settings({"offline": {"source": str(tmp_path / "offline")}})
    first = run_role(control_plane, settings, "volcano", "present")
    assert first.ok, first.failures
    directory = tmp_path / "addons" / "volcano"
    assert (directory / "installer" / "installer-v1.15.2.yaml").read_text() == "kind: List\nitems: []\n"
    assert "Queue" in (directory / "cluster-bootstrap" / "objects.yaml").read_text()
    calls = kubectl_calls(tmp_path)
    applies = [c for c in calls if c[0] == "apply"]
    # The release under one field manager, our own objects under another (neither prunes what the other sent).
    assert applies == [["apply", "--server-side", "--force-conflicts", "--field-manager", manager, "-k",
                        str(directory / part)] for part, manager in (("installer", "cluster-bootstrap"),
                                                                     ("cluster-bootstrap", "cluster-bootstrap-settings"))]
    # Volcano's CRDs and webhook are waited for before the queue goes in, and not after the last part.
    waits = [c for c in calls if "wait" in c]
    assert len(waits) == 2 and "crd/podgroups.scheduling.volcano.sh" in waits[0]
    assert "deployment/volcano-admission" in waits[1] and "volcano-system" in waits[1]
    assert calls.index(waits[1]) < calls.index(applies[1])

    second = run_role(control_plane, settings, "volcano", "present")
    assert second.ok and second.changed == {"cp1": 0}


WEBHOOK = {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
           "metadata": {"name": "volcano-admission-service-queues-validate"},
           "webhooks": [{"name": "validatequeue.volcano.sh", "failurePolicy": "Fail", "sideEffects": "None",
                         "admissionReviewVersions": ["v1"],
                         "clientConfig": {"service": {"namespace": "volcano-system", "name": "volcano-admission-service",
                                                      "path": "/queues/validate"}}}]}


def test_the_objects_a_webhook_admits_wait_for_its_services_endpoints(control_plane) -> None:
    tmp_path = control_plane[1]
    archive = tmp_path / "offline" / "addons" / "volcano" / "v1.15.2"
    archive.mkdir(parents=True)
    (archive / "installer.yaml").write_text(yaml.safe_dump(WEBHOOK))
    settings = parse_settings({"offline": {"source": str(tmp_path / "offline")}})
    result = run_role(control_plane, settings, "volcano", "present")
    assert result.ok, result.failures
    calls = kubectl_calls(tmp_path)
    applies = [i for i, c in enumerate(calls) if c[0] == "apply"]
    looks = [i for i, c in enumerate(calls) if "endpointslices" in c and "get" in c]
    # Asked until the Service had a ready endpoint, after the release went in and before the queue it admits.
    assert len(looks) == 2 and applies[0] < looks[0] and looks[-1] < applies[1]
    assert "kubernetes.io/service-name=volcano-admission-service" in calls[looks[0]]
    assert "volcano-system" in calls[looks[0]]


def test_the_role_renders_kustomize_targets_and_removes_the_last_part_first(control_plane) -> None:
    tmp_path = control_plane[1]
    assert run_role(control_plane, Settings(), "trainer", "present").ok
    directory = tmp_path / "addons" / "trainer"
    rendered = (directory / "manager" / "manager-v2.3.0.yaml").read_text()
    assert "https://github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0" in rendered
    removed = run_role(control_plane, Settings(), "trainer", "absent")
    assert removed.ok, removed.failures
    deletes = [c[-1] for c in kubectl_calls(tmp_path) if c[0] == "delete"]
    assert deletes == [str(directory / "runtimes"), str(directory / "manager")]
    assert not directory.exists()


def test_a_release_the_control_plane_cannot_fetch_is_named_with_the_fix(control_plane) -> None:
    cluster, tmp_path = control_plane
    settings = Settings()
    plan = addon_plan(settings, "training_operator")
    broken = replace(plan, directory=str(tmp_path / "addons" / "to"),
                     parts=tuple(replace(p, source="https://unreachable.example/x") for p in plan.parts))
    result = run_playbook("addon.yml", cluster, settings, phase="training_operator",
                          extra_vars=LOCAL | {"cb_addon": broken.as_vars(), "cb_addon_state": "present",
                                      "cb_addon_timeout_s": 5})
    assert not result.ok
    message = result.failures[0].message
    assert "cp1 cannot fetch training_operator v1.9.4" in message and "exit status 128" in message
    assert "set mirrors.addon_manifests" in message and "offline.source" in message


# --- the phases and the command ------------------------------------------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("BOOTSTRAP_STATE_DIR", str(tmp_path / "state"))
    hosts = tmp_path / "hosts.ini"
    hosts.write_text("[control_plane]\ncp1 ansible_host=10.20.0.10\n[workers]\nw1 ansible_host=10.20.0.11\n")
    return load_inventory(hosts)


def test_up_installs_the_addons_after_gpu_and_only_those_enabled(cluster) -> None:
    assert UP_PHASES.index("gpu") < UP_PHASES.index("volcano") < UP_PHASES.index("training_operator") \
        < UP_PHASES.index("trainer") < UP_PHASES.index("verify")
    ctx = PhaseContext(cluster=cluster, settings=parse_settings({"addons": {"enabled": ["trainer"]}}),
                       state=ClusterState())
    skipped = {name: PHASES[name].skip_reason(ctx) for name in ADDON_ORDER}  # type: ignore[misc]
    assert skipped == {name: None if name == "trainer" else "not in addons.enabled" for name in ADDON_ORDER}
    # An add-on brings what it needs: KServe its cert-manager.
    ctx.settings = parse_settings({"addons": {"enabled": ["kserve"]}})
    assert [name for name in ADDON_ORDER if PHASES[name].skip_reason(ctx) is None] == ["cert_manager", "kserve"]  # type: ignore[misc]
    assert all(PHASES[name].playbook == "addon.yml" and PHASES[f"remove_{name}"].playbook == "addon.yml"
               for name in ADDON_ORDER)


def test_the_addon_phase_fails_in_one_line_naming_what_is_not_up(cluster, tmp_path: Path) -> None:
    from provision.kube.kubeconfig import admin_kubeconfig_path

    with FakeApiServer() as api:
        serve_addon(api, "volcano", pulling="volcano-scheduler")
        admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
        api.write_kubeconfig(admin_kubeconfig_path(cluster))
        settings = parse_settings({"addons": {"enabled": ["volcano"], "timeout_s": 30}})
        ctx = PhaseContext(cluster=cluster, settings=settings, state=ClusterState())
        phase = PHASES["volcano"]
        result = run_phases([Phase(phase.name, phase.title, phase.check)], ctx)
    assert isinstance(result.error, BootstrapError)
    assert str(result.error).startswith("volcano: volcano-system/volcano-scheduler: not Available (0/1 ready)")
    assert "\n" not in str(result.error)


class Ran:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.ran: list[tuple[str, tuple[str, ...]]] = []

        def fake(names: Any, *, only: str | None = None, from_phase: str | None = None) -> list[Phase]:
            def check(name: str) -> Any:
                return lambda ctx: self.ran.append((name, ctx.settings.addons.enabled)) or f"{name} done"
            return [Phase(name, name, check(name)) for name in names]
        monkeypatch.setattr("provision.cli.support.select_phases", fake)


def _with_kubeconfig(cluster) -> None:  # type: ignore[no-untyped-def]
    from provision.kube.kubeconfig import admin_kubeconfig_path

    admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
    admin_kubeconfig_path(cluster).write_text(yaml.safe_dump({"clusters": []}))


def test_addons_install_runs_the_phases_in_install_order(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = Ran(monkeypatch)
    _with_kubeconfig(cluster)
    outcome = CliRunner().invoke(app, ["addons", "install", "trainer", "volcano", "-i", str(cluster.inventory_path)])
    assert outcome.exit_code == 0, outcome.output
    assert ran.ran == [("volcano", ("volcano", "trainer")), ("trainer", ("volcano", "trainer"))]


def test_addons_remove_asks_then_removes_the_last_installed_first(cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = Ran(monkeypatch)
    _with_kubeconfig(cluster)
    args = ["addons", "remove", "volcano", "trainer", "-i", str(cluster.inventory_path)]
    outcome = CliRunner().invoke(app, args, input="n\n")
    assert outcome.exit_code == 1 and ran.ran == []
    assert "namespaces volcano-system, kubeflow-system" in outcome.output
    outcome = CliRunner().invoke(app, [*args, "--yes"])
    assert outcome.exit_code == 0, outcome.output
    assert [name for name, _ in ran.ran] == ["remove_trainer", "remove_volcano"]


def test_an_unknown_addon_is_refused_with_a_did_you_mean(cluster) -> None:
    outcome = CliRunner().invoke(app, ["addons", "install", "volcan", "-i", str(cluster.inventory_path)])
    # Judged as the command line is read (cli/option_table.py): a usage error, exit 2.
    assert outcome.exit_code == 2
    assert "unknown add-on 'volcan': did you mean 'volcano'?" in outcome.output


def test_addons_list_says_what_the_cluster_runs(cluster) -> None:
    from provision.kube.kubeconfig import admin_kubeconfig_path

    with FakeApiServer() as api:
        serve_addon(api, "volcano")
        serve_addon(api, "trainer", pulling="kubeflow-trainer-controller-manager")
        admin_kubeconfig_path(cluster).parent.mkdir(parents=True)
        api.write_kubeconfig(admin_kubeconfig_path(cluster))
        text = CliRunner().invoke(app, ["addons", "list", "-i", str(cluster.inventory_path)])
        document = CliRunner().invoke(app, ["addons", "list", "-i", str(cluster.inventory_path), "-o", "json"])
    assert text.exit_code == 0, text.output
    assert "not installed" in text.output and "v1.15.2" in text.output
    rows = {row["name"]: row for row in json.loads(document.stdout)["addons"]}
    assert rows["volcano"]["ok"] and rows["volcano"]["version"] == "v1.15.2" and not rows["volcano"]["enabled"]
    assert not rows["training_operator"]["installed"] and rows["training_operator"]["problems"] == []
    assert rows["trainer"]["installed"] and not rows["trainer"]["ok"]
    assert "cannot pull its image" in rows["trainer"]["problems"][0]


def test_addons_list_shows_the_pinned_releases_and_the_settings_without_a_cluster(cluster, tmp_path: Path) -> None:
    """Issue 34.4: `addons list` was refused until a cluster existed; the releases and the settings need none."""
    settings = tmp_path / "cluster.yaml"
    settings.write_text("addons:\n  enabled: [volcano]\n")
    for args in (["-c", str(settings)], ["-c", str(settings), "-i", str(cluster.inventory_path)]):
        text = CliRunner().invoke(app, ["addons", "list", *args])
        assert text.exit_code == 0, text.output
        assert "v1.15.2" in text.output and ("no --inventory" in text.output or "no cluster formed" in text.output)
        document = CliRunner().invoke(app, ["addons", "list", *args, "-o", "json"])
        assert document.exit_code == 0, document.output
        parsed = json.loads(document.stdout)
        rows = {row["name"]: row for row in parsed["addons"]}
        assert parsed["cluster"] is False and list(rows) == list(ADDON_ORDER)
        assert rows["volcano"]["enabled"] and rows["volcano"]["pinned"] == "v1.15.2"
        assert rows["volcano"]["installed"] is None and not rows["trainer"]["enabled"]


def test_select_phases_knows_the_removal_phases() -> None:
    assert [p.name for p in select_phases(("remove_trainer",))] == ["remove_trainer"]
    with pytest.raises(InputError):
        select_phases(UP_PHASES, only="remove_trainer")
