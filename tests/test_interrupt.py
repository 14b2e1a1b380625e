"""SIGTERM as an interruption (journal.interrupt): the cleanup it starts runs to its end."""

from __future__ import annotations

import os
import signal
import time

import pytest

from journal.interrupt import terminated_as_interrupted


def test_sigterm_unwinds_once_and_a_second_one_does_not_cut_the_cleanup_short() -> None:
    cleaned: list[str] = []
    with pytest.raises(SystemExit) as ended:
        with terminated_as_interrupted():
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises before this ends
                cleaned.append("not interrupted")
            finally:
                os.kill(os.getpid(), signal.SIGTERM)  # another stop, during the cleanup
                time.sleep(0.05)
                cleaned.append("cleaned up")
    assert ended.value.code == 128 + signal.SIGTERM
    assert cleaned == ["cleaned up"]
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN  # restored on leaving


def test_a_sigterm_ignored_on_entry_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with terminated_as_interrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
