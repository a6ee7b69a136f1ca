"""`bootstrap smoke-test` as a user runs it: the verdict is printed and is the exit code."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from provision.cli.app import app
from provision.smoke.options import SmokeOptions, combination_problem
from tests.support.apiserver import FakeApiServer
from tests.support.refusal import assert_refused, run_main
from tests.support.smoke_run import EPOCH_LOG, METRICS, Cluster, job, succeeded

runner = CliRunner()


def invoke(tmp_path: Path, cluster: Cluster, *args: str) -> tuple[int, str, FakeApiServer]:
    with FakeApiServer() as api:
        cluster.serve(api)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        result = runner.invoke(app, ["smoke-test", "--kubeconfig", str(kubeconfig), *args])
    return result.exit_code, result.output, api


def test_a_passing_run_exits_0_and_prints_accuracy_and_time(tmp_path: Path) -> None:
    log = EPOCH_LOG + json.dumps(METRICS) + "\n"
    cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS)], log)])
    code, output, api = invoke(tmp_path, cluster)
    assert code == 0, output
    assert "PASS: test accuracy 94.12% in 5.1s" in output
    assert "epoch 10/10" in output  # the trainer's log is streamed,
    assert '{"test_accuracy"' not in output  # but its metrics JSON is shown as a table instead
    assert "images/s              98,765" in output
    assert api.requests_to("DELETE")


def test_a_failing_run_exits_1_with_the_cause_and_keep_leaves_the_namespace(tmp_path: Path) -> None:
    cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS | {"test_accuracy": 0.3})], EPOCH_LOG)])
    code, output, api = invoke(tmp_path, cluster, "--keep")
    assert code == 1
    assert "FAIL (low-accuracy): test accuracy 0.3000 is under the threshold 0.90" in output
    assert "kept: namespace cb-smoke-" in output
    assert not api.requests_to("DELETE")


def test_output_json_puts_the_verdict_alone_on_stdout_and_keeps_the_exit_code(tmp_path: Path) -> None:
    for accuracy, code in ((0.9412, 0), (0.3, 1)):
        cluster = Cluster(steps=[(job(("Complete", "", "")), [succeeded(METRICS | {"test_accuracy": accuracy})],
                                  EPOCH_LOG)])
        with FakeApiServer() as api:
            cluster.serve(api)
            result = runner.invoke(app, ["smoke-test", "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc")),
                                         "--output", "json"])
        assert result.exit_code == code, result.output
        verdict = json.loads(result.stdout)  # one document, nothing else
        assert verdict["passed"] is (code == 0)
        assert verdict["cause"] == (None if code == 0 else "low-accuracy")
        assert verdict["summary"].startswith("PASS: test accuracy 94.12%" if code == 0 else "FAIL (low-accuracy)")
        assert verdict["metrics"]["test_accuracy"] == accuracy and verdict["metrics"]["images_per_s"] == 98765.4
        assert verdict["namespace"].startswith("cb-smoke-") and verdict["elapsed_s"] >= 0
        assert set(verdict) >= {"detail", "mode", "kept", "cleanup_error", "log_tail"}
        # The live view goes to stderr as always.
        assert "epoch 10/10" in result.stderr


def test_print_manifests_shows_the_pytorchjob_variant_without_a_cluster(tmp_path: Path) -> None:
    result = runner.invoke(app, ["smoke-test", "--kubeconfig", str(tmp_path / "none"), "--print-manifests",
                                 "pytorchjob", "--nodes", "3", "--gpus", "8", "--image", "registry.local/torch:1"])
    assert result.exit_code == 0, result.output
    objects = list(yaml.safe_load_all(result.output))
    assert [o["kind"] for o in objects] == ["Namespace", "ConfigMap", "PyTorchJob"]
    replicas = objects[2]["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 2
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/torch:1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_the_live_view_shows_each_pod_and_the_epoch_reached() -> None:
    from rich.console import Console

    from provision.cli.views import smoke_view
    from provision.smoke.driver import PodView, SmokeProgress

    progress = SmokeProgress(namespace="cb-smoke-1a2b3c", job="cifar10-smoke", mode="gpu", gpus=2, nodes=2,
                             image="img", stage="training", epoch=3, epochs=10,
                             pods=[PodView("cifar10-smoke-0-abc", "0", "gpu-1", "Running"),
                                   PodView("cifar10-smoke-1-def", "1", "", "Pending (ImagePullBackOff)")])
    console = Console(record=True, width=120)
    console.print(smoke_view(progress))
    screen = console.export_text()
    assert "training" in screen and "cb-smoke-1a2b3c" in screen and "2 node(s) x 2 GPU" in screen
    assert "cifar10-smoke-0-abc" in screen and "gpu-1" in screen and "Pending (ImagePullBackOff)" in screen
    assert "epoch 3/10  [######" in screen


# --- options that do not go together: refused in one line, before any file or cluster is read -------------------

@pytest.mark.parametrize(("args", "words"), [
    (["--cpu", "--gpus", "2"], ["--cpu trains on no GPU", "--gpus"]),
    (["--pipeline", "--nodes", "2"], ["--pipeline trains one PyTorchJob", "--nodes does not apply"]),
    (["--pipeline", "--save", "out"], ["--pipeline", "--save does not apply"]),
    (["--pipeline", "--workload", "job"], ["--pipeline", "--workload"]),
    (["--pipeline", "--scheduler", "volcano"], ["--pipeline", "--scheduler"]),
    (["--pipeline", "--keep"], ["--pipeline", "--keep"]),
    (["--print-manifests", "job", "--serve"], ["--print-manifests prints", "--serve does not apply"]),
    (["--print-manifests", "job", "--pipeline"], ["--print-manifests", "--pipeline"]),
    (["--print-manifests", "pytorchjob", "--workload", "job"], ["--print-manifests", "--workload"]),
    (["--print-manifests", "job", "-o", "json"], ["--print-manifests", "--output json"]),
])
def test_options_that_do_not_go_together_are_refused_before_anything(tmp_path: Path, args: list[str],
                                                                      words: list[str]) -> None:
    # A kubeconfig that does not exist and a cluster.yaml that cannot be read: neither is looked at.
    assert_refused(run_main("smoke-test", "--kubeconfig", str(tmp_path / "absent"), "-c", str(tmp_path / "absent.yaml"),
                            *args), *words, "leave one of them out")


FLAGS = {"--gpus": ["--gpus", "2"], "--nodes": ["--nodes", "2"], "--cpu": ["--cpu"], "--keep": ["--keep"],
         "--workload": ["--workload", "job"], "--scheduler": ["--scheduler", "default"], "--save": ["--save", "out"],
         "--serve": ["--serve"], "--pipeline": ["--pipeline"], "--print-manifests": ["--print-manifests", "job"],
         "--output json": ["--output", "json"]}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.sampled_from(sorted(FLAGS)), max_size=4))
def test_any_combination_is_refused_in_one_line_or_goes_on(tmp_path: Path, chosen: set[str]) -> None:
    args = [word for flag in sorted(chosen) for word in FLAGS[flag]]
    options = SmokeOptions(gpus=2 if "--gpus" in chosen else None, nodes=2 if "--nodes" in chosen else None,
                           cpu="--cpu" in chosen, keep="--keep" in chosen,
                           workload="job" if "--workload" in chosen else None,
                           scheduler="default" if "--scheduler" in chosen else None,
                           save="out" if "--save" in chosen else None, serve="--serve" in chosen,
                           pipeline="--pipeline" in chosen,
                           print_manifests="job" if "--print-manifests" in chosen else None,
                           output="json" if "--output json" in chosen else "text")
    problem = combination_problem(options)
    outcome = run_main("smoke-test", "--kubeconfig", str(tmp_path / "absent"), *args)
    assert "Traceback" not in outcome.stderr
    if problem:
        assert_refused(outcome, problem)
    elif "--print-manifests" in chosen:
        assert outcome.code == 0 and yaml.safe_load_all(outcome.stdout)
    else:
        # It went on to the cluster: the kubeconfig that is not there is what stops it.
        assert outcome.code != 0 and "kubeconfig not found" in outcome.stderr
