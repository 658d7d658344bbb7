"""The model-service pass-through: the local HTTP server every run's CLI talks to instead of the model service
(`server`: it swaps the run's stand-in token for the account's own and forwards only to the account's upstream),
the rate-limit headers it reads from each response (`limit_headers`), and the digests of the prompt prefixes each
request caches (`prefixes`).

Imports from the worker: redaction.
"""
