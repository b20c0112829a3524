"""Service benchmarks: FuseForge's API under load, side by side with a bare FastAPI app."""
