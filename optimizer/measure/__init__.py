"""Measurement: timing and its statistics, memory, bandwidth, the environment a figure was taken in,
ablation.
"""
