"""Each job runs in a child process the worker watches: limits, crashes, cancel."""
