"""The ONNX graph itself, below the passes and plugins and without running it: the file, its limits and
scan, tensor specs, shapes, inputs and their ranges, graph walks.
"""
