"""Jobs: the commands (create, cancel), their inputs' checks, the read model, lists, events and
streams.
"""
