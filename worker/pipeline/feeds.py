"""The inputs a job validates on: its dataset when it names one, else seeded random inputs."""

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from core.job_config import JobConfig
from optimizer.inputs import random_feeds
from optimizer.tensor_specs import TensorSpec
from optimizer.validation.datasets import load_dataset

__all__ = ["job_feeds", "random_job_feeds"]


def job_feeds(config: JobConfig, dataset_path: Path | None, inputs: Sequence[TensorSpec]
              ) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """The job's dataset (and labels) if it names one, else seeded random inputs in its ranges,
    for `inputs` at the job's shapes."""
    if dataset_path is not None:
        dataset = load_dataset(dataset_path, inputs)
        return list(dataset.feeds), dataset.labels
    return random_job_feeds(config, inputs, count=config.validation.samples), None


def random_job_feeds(config: JobConfig, inputs: Sequence[TensorSpec], *, count: int,
                     seed_offset: int = 0) -> list[dict[str, np.ndarray]]:
    """`count` seeded random feeds for `inputs`, within the job's `input_ranges`."""
    return random_feeds(inputs, count=count, seed=config.validation.seed + seed_offset,
                        ranges=config.input_ranges)
