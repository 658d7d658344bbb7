#!/bin/sh
# Start the Claude CLI ($CLAUDEQ_CLAUDE_BIN) so the kernel SIGKILLs it when the worker that spawned it dies.
# The SDK reaps its CLI children only from an atexit hook, which kill -9 and the OOM killer skip; an orphaned CLI
# would keep calling the API. The parent-death signal is tied to the *thread* that forked us, so the worker must
# spawn runs from its long-lived event-loop thread (docs/cli-behaviour.md#process-control-and-liveness). exec keeps
# the CLI's pid equal to ours.
if [ -z "$CLAUDEQ_CLAUDE_BIN" ]; then
    echo "claude-pdeathsig: CLAUDEQ_CLAUDE_BIN is not set" >&2
    exit 127
fi
if command -v setpriv >/dev/null 2>&1; then
    exec setpriv --pdeathsig KILL -- "$CLAUDEQ_CLAUDE_BIN" "$@"
fi
# No setpriv (util-linux): the same prctl(PR_SET_PDEATHSIG=1, SIGKILL) from Python, then exec the CLI. A failed exec
# is reported as setpriv words it (`failed to execute PATH: STRERROR`, exit 127/126): the worker reads that line.
exec "${CLAUDEQ_PYTHON:-python3}" -c '
import ctypes, errno, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
try:
    os.execv(sys.argv[1], sys.argv[1:])
except OSError as exc:
    print(f"claude-pdeathsig: failed to execute {sys.argv[1]}: {os.strerror(exc.errno)}", file=sys.stderr)
    sys.exit(127 if exc.errno == errno.ENOENT else 126)
' "$CLAUDEQ_CLAUDE_BIN" "$@"
