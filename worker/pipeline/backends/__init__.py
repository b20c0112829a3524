"""How a job builds and judges an engine on each backend (the `JobBackend` strategy), and its
fallbacks.
"""
