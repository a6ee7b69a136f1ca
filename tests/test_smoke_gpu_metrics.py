"""The smoke test on shared GPUs and with GPU metrics: with gpu.sharing, several one-GPU pods train at once (an
Indexed Job that validates like every other object); with the DCGM exporter installed, the utilisation of the
run's own GPUs while it trained goes into the verdict, read from the exporter's metrics page through the API
server (recorded answers here: no GPU)."""
from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest

from provision.inputs.settings import parse_settings
from provision.kube.client import load_api_client
from provision.smoke.gpu_metrics import GpuSampler, GpuUtilisation, Sample, utilisation
from provision.smoke.manifests import render
from provision.smoke.spec import build_spec
from tests.support.apiserver import FakeApiServer, object_list
from tests.support.kube_objects import pod

PAGE = """\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",container="trainer",namespace="cb-smoke-x7k2p",pod="cifar10-smoke-0-abcde"} 97
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-2",Hostname="w1",container="other",namespace="team-a",pod="someone-elses"} 12
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",namespace="cb-smoke-x7k2p",pod="cifar10-smoke-0-abcde"} 30211
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-3",device="nvidia2",namespace="cb-smoke-x7k2p",pod="cifar10-smoke-1-fghij"} 88
"""


# A node whose GPU is cut into MIG instances (exporter 4.5.3-4.8.2's default counters): DCGM reports no
# DCGM_FI_DEV_GPU_UTIL for the instances, only the profiling ratio, per GPU_I_ID.
def _mig_line(instance: int, namespace: str, pod_name: str, value: str) -> str:
    return (f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{gpu="0",UUID="GPU-1",GPU_I_PROFILE="1g.10gb",GPU_I_ID="{instance}",'
            f'namespace="{namespace}",pod="{pod_name}"}} {value}')


MIG_PAGE = "\n".join([
    "# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.",
    "# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge",
    _mig_line(7, "cb-smoke-x7k2p", "cifar10-smoke-0-abcde", "0.910000"),
    _mig_line(8, "cb-smoke-x7k2p", "cifar10-smoke-1-fghij", "0.5"),
    _mig_line(9, "team-a", "someone-elses", "0.99"),
    'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1",GPU_I_ID="7",namespace="cb-smoke-x7k2p",pod="cifar10-smoke-0-abcde"} 3021',
    ""])


def test_only_the_runs_own_gpus_are_counted() -> None:
    assert utilisation(PAGE, {"cifar10-smoke-0-abcde", "cifar10-smoke-1-fghij"}, "cb-smoke-x7k2p") == [
        Sample(97.0, "DCGM_FI_DEV_GPU_UTIL"), Sample(88.0, "DCGM_FI_DEV_GPU_UTIL")]
    assert utilisation(PAGE, {"cifar10-smoke-0-abcde"}, "other-namespace") == []
    assert utilisation("garbage\nDCGM_FI_DEV_GPU_UTIL 5\n", {"x"}, "ns") == []


def test_on_mig_instances_the_engine_activity_is_read_and_named() -> None:
    assert utilisation(MIG_PAGE, {"cifar10-smoke-0-abcde", "cifar10-smoke-1-fghij"}, "cb-smoke-x7k2p") == [
        Sample(91.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"), Sample(50.0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")]
    # A GPU that reports both: the utilisation DCGM defines for whole GPUs wins, once per GPU.
    both = PAGE + 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",UUID="GPU-1",namespace="cb-smoke-x7k2p",' \
                  'pod="cifar10-smoke-0-abcde"} 0.2\n'
    assert utilisation(both, {"cifar10-smoke-0-abcde"}, "cb-smoke-x7k2p") == [Sample(97.0, "DCGM_FI_DEV_GPU_UTIL")]


def test_the_verdict_says_which_metric_it_used_on_mig(tmp_path: Path) -> None:
    exporter = pod("dcgm-exporter-q8r7s", "w1", {"app.kubernetes.io/name": "dcgm-exporter"},
                   namespace="gpu-monitoring")
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods", object_list("PodList", [exporter]))
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods/dcgm-exporter-q8r7s:9400/proxy/metrics", MIG_PAGE)
        sampler = GpuSampler(load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig")), "cb-smoke-x7k2p")
        sampler.sample(10.0, {"cifar10-smoke-0-abcde": "w1"})
    assert sampler.summary() == GpuUtilisation(mean=91.0, peak=91.0, samples=1, metric="DCGM_FI_PROF_GR_ENGINE_ACTIVE")


def test_the_exporter_on_the_training_node_is_read_through_the_api_server(tmp_path: Path) -> None:
    exporter = pod("dcgm-exporter-q8r7s", "w1", {"app.kubernetes.io/name": "dcgm-exporter"},
                   namespace="gpu-monitoring")
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods", object_list("PodList", [exporter]))
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods/dcgm-exporter-q8r7s:9400/proxy/metrics", PAGE)
        sampler = GpuSampler(load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig")), "cb-smoke-x7k2p")
        assert sampler.summary() is None
        sampler.sample(10.0, {"cifar10-smoke-0-abcde": "w1"})
        sampler.sample(11.0, {"cifar10-smoke-0-abcde": "w1"})  # too soon: not read again
        sampler.sample(20.0, {"cifar10-smoke-0-abcde": "w1", "cifar10-smoke-1-fghij": "w2"})  # no exporter on w2
        reads = api.requests_to("GET", "/api/v1/namespaces/gpu-monitoring/pods/dcgm-exporter-q8r7s:9400/proxy")
        listed = api.requests_to("GET", "/api/v1/namespaces/gpu-monitoring/pods")
    assert len(reads) == 2 and len([r for r in listed if r.path.endswith("/pods")]) == 1
    # 97 on the first read; 97 and 88 (both pods' GPUs on w1's page) on the second.
    assert sampler.summary() == GpuUtilisation(mean=94.0, peak=97.0, samples=3, metric="DCGM_FI_DEV_GPU_UTIL")


def test_without_an_exporter_nothing_is_said(tmp_path: Path) -> None:
    with FakeApiServer() as api:
        api.add("GET", "/api/v1/namespaces/gpu-monitoring/pods", object_list("PodList", []))
        sampler = GpuSampler(load_api_client(api.write_kubeconfig(tmp_path / "kubeconfig")), "ns")
        sampler.sample(10.0, {"p": "w1"})
    assert sampler.summary() is None


@pytest.mark.parametrize("version", ["1.35.0", "1.37.0"])
def test_on_shared_gpus_several_one_gpu_pods_train_at_once(version: str) -> None:
    settings = parse_settings({"gpu": {"sharing": "time-slicing", "replicas": 4}, "smoke_test": {"shared_pods": 3}})
    objects = render(build_spec(settings, "gpu", namespace="cb-smoke-x7k2p"))
    job = objects[-1]
    assert (job["kind"], job["spec"]["completionMode"], job["spec"]["completions"], job["spec"]["parallelism"]) == \
        ("Job", "Indexed", 3, 3)
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    for obj in objects:
        kubernetes_validate.validate(obj, version, strict=True)
    # Without sharing, one pod, as before.
    single = render(build_spec(parse_settings({}), "gpu", namespace="cb-smoke-x7k2p"))[-1]
    assert "completions" not in single["spec"]


def test_with_mixed_mig_the_pods_ask_for_the_mig_resource() -> None:
    settings = parse_settings({"gpu": {"mig": {"strategy": "mixed", "profile": "1g.10gb"}}})
    job = render(build_spec(settings, "gpu", namespace="cb-smoke-x7k2p"))[-1]
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == \
        {"memory": "12Gi", "nvidia.com/mig-1g.10gb": "1"}
