"""FuseForge REST API (FastAPI). `api.db` and `api.settings` import no FastAPI so the worker can use them."""
