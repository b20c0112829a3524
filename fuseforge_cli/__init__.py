"""The `fuseforge` command line: serve, worker, migrate, run."""
