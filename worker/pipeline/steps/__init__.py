"""The job's stages (load, optimize, validate, benchmark, ablation) and the checks they run."""
