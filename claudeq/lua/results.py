"""The answers of the Redis scripts that answer with a code: one IntEnum per kind, shared by the `.lua` files and
the Python that reads their replies (docs/architecture.md#lua-scripts).

A script names a member as `{{Slot.RESERVED}}`; the loader (`claudeq.lua.script`) puts the integer in its place, so
Redis runs the same literal it always did. An IntEnum member equals its integer: a reply is compared with it as it
comes (`got == Slot.ACQUIRED`).
"""

from __future__ import annotations

from enum import IntEnum


class Slot(IntEnum):
    """May a run take a slot on an account: the gate's answer (lib/gate.lua), ACQUIRE's (account/acquire.lua) and
    START's (job/start.lua)."""

    OPEN = 1  # the gate: a new run may start
    ACQUIRED = 1  # ACQUIRE, START: the slot is the job's (or already was: refreshed)
    FULL = 0  # every slot is taken
    DISABLED = -1  # the account is disabled
    COOLING = -2  # the account, or the job's model family, is cooling down
    HELD = -3  # what the API said is left is spoken for by the runs in flight (lib/held.lua)
    IN_LINE = -4  # the free slots belong to waiters ranked before the job
    RESERVED = -5  # a window at its ceiling, or predicted to pass it
    RAMPING = -6  # starts are paced after a reset: the next one is due a little later
    START_LOST = -9  # START: the slot was taken but the run's fence no longer holds the job


class Reserve(IntEnum):
    """RESERVE's answer (tenant/reserve.lua): may a run start within its caps on runs and spend."""

    ADMITTED = 1  # admitted (with its grant)
    AT_MAX = 0  # as many runs in flight as the cap allows
    OVER_BUDGET = -4  # nothing (or less than one turn) left in the window
    RESERVED = -5  # what is left is reserved by the runs in flight


class Write(IntEnum):
    """A fenced write's answer: WRITE's (job/write.lua, lib/write.lua) and RECOVER's (job/recover.lua)."""

    LOST = 0  # the fence no longer holds the running job (RECOVER: nothing to recover): nothing written
    WRITTEN = 1  # written (RECOVER: recovered)
    CANCELLED = 2  # the job's cancel flag was set: it ended `cancelled` instead of going to queued or deferred


#: The enums a script may name, by the name it uses.
RESULTS: dict[str, type[IntEnum]] = {"Slot": Slot, "Reserve": Reserve, "Write": Write}
