"""The inputs a job validates on: its dataset when it names one, else seeded random inputs."""

import numpy as np

from optimizer.inputs import random_feeds
from optimizer.validation.datasets import load_dataset
from worker.context import JobContext

__all__ = ["job_feeds"]


def job_feeds(ctx: JobContext) -> tuple[list[dict[str, np.ndarray]], np.ndarray | None]:
    """The job's dataset (and labels) if it names one, else seeded random inputs in its ranges."""
    if ctx.dataset_path is not None:
        dataset = load_dataset(ctx.dataset_path, ctx.input_specs)
        return list(dataset.feeds), dataset.labels
    settings = ctx.config["validation"]
    feeds = random_feeds(ctx.input_specs, count=settings["samples"], seed=settings["seed"],
                         ranges=ctx.config.get("input_ranges"))
    return feeds, None
