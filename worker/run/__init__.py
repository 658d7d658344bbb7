"""One attempt of one job through claude-agent-sdk: the runner (`runner`), what the CLI is given (`options`,
`cli_env`), how it is started and stopped (`launcher` with `claude-pdeathsig.sh`, `procs`, `watchdog`), warm CLIs
(`warm`), the fleet tools a run may call (`tools`), the only reader of SDK messages (`parse`), the structured-output
check (`output_check`), prices, run directories (`workdirs`) and the benchmarks' fake runner. Its port — what an
attempt is asked and what it observed, where its events go, the runner as the engine uses it — is `outcome`.

Imports from the worker: redaction, passthrough.
"""
