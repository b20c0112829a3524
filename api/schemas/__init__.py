"""Request and response bodies of the REST API."""
