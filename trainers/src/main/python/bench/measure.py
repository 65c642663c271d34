"""What the peers measure about themselves and the machine: CPU seconds, the machine's busy share, peak resident
memory, and the wall clock since the process started (``STARTED``: peers.py imports this module before torch, so the
wall time includes the import, as finetune's includes the JVM's start)."""
import os
import time

STARTED = time.time()


class Counters:
    """This process's CPU seconds, the machine's busy ticks (/proc/stat) and the wall clock, read together."""

    def __init__(self):
        t = os.times()
        self.own = t.user + t.system
        self.wall = time.perf_counter()
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        # user nice system irq softirq steal, as bench-train's CpuCounters
        self.busy = sum(v[i] for i in (0, 1, 2, 5, 6, 7) if i < len(v)) / os.sysconf("SC_CLK_TCK")

    def cpu_per_wall(self, later):
        return (later.own - self.own) / (later.wall - self.wall)

    def other_share(self, later):
        capacity = (later.wall - self.wall) * (os.cpu_count() or 1)
        return max(0.0, (later.busy - self.busy) - (later.own - self.own)) / capacity


def peak_rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def omp_wait_policy():
    return os.environ.get("OMP_WAIT_POLICY", "default")
