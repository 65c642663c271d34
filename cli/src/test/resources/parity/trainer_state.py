"""Reads a checkpoint's trainer_state.json with transformers' own TrainerState.load_from_json and prints its
global_step and the number of log_history entries into OUT.

usage: trainer_state.py CHECKPOINT_DIR OUT
"""
import sys

from transformers import TrainerState

state = TrainerState.load_from_json(f"{sys.argv[1]}/trainer_state.json")
open(sys.argv[2], "w").write(f"{state.global_step} {len(state.log_history)}\n")
