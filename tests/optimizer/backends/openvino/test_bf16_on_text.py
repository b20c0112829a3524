"""OpenVINO bf16 on a real OCR detector reading text: within bf16's default tolerances, which
judge the output's cosine and not its worst element (a few values on the sigmoid's slope move
far in bf16 while the map agrees)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from optimizer.backends.onnxruntime.runner import OnnxRuntimeRunner
from optimizer.backends.openvino.runner import OpenVinoRunner
from optimizer.registries.precisions import Precision
from optimizer.testing.text_pages import ocr_feed, text_page
from optimizer.validation import compare_outputs, default_tolerances
from tests.support.host_cpu import needs_cpu_for
from tests.support.packaged_wheels import PPOCRV5_DETECTOR, packaged_model

PAGE = 320


@needs_cpu_for(Precision.BF16)
def test_bf16_on_the_ppocrv5_detector_reading_text_is_within_bf16s_tolerances(
        tmp_path: Path) -> None:
    detector = packaged_model(PPOCRV5_DETECTOR, tmp_path)
    rng = np.random.default_rng(0)
    feeds = [{"x": ocr_feed(text_page(rng, PAGE, PAGE, lines=True), detector=True)}
             for _ in range(3)]

    with OnnxRuntimeRunner(detector) as original, OpenVinoRunner(
            detector, inference_precision="bf16", threads=2,
            input_shapes={"x": [1, 3, PAGE, PAGE]}) as bf16:
        reference = [original.infer(feed) for feed in feeds]
        got = [bf16.infer(feed) for feed in feeds]

    # The pages read as text: the detector marks a good part of each (a blank map's cosine
    # would be rounding noise, whatever the precision).
    for outputs in reference:
        (probabilities,) = outputs.values()
        assert (probabilities > 0.3).mean() > 0.05
    report = compare_outputs(reference, got, default_tolerances("bf16"))
    assert report.passed, report.to_dict()
    (output,) = report.outputs
    assert output.cosine_similarity >= 0.999
