"""An int8 job's calibration samples, and the validation samples held apart from them.

The same samples never calibrate and judge a model: the API refuses a job whose dataset_id is
its calibration dataset, and a job that names no validation dataset is judged on samples held
apart from its calibration dataset (optimizer/quantization/samples.py).
"""

from collections.abc import Sequence
from pathlib import Path

from optimizer.errors import DatasetError
from optimizer.model.tensor_specs import TensorSpec
from optimizer.quantization.samples import hold_apart
from optimizer.validation.datasets import load_dataset
from worker.pipeline.results import CalibrationSplit

__all__ = ["calibration_split"]

_FIELD = "quantization.calibration"


def calibration_split(path: Path, inputs: Sequence[TensorSpec], *,
                      has_validation_dataset: bool) -> CalibrationSplit:
    """The calibration dataset at `path`, split when the job has no validation dataset.

    Raises:
        DatasetError: `quantization.calibration`: the file does not fit the model's inputs, or
            it has one sample and there is nothing to hold apart.
    """
    try:
        dataset = load_dataset(path, inputs)
    except DatasetError as err:
        raise DatasetError(f"{_FIELD}: {err}", field=_FIELD) from err
    if has_validation_dataset:
        return CalibrationSplit(dataset.feeds, None, None,
                                f"all {dataset.samples} calibration samples calibrate, in file "
                                "order; the job's dataset_id judges the engine")
    split = hold_apart(dataset.feeds, dataset.labels, field=_FIELD)
    return CalibrationSplit(split.calibration, split.validation, split.labels, split.note)
