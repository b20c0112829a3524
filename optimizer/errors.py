"""Errors raised by the optimizer library.

`OptimizerError` and its subclasses are faults in (or limits met by) the user's model, data or
job configuration: the worker stores their class name and message on the job. `InternalError`
is a broken assumption of ours and is kept apart so it is never blamed on the user.

    Exception
    ├── OptimizerError              the user can act on it
    │   ├── InvalidModelError       not a valid ONNX model
    │   ├── UnsupportedModelError   valid, but refused (e.g. external data)
    │   │   └── ModelLimitError     over one of the configured ModelLimits
    │   ├── InputShapeError         input shapes that do not fit the model
    │   ├── InputRangeError         random-input ranges that do not fit the model
    │   ├── DatasetError            evaluation data that does not fit the contract or the model
    │   ├── PassError               a pass that cannot be applied safely
    │   ├── EngineBuildError        the backend cannot build an engine
    │   ├── InferenceError          the backend fails while running the model
    │   │   └── InferenceTimeLimitError  a run stopped at its time limit (a Loop that goes on)
    │   ├── PluginNotFoundError     a fused op without a registered plugin
    │   ├── QuantizationError       the model cannot be quantized as the job asks
    │   └── AccuracyMismatchError   outputs beyond tolerance
    └── InternalError               a bug in FuseForge, never the user's fault
"""

__all__ = [
    "AccuracyMismatchError",
    "DatasetError",
    "EngineBuildError",
    "InferenceError",
    "InferenceTimeLimitError",
    "InputRangeError",
    "InputShapeError",
    "InternalError",
    "InvalidModelError",
    "ModelLimitError",
    "OptimizerError",
    "PassError",
    "PluginNotFoundError",
    "QuantizationError",
    "UnsupportedModelError",
]


class OptimizerError(Exception):
    """A problem with the user's model or job that the user can act on."""


class InvalidModelError(OptimizerError):
    """The file is not a valid ONNX model (empty, truncated, fails the ONNX checker...)."""


class UnsupportedModelError(OptimizerError):
    """A valid model that FuseForge refuses to handle (e.g. external data outside the upload)."""


class ModelLimitError(UnsupportedModelError):
    """The model exceeds one of the `ModelLimits` it was checked against.

    `limit` names the `ModelLimits` field (e.g. "max_dim"), so a caller that configures the
    limits can say which setting would raise it. (It has a default so the error survives
    pickling: checks run in a child process and send their errors back.)
    """

    def __init__(self, message: str, *, limit: str = "") -> None:
        super().__init__(message)
        self.limit = limit


class InputShapeError(OptimizerError):
    """Requested input shapes do not fit the model's declared inputs.

    `field` is the job option at fault when a job's inputs were resolved (`job_inputs`):
    "input_shapes.<name>", "profiles.<name>"; the message then starts with it.
    """

    def __init__(self, message: str, *, input_name: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name
        self.field = field


class InputRangeError(OptimizerError):
    """Requested value ranges for random inputs do not fit the model's inputs (job `input_ranges`)."""

    def __init__(self, message: str, *, input_name: str | None = None,
                 field: str | None = None) -> None:
        super().__init__(message)
        self.input_name = input_name
        self.field = field  # "input_ranges.<name>" when a job's inputs were resolved


class DatasetError(OptimizerError):
    """The evaluation data (a dataset file, its labels, the class-score outputs named) does not
    fit the dataset contract (validation/datasets.py) or the model."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field  # "dataset_id" when a job's inputs were resolved


class PassError(OptimizerError):
    """A graph pass could not be applied safely."""


class EngineBuildError(OptimizerError):
    """The backend could not build an engine from the model."""


class InferenceError(OptimizerError):
    """The backend failed while running the model (e.g. a Reshape that does not fit the shapes)."""


class InferenceTimeLimitError(InferenceError):
    """A run of a model with a Loop was stopped at its time limit
    (backends/onnxruntime/run_limits.py): the message names the node it was running."""


class PluginNotFoundError(OptimizerError):
    """A fused op needs a plugin that is not registered."""


class QuantizationError(OptimizerError):
    """The model cannot be quantized as the job asks: its opset cannot be brought to the one
    Q/DQ needs, calibration failed, or no quantized form loads and runs."""


class AccuracyMismatchError(OptimizerError):
    """The optimized model's outputs differ from the original's beyond tolerance."""


class InternalError(Exception):
    """A broken internal assumption: a bug in FuseForge, never the user's fault."""
