"""A callback URL's rules, the address guard and the signature: what a job's webhook may point at,
without sending.
"""
