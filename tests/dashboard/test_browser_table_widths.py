"""The dashboard's tables fit a 1,400 px window, measured by Chromium: a model as real exports
name them (a long file name, 40 outputs with path-like names and symbolic dims) and a dataset
of many long-named arrays once made the Models table 3,429 px wide. Each page is laid out at a
1,400 px viewport and neither the page nor its tables may be wider (`scrollWidth`); the model's
other outputs are on its own page."""

import io

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.dashboard.browser import screenshot
from tests.dashboard.browser_stack import OpenPage, Project

pytestmark = pytest.mark.e2e

VIEWPORT = 1400
OUTPUTS = 40

_WIDTHS = """() => ({
    page: document.documentElement.scrollWidth,
    tables: [...document.querySelectorAll("main table")]
        .filter(t => !t.closest(".table-scroll"))  // those scroll inside a box of the page's width
        .map(t => ({id: t.id || t.className || "table", width: t.scrollWidth})),
})"""


def _wide_model() -> bytes:
    """An input of symbolic dims and 40 outputs named as exporters name them (Relu of it)."""
    dims = ["batch_size", "past_sequence_length + 1", 64]
    names = [f"/model/decoder/layers.{i}/self_attn/k_proj/Add_output_0" for i in range(OUTPUTS)]
    graph = helper.make_graph(
        [helper.make_node("Relu", ["encoder_hidden_states"], [name], name=f"relu_{i}")
         for i, name in enumerate(names)],
        "wide",
        [helper.make_tensor_value_info("encoder_hidden_states", TensorProto.FLOAT, dims)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, dims) for name in names])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _wide_dataset() -> bytes:
    buffer = io.BytesIO()
    rng = np.random.default_rng(45)
    np.savez(buffer, **{f"decoder.layers.{i}.self_attention.past_key_values_{i}_with_a_long_name":
                        rng.random((4, 1, 12, 64), dtype=np.float32) for i in range(12)})
    return buffer.getvalue()


def test_tables_fit_a_1400_px_window(open_page: OpenPage, fresh_project: Project) -> None:
    model = fresh_project.upload(_wide_model(), "decoder_model_merged_" + "quantized_" * 12
                                 + "with_past.onnx")
    uploaded = fresh_project.api.post(
        "/v1/datasets", files={"file": ("past_key_values_" + "calibration_" * 10 + ".npz",
                                        _wide_dataset())}, timeout=60)
    assert uploaded.status_code in (200, 201), uploaded.text

    page = open_page(fresh_project, "/ui/models")
    page.set_viewport_size({"width": VIEWPORT, "height": 900})
    too_wide = {}
    for path in ("/ui/models", f"/ui/models/{model['id']}", "/ui/datasets", "/ui/workers",
                 f"/ui/compare?model={model['id']}"):
        response = page.goto(path)
        assert response is not None and response.ok, path
        widths = page.evaluate(_WIDTHS)
        wide = [t for t in widths["tables"] if t["width"] > VIEWPORT]
        if widths["page"] > VIEWPORT or wide:
            too_wide[path] = widths
            screenshot(page, f"too-wide-{path.strip('/').replace('/', '-').split('?')[0]}")
    assert too_wide == {}, f"wider than {VIEWPORT} px: {too_wide}"

    page.goto("/ui/models")
    row = page.locator(f'#models tr[data-model-id="{model["id"]}"]')
    assert row.locator("td.outputs li").count() == 4
    assert row.locator("td.outputs .more-tensors a").inner_text() == f"+ {OUTPUTS - 4} more"
    screenshot(page, "models-wide-names")
