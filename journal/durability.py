"""When appended bytes are forced to stable storage.

Every mode survives `kill -9`: a commit is one write() of whole lines, and the kernel keeps it
once write() returns. Syncing only matters for power loss and kernel crashes.

The default is `Durability.always()`: one fdatasync per commit. It costs about 170 us per
commit on this kind of machine, nothing next to a model call that takes seconds, and it means
an acknowledged turn survives a power cut. Bulk writers (imports, benchmarks, generators) can
choose `batch(...)` or `never()`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Durability:
    """A sync policy: `every` commits or `interval_ms` since the last sync, whichever first.

    `every=1` syncs each commit; `every=0` with `interval_ms=None` never syncs, not even on
    close(); a batch policy syncs what is pending on close(). The interval is checked when a
    commit happens; there is no background thread, so an idle writer's last batch waits for
    the next commit or close().
    """

    every: int = 1
    interval_ms: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.every, bool) or not isinstance(self.every, int) or self.every < 0:
            raise ValueError(f"every must be a whole number of commits, 0 or more, not "
                             f"{self.every!r}")
        interval = self.interval_ms
        if interval is not None and (isinstance(interval, bool)
                                     or not isinstance(interval, (int, float))
                                     or not interval > 0):
            raise ValueError(f"interval_ms must be a number of milliseconds above 0 (inf: no "
                             f"time bound), or None, not {interval!r}")

    @classmethod
    def always(cls) -> Durability:
        return cls(every=1)

    @classmethod
    def batch(cls, every: int = 100, interval_ms: float | None = 1000.0) -> Durability:
        return cls(every=every, interval_ms=interval_ms)

    @classmethod
    def never(cls) -> Durability:
        return cls(every=0, interval_ms=None)

    @classmethod
    def parse(cls, text: str) -> Durability:
        """Parse 'always', 'never', 'batch', 'batch:N' or 'batch:N:MS'."""
        name, *args = text.strip().lower().split(":")
        if name == "always" and not args:
            return cls.always()
        if name == "never" and not args:
            return cls.never()
        if name == "batch" and len(args) <= 2:
            try:
                every = int(args[0]) if args else 100
                interval = float(args[1]) if len(args) > 1 else 1000.0
            except ValueError:
                pass
            else:
                if every >= 1 and interval > 0:
                    return cls.batch(every, interval)
        raise ValueError(
            f"bad durability {text!r}: use 'always', 'never', 'batch', 'batch:N' or 'batch:N:MS'"
        )

    def describe(self) -> str:
        if self.every == 1:
            return "always"
        if self.every == 0 and self.interval_ms is None:
            return "never"
        interval = "inf" if self.interval_ms is None else f"{self.interval_ms:g}"
        return f"batch:{self.every}:{interval}"  # parse() reads "inf" as no time bound


class SyncClock:
    """Tracks commits since the last sync and says when the policy wants one."""

    def __init__(self, policy: Durability) -> None:
        self.policy = policy
        self.pending = 0
        self.last_sync = time.monotonic()

    def due(self) -> bool:
        self.pending += 1
        p = self.policy
        if p.every and self.pending >= p.every:
            return True
        if p.interval_ms is not None:
            return (time.monotonic() - self.last_sync) * 1000.0 >= p.interval_ms
        return False

    def synced(self) -> None:
        self.pending = 0
        self.last_sync = time.monotonic()
