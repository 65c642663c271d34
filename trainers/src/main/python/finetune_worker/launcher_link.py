"""What a rank shares with the process that launched it (the Java launcher, through torchrun or directly): the JSON
events it reports on stdout, the launcher's request to stop (SIGUSR1), and the launcher's life, which bounds its own.

Apart from the training loop (:mod:`train`) because none of it is about training: it is the protocol between the
two processes, and the launcher's side of it is ``RankRelay`` (events) and ``FsdpBackend`` (signals).
"""

import json
import os
import signal
import sys
import threading
import time


class Reporter:
    """JSON lines on stdout; every line names its rank and host. Rank 0 speaks for the run."""

    def __init__(self, world):
        self.world = world

    def emit(self, event, everyone=False, **fields):
        if self.world is not None and self.world.rank != 0 and not everyone:
            return
        line = {"event": event}
        if self.world is not None:
            line.update(rank=self.world.rank, host=self.world.host)
        line.update(fields)
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()


def follow_launcher():
    """Ends this rank when the launcher's process is gone (killed with SIGKILL, say): the output folder's lock died
    with it, so a rank that went on writing there could mix its files with the next run's."""
    launcher = os.environ.get("FINETUNE_LAUNCHER_PID")
    if not launcher:
        return

    def watch():
        while True:
            time.sleep(1.0)
            try:
                os.kill(int(launcher), 0)
            except ProcessLookupError:
                sys.stderr.write("the launcher (pid %s) is gone: stopping this rank\n" % launcher)
                os._exit(1)
            except OSError:
                pass  # alive, owned by another user

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


_STOP = {"signal": None}


def _on_stop_request(signum, frame):
    """SIGUSR1 from the launcher: stop after the current step, with a checkpoint (the flag is read at the step's
    all-reduce, so every rank stops after the same step)."""
    _STOP["signal"] = signum


def listen_for_stop():
    """Installs the SIGUSR1 handler; first of all in a rank: the launcher may ask as soon as it has the rank's pid."""
    signal.signal(signal.SIGUSR1, _on_stop_request)


def stop_requested():
    """Whether the launcher asked this rank to stop after the current step."""
    return _STOP["signal"] is not None
