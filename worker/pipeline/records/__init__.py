"""What a job run writes down: its events and outcome, benchmark records and keys, regressions, lost
jobs.
"""
