"""The inputs a job validates on: its dataset when it names one, else seeded random inputs."""

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx

from core.job_config import JobConfig
from optimizer.model.input_ranges import InputRange, effective_ranges, infer_input_ranges
from optimizer.model.inputs import random_feeds
from optimizer.model.tensor_specs import TensorSpec
from optimizer.validation.datasets import load_dataset

__all__ = ["job_feeds", "job_input_ranges", "random_job_feeds"]


def job_input_ranges(config: JobConfig, model: onnx.ModelProto) -> dict[str, InputRange]:
    """The ranges the job's random inputs are drawn in: its `input_ranges`, and for the other
    integer inputs the ranges their use in the graph allows (optimizer/model/input_ranges.py)."""
    return effective_ranges(infer_input_ranges(model), config.input_ranges)


def job_feeds(config: JobConfig, dataset_path: Path | None, inputs: Sequence[TensorSpec],
              ranges: Mapping[str, InputRange]
              ) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """The job's dataset (and labels) if it names one, else seeded random inputs in `ranges`
    (see `job_input_ranges`), for `inputs` at the job's shapes."""
    if dataset_path is not None:
        dataset = load_dataset(dataset_path, inputs)
        return list(dataset.feeds), dataset.labels
    return random_job_feeds(config, inputs, ranges, count=config.validation.samples), None


def random_job_feeds(config: JobConfig, inputs: Sequence[TensorSpec],
                     ranges: Mapping[str, InputRange], *, count: int,
                     seed_offset: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` seeded random feeds for `inputs`, within `ranges` (see `job_input_ranges`)."""
    return random_feeds(inputs, count=count, seed=config.validation.seed + seed_offset,
                        ranges=ranges)
