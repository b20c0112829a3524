"""Environment capture: every field present, never failing without a GPU; the key ignores the
worker and the measured bandwidth but changes with anything else; differences are named."""

from optimizer.measure.environment import (
    ENVIRONMENT_KEY_EXCLUDES,
    capture_environment,
    environment_differences,
    environment_key,
)

FIELDS = {"cpu", "cpu_cores", "threads", "memory_gib", "os", "python", "onnxruntime", "onnx",
          "openvino",
          "tensorrt", "cuda", "driver", "gpu", "gpu_sm_clock_mhz", "gpu_memory_clock_mhz",
          "worker", "memory_bandwidth_gb_s"}


def test_capture_has_every_field_with_this_machines_values() -> None:
    env = capture_environment(threads=2, worker="host:1", memory_bandwidth_gb_s=12.5)

    assert set(env) == FIELDS
    assert env["cpu_cores"] >= 1 and env["threads"] == 2 and env["worker"] == "host:1"
    assert env["memory_gib"] > 0 and env["memory_bandwidth_gb_s"] == 12.5
    assert env["onnxruntime"] and env["onnx"] and env["python"].count(".") == 2
    assert env["tensorrt"] is None  # TensorRT cannot be installed here: None, not an error
    assert env["openvino"] == "2026.4.1"  # the openvino extra `make install` installs


def test_key_is_stable_and_ignores_worker_and_bandwidth() -> None:
    env = capture_environment(threads=None, worker="host:1", memory_bandwidth_gb_s=12.5)
    again = capture_environment(threads=None, worker="other:9", memory_bandwidth_gb_s=13.1)

    assert len(environment_key(env)) == 16
    assert environment_key(env) == environment_key(again)
    assert ENVIRONMENT_KEY_EXCLUDES == {"worker", "memory_bandwidth_gb_s"}


def test_key_changes_with_threads_or_a_library_version() -> None:
    env = capture_environment(threads=1, worker="host:1", memory_bandwidth_gb_s=None)

    assert environment_key(env) != environment_key({**env, "threads": 4})
    assert environment_key(env) != environment_key({**env, "onnxruntime": "0.0.1"})


def test_differences_name_each_compared_field_that_differs() -> None:
    a = {"onnxruntime": "1.22.0", "threads": 1, "cpu": "X", "worker": "a:1",
         "memory_bandwidth_gb_s": 10.0}
    b = {"onnxruntime": "1.23.2", "threads": None, "cpu": "X", "worker": "b:2",
         "memory_bandwidth_gb_s": 20.0}

    assert environment_differences(a, b) == ["onnxruntime 1.22.0 vs 1.23.2", "threads 1 vs none"]
    assert environment_differences(a, a) == []
    assert environment_differences(None, {"gpu": "H100"}) == ["gpu none vs H100"]
