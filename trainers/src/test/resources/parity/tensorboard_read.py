"""Reads a folder of TensorBoard event files with TensorBoard's own loader; prints {tag: [[step, value], ...]}.

Usage: python tensorboard_read.py LOG_DIR. Needs the `tensorboard` package, pinned in requirements.txt for the tests.
"""
import json
import sys

from tensorboard.backend.event_processing import event_accumulator

acc = event_accumulator.EventAccumulator(sys.argv[1], size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
out = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
print(json.dumps(out, sort_keys=True))
