"""Which account runs a job: `AccountManager` (`manager`: slots and the waiting lines; its parts `TenantAdmission`,
`admission`: a tenant's admission of runs, its share and spend, and `AccountSignals`, `signals`: the rate-limit and
auth signals turned into account state), the pure choice among accounts (`choice`) and the waiting line's ranks
(`waiting_line`).

Imports from the worker: loop_host, store, passthrough, run.
"""
