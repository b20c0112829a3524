"""Database layer shared by the API and the worker: models, sessions, job state (no FastAPI)."""
