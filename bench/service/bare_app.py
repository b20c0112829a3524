"""The yardstick: a bare FastAPI app served exactly as `fuseforge serve` serves the API, with
one async route (run on the event loop, as FuseForge's job read is: the yardstick the service
is held to) and one sync route (run in FastAPI's threadpool: a weaker one, kept beside it)."""

from fastapi import FastAPI

app = FastAPI()


@app.get("/v1/jobs/{job_id}")
async def read_job(job_id: str) -> dict[str, str]:
    return {"id": job_id, "status": "succeeded"}


@app.get("/sync/v1/jobs/{job_id}")
def read_job_in_a_thread(job_id: str) -> dict[str, str]:
    return {"id": job_id, "status": "succeeded"}


if __name__ == "__main__":
    import sys

    import uvicorn

    # As `fuseforge serve` runs the API: one process, uvicorn's defaults, info logging.
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="info")
