"""trainer/serve.py, the predictor `smoke-test --serve` runs in its InferenceService: a KServe custom predictor
(the `kserve` package's Model) that answers each 32 x 32 picture with the model's class and score, and refuses
what is not a picture. In-process, on a model file in train.py's own format (untrained: the answer's shape is
what is checked, not its accuracy)."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from provision.resources import TRAINER_DIR
from provision.smoke.serve import CIFAR10_CLASSES, picture

torch = pytest.importorskip("torch", reason="the trainer needs torch: run in the environment that has it (.venv)")
pytest.importorskip("kserve")
sys.path.insert(0, str(TRAINER_DIR))
import cifar_data  # noqa: E402 - the trainer's own modules, as the pod imports them
import serve  # noqa: E402
import train  # noqa: E402


@pytest.fixture(scope="module")
def model_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model in train.py's format (untrained: the answer's shape is what is checked, not its accuracy)."""
    path = tmp_path_factory.mktemp("serve") / "model.pt"
    torch.manual_seed(0)
    net = train.build_network()
    return train.save_model(net, path, tuple(cifar_data.CLASSES), torch.tensor([125.0, 123.0, 114.0]),
                            torch.tensor([63.0, 62.0, 66.0]), test_accuracy=0.0, epochs=0, dataset="synthetic")


def test_the_predictor_answers_a_class_and_a_score_for_each_picture(model_file: Path) -> None:
    predictor = serve.Cifar10Predictor("cifar10", model_file)
    assert predictor.ready
    answer = predictor.predict({"instances": [picture(), picture()]})
    assert len(answer["predictions"]) == 2
    first = answer["predictions"][0]
    assert first["class"] in CIFAR10_CLASSES and 0.0 <= first["score"] <= 1.0 and len(first["next"]) == 2


@pytest.mark.parametrize("payload", [{}, {"instances": []}, {"instances": [[[0, 0, 0]]]},
                                     {"instances": [[[[300, 0, 0]] * 32] * 32]}])
def test_the_predictor_refuses_what_is_not_a_picture(model_file: Path, payload: dict[str, Any]) -> None:
    import kserve.errors
    with pytest.raises(kserve.errors.InvalidInput):
        serve.Cifar10Predictor("cifar10", model_file).predict(payload)


def test_the_classes_the_driver_accepts_are_the_trainers() -> None:
    assert tuple(cifar_data.CLASSES) == CIFAR10_CLASSES
