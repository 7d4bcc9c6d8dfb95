"""A thread's real-time scheduling: for the threads that must act at an instant (a release,
a CAMP sample) rather than when a core comes free."""

from __future__ import annotations

import os


def set_policy(policy: int, priority: int) -> bool:
    """This thread's scheduling policy; False where it may not (no CAP_SYS_NICE)."""
    try:
        os.sched_setscheduler(0, policy, os.sched_param(priority))
    except PermissionError:
        return False
    return True
