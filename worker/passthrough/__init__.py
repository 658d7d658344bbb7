"""The model-service pass-through: the local HTTP server every run's CLI talks to instead of the model service
(`server`: it swaps the run's stand-in token for the account's own and forwards only to the account's upstream),
and the rate-limit headers it reads from each response (`limit_headers`).

Imports from the worker: redaction.
"""
