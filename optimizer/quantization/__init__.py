"""INT8 quantization of a fused fp32 model: calibration, the Q/DQ graph in the flavour each
backend runs, the accuracy search that keeps the fewest nodes in float, and the per-node report
of what the engine runs in int8.

`quantize_within_budget` (search.py) is the entry point; the words (modes, methods, flavours)
are in optimizer/registries/quantization.py.
"""
