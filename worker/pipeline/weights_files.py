"""Where a job's models keep their weights: inline, or in a data file beside each model.

A model uploaded with its data files (a tar: worker/pipeline/steps/unpack.py) may be over
protobuf's 2 GB, so every model its job writes keeps its weights in a data file of its own
(`fused.onnx` beside `fused.onnx.data`), and reads are left lazy: the tensors no step
rewrites stay on disk. Other jobs write single files, as they always did.
"""

from pathlib import Path

import onnx

from worker.pipeline.results import JobRun, PendingArtifact

__all__ = ["data_location", "load_for_rewrite", "with_data_artifact"]


def data_location(run: JobRun, path: Path) -> str | None:
    """The data file beside `path` that its weights go into; None: inline."""
    return f"{path.name}.data" if run.model_archive is not None else None


def load_for_rewrite(run: JobRun, path: Path) -> tuple[onnx.ModelProto, Path | None]:
    """The model at `path` and the folder its external tensors are read from (None: its
    weights are in memory): a model with data files is loaded without them."""
    if run.model_archive is None:
        return onnx.load(path, format="protobuf"), None
    return onnx.load(path, format="protobuf", load_external_data=False), path.parent


def with_data_artifact(run: JobRun, artifact: PendingArtifact) -> tuple[PendingArtifact, ...]:
    """`artifact` (a model file), and its data file when it has one."""
    location = data_location(run, artifact.path)
    if location is None:
        return (artifact,)
    data = artifact.path.with_name(location)
    return artifact, PendingArtifact(location, f"{artifact.kind}_data", data)
