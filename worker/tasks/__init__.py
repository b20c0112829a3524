"""Celery tasks: each one only unpacks its message and calls into worker.pipeline."""
