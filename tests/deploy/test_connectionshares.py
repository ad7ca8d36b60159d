from __future__ import annotations

import os
import subprocess
import sys

from deploy.connectionshares import ConnectionShares


def dead_pid() -> int:
    """The process ID of a process that has exited and been reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_fewest_elsewhere__the_least_loaded_other_worker():
    shares = ConnectionShares(slots=4)
    mine = shares.claim(os.getpid())
    other = shares.claim(os.getppid())
    shares.hold(mine, 9)
    shares.hold(other, 3)

    assert shares.fewest_elsewhere(mine) == 3
    assert shares.fewest_elsewhere(other) == 9


def test_fewest_elsewhere__alone__none():
    shares = ConnectionShares(slots=4)
    mine = shares.claim(os.getpid())

    assert shares.fewest_elsewhere(mine) is None


def test_dead_worker__not_counted_and_its_slot_reused():
    shares = ConnectionShares(slots=2)
    mine = shares.claim(os.getpid())
    dead = shares.claim(dead_pid())
    shares.hold(mine, 5)

    assert shares.fewest_elsewhere(mine) is None
    assert shares.claim(os.getppid()) == dead
    assert shares.fewest_elsewhere(mine) == 0


def test_every_slot_held__none_and_released_slot_claimed_again():
    shares = ConnectionShares(slots=1)
    mine = shares.claim(os.getpid())

    assert shares.claim(os.getppid()) is None
    shares.release(mine)
    assert shares.claim(os.getppid()) == mine
