"""Which account runs a job: `AccountManager` (`manager`: slots, a tenant's admission, spend, and the rate-limit and
auth signals turned into account state), the pure choice among accounts (`choice`) and the waiting line's ranks
(`waiting_line`).

Imports from the worker: loop_host, store, passthrough, run.
"""
