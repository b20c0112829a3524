"""FuseForge REST API (FastAPI): HTTP only. Routes parse and call services; state lives in `core`."""
