"""Uploads: the multipart form, streaming to disk while hashing, the quota, model checks, one stored
copy per hash.
"""
