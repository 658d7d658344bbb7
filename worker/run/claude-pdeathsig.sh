#!/bin/sh
# Start the Claude CLI ($CLAUDEQ_CLAUDE_BIN) so the kernel SIGKILLs it when the worker that spawned it dies.
# The SDK reaps its CLI children only from an atexit hook, which kill -9 and the OOM killer skip; an orphaned CLI
# would keep calling the API. The parent-death signal is tied to the *thread* that forked us, so the worker must
# spawn runs from its long-lived event-loop thread (docs/cli-behaviour.md#process-control-and-liveness). exec keeps
# the CLI's pid equal to ours.
#
# With CLAUDEQ_RUN_UID set (a run that may execute commands or write files, started by a root worker) the CLI runs
# under that uid, CLAUDEQ_RUN_GID and the supplementary groups CLAUDEQ_RUN_GROUPS (comma-separated, may be empty),
# with no_new_privs, and umask 007 so the runs' shared group can write what it creates in the workspace. Dropping
# fails closed: if the switch fails the CLI is not started. The parent-death signal is set after the switch (a
# credential change clears it).
if [ -z "$CLAUDEQ_CLAUDE_BIN" ]; then
    echo "claude-pdeathsig: CLAUDEQ_CLAUDE_BIN is not set" >&2
    exit 127
fi
if [ -n "$CLAUDEQ_RUN_UID" ]; then
    umask 007
    # A resumed session may come from the SDK's session store, materialized into a config dir of its own (the
    # worker's, mode 0700; CLAUDE_CONFIG_DIR is only ever set by the worker and the SDK): make it the run's.
    if [ -n "$CLAUDE_CONFIG_DIR" ] && [ -d "$CLAUDE_CONFIG_DIR" ] &&
        [ "$(stat -c %u "$CLAUDE_CONFIG_DIR")" != "$CLAUDEQ_RUN_UID" ]; then
        chown -R "$CLAUDEQ_RUN_UID:${CLAUDEQ_RUN_GID:?}" "$CLAUDE_CONFIG_DIR" || exit 126
    fi
    if command -v setpriv >/dev/null 2>&1; then
        if [ -n "$CLAUDEQ_RUN_GROUPS" ]; then
            set -- --groups="$CLAUDEQ_RUN_GROUPS" -- "$CLAUDEQ_CLAUDE_BIN" "$@"
        else
            set -- --clear-groups -- "$CLAUDEQ_CLAUDE_BIN" "$@"
        fi
        exec setpriv --reuid="$CLAUDEQ_RUN_UID" --regid="${CLAUDEQ_RUN_GID:?}" --no-new-privs --pdeathsig KILL "$@"
    fi
elif command -v setpriv >/dev/null 2>&1; then
    exec setpriv --pdeathsig KILL -- "$CLAUDEQ_CLAUDE_BIN" "$@"
fi
# No setpriv (util-linux): the same from Python (setgroups, setresgid, setresuid, PR_SET_NO_NEW_PRIVS=38, then
# PR_SET_PDEATHSIG=1), then exec the CLI. A failed exec is reported as setpriv words it (`failed to execute PATH:
# STRERROR`, exit 127/126): the worker reads that line.
exec "${CLAUDEQ_PYTHON:-python3}" -c '
import ctypes, errno, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
uid = os.environ.get("CLAUDEQ_RUN_UID")
if uid:
    gid = int(os.environ["CLAUDEQ_RUN_GID"])
    os.setgroups([int(g) for g in os.environ.get("CLAUDEQ_RUN_GROUPS", "").split(",") if g])
    os.setresgid(gid, gid, gid)
    os.setresuid(int(uid), int(uid), int(uid))
    if os.getresuid() != (int(uid),) * 3 or libc.prctl(38, 1, 0, 0, 0) != 0:
        sys.exit("claude-pdeathsig: could not switch to the run uid")
libc.prctl(1, signal.SIGKILL)
try:
    os.execv(sys.argv[1], sys.argv[1:])
except OSError as exc:
    print(f"claude-pdeathsig: failed to execute {sys.argv[1]}: {os.strerror(exc.errno)}", file=sys.stderr)
    sys.exit(127 if exc.errno == errno.ENOENT else 126)
' "$CLAUDEQ_CLAUDE_BIN" "$@"
