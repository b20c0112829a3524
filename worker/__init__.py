"""Celery worker: thin tasks that run the optimization pipeline and record it in the database."""
