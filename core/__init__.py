"""What the API and the worker share: settings, the database, artifact storage, the job contract
and the queue names. It imports neither `api` nor `worker`; both import it."""
