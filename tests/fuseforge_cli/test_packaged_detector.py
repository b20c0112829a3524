"""The README's fp32 example on a real detector: PP-OCRv5's, from its PyPI wheel, optimized
with every pass and validated at 1x3x640x640. Its output map is near zero on random inputs
(max |error| 2.4e-7 over an RMS near 7e-7), where the cosine used to fail it at 0.9988: it is
judged by the absolute tolerance there, and passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fuseforge_cli.main import main
from tests.support.packaged_wheels import PPOCRV5_DETECTOR, packaged_model


def test_the_fused_ppocrv5_detector_passes_fp32_validation_at_640(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = packaged_model(PPOCRV5_DETECTOR, tmp_path)
    fused = tmp_path / "fused.onnx"
    shape = ["--input-shape", "x=1,3,640,640"]
    assert main(["optimize", str(original), "-o", str(fused), *shape]) == 0
    capsys.readouterr()

    code = main(["validate", str(original), str(fused), *shape, "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["passed"] is True, report["failures"]
    (output,) = report["outputs"]
    # Near zero: the cosine is not judged, and the report says so with the numbers.
    assert output["reference_rms"] <= report["tolerances"]["atol"]
    assert output["not_judged"] == ["cosine_similarity"]
    assert "not judged" in output["not_judged_why"]
    assert output["max_abs_err"] < report["tolerances"]["atol"]
    # The table says so too.
    assert main(["validate", str(original), str(fused), *shape, "--samples", "2"]) == 0
    printed = capsys.readouterr().out
    assert "Output 'fetch_name_0': cosine similarity not judged: the reference's RMS" in printed
    assert printed.rstrip().splitlines()[-1].startswith("PASSED")
