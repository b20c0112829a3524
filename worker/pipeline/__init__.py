"""The optimization pipeline one job runs: stages, their typed results, the backend strategies
and the recorder that writes the run to the database."""
