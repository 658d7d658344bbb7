#!/bin/sh
# Start the Claude CLI ($CLAUDEQ_CLAUDE_BIN) so the kernel SIGKILLs it when the worker that spawned it dies.
# The SDK reaps its CLI children only from an atexit hook, which kill -9 and the OOM killer skip; an orphaned CLI
# would keep calling the API. The parent-death signal is tied to the *thread* that forked us, so the worker must
# spawn runs from its long-lived event-loop thread (docs/cli-behaviour.md#process-control-and-liveness). exec keeps
# the CLI's pid (or the sandbox's) equal to ours.
#
# With CLAUDEQ_ENV_KEEP set (the runner always sets it) the CLI starts with only the variables it names: the SDK
# passes the worker's whole environment on, and an allow-list, not a deny-list, keeps its secrets out
# (docs/architecture.md#security-model).
#
# With CLAUDEQ_SANDBOX_ARGS set (a run with tools) the CLI runs in a bubblewrap sandbox of its own, whose arguments
# that file holds (NUL-separated), plus the config dir the CLI is given; inside, a forwarder (socat) carries each
# `port=socket` of CLAUDEQ_SANDBOX_FORWARD from the sandbox's loopback to a socket bound in (the pass-through).
#
# With CLAUDEQ_RUN_UID set (a run with tools, started by a root worker) the CLI runs under that uid,
# CLAUDEQ_RUN_GID and the supplementary groups CLAUDEQ_RUN_GROUPS (comma-separated, may be empty), with
# no_new_privs, and umask 007 so the runs' shared group can write what it creates in the workspace. Dropping
# fails closed: if the switch fails the CLI is not started. The parent-death signal is set after the switch (a
# credential change clears it).
if [ -z "$CLAUDEQ_CLAUDE_BIN" ]; then
    echo "claude-pdeathsig: CLAUDEQ_CLAUDE_BIN is not set" >&2
    exit 127
fi
cli=$CLAUDEQ_CLAUDE_BIN
if [ -n "$CLAUDEQ_RUN_UID" ]; then
    umask 007
    # A resumed session may come from the SDK's session store, materialized into a config dir of its own (the
    # worker's, mode 0700; CLAUDE_CONFIG_DIR is only ever set by the worker and the SDK): make it the run's.
    if [ -n "$CLAUDE_CONFIG_DIR" ] && [ -d "$CLAUDE_CONFIG_DIR" ] &&
        [ "$(stat -c %u "$CLAUDE_CONFIG_DIR")" != "$CLAUDEQ_RUN_UID" ]; then
        chown -R "$CLAUDEQ_RUN_UID:${CLAUDEQ_RUN_GID:?}" "$CLAUDE_CONFIG_DIR" || exit 126
    fi
fi
# What follows the privilege step, built after the CLI's arguments ("$@") and rotated in front of them:
# [env -i NAME=VALUE...] [bwrap --args 3 ... -- sh -c FORWARDER sh] CLI.
n=$#
if [ -n "${CLAUDEQ_ENV_KEEP+x}" ]; then
    set -- "$@" env -i
    for name in $CLAUDEQ_ENV_KEEP; do
        case $name in *[!A-Za-z0-9_]* | [0-9]*) continue ;; esac
        eval "isset=\${$name+x} value=\${$name-}"
        [ -n "$isset" ] && set -- "$@" "$name=$value"
    done
fi
if [ -n "$CLAUDEQ_SANDBOX_ARGS" ]; then
    exec 3<"$CLAUDEQ_SANDBOX_ARGS" || exit 126
    set -- "$@" bwrap --args 3
    if [ -n "$CLAUDE_CONFIG_DIR" ] && [ -d "$CLAUDE_CONFIG_DIR" ]; then
        set -- "$@" --bind "$CLAUDE_CONFIG_DIR" "$CLAUDE_CONFIG_DIR"
    fi
    # Inside: close the arguments' fd, start a forwarder per port, wait (at most ~2 s) until each listens.
    set -- "$@" -- /bin/sh -c '
exec 3<&-
for f in $CLAUDEQ_SANDBOX_FORWARD; do
    socat -lf /dev/null "TCP-LISTEN:${f%%=*},bind=127.0.0.1,reuseaddr,fork" "UNIX-CONNECT:${f#*=}" &
done
for f in $CLAUDEQ_SANDBOX_FORWARD; do
    hex=$(printf "%04X" "${f%%=*}")
    i=0
    while [ $i -lt 200 ] && ! grep -q ":$hex 00000000:0000 0A" /proc/net/tcp; do sleep 0.01; i=$((i + 1)); done
done
exec "$@"' claudeq-sandbox
fi
set -- "$@" "$cli"
while [ "$n" -gt 0 ]; do
    set -- "$@" "$1"
    shift
    n=$((n - 1))
done
if [ -n "$CLAUDEQ_RUN_UID" ]; then
    if command -v setpriv >/dev/null 2>&1; then
        if [ -n "$CLAUDEQ_RUN_GROUPS" ]; then
            exec setpriv --reuid="$CLAUDEQ_RUN_UID" --regid="${CLAUDEQ_RUN_GID:?}" --groups="$CLAUDEQ_RUN_GROUPS" \
                --no-new-privs --pdeathsig KILL -- "$@"
        fi
        exec setpriv --reuid="$CLAUDEQ_RUN_UID" --regid="${CLAUDEQ_RUN_GID:?}" --clear-groups \
            --no-new-privs --pdeathsig KILL -- "$@"
    fi
elif command -v setpriv >/dev/null 2>&1; then
    # No capability reaches the CLI (a worker may hold some, e.g. ambient ones its service manager gave it).
    exec setpriv --pdeathsig KILL --inh-caps=-all --ambient-caps=-all -- "$@"
fi
# No setpriv (util-linux): the same from Python (setgroups, setresgid, setresuid, PR_SET_NO_NEW_PRIVS=38, the
# ambient capabilities cleared, then PR_SET_PDEATHSIG=1), then exec the rest. A failed exec is reported as setpriv words it (`failed to execute PATH:
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
libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL: no capability reaches the CLI
libc.prctl(1, signal.SIGKILL)
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    print(f"claude-pdeathsig: failed to execute {sys.argv[1]}: {os.strerror(exc.errno)}", file=sys.stderr)
    sys.exit(127 if exc.errno == errno.ENOENT else 126)
' "$@"
