"""HTTP plumbing under the routes: request ids, body deadlines, idempotent POSTs, path ids, the OpenAPI
document and /docs.
"""
