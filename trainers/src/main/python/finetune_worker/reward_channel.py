"""GRPO's rewards come from the launcher: the recipe's reward functions (built-in, regex or commands, through
``RewardChannel.java``) and the advantages and reward/completion metrics are computed in Java. Rank 0 gathers every
rank's completions, sends one JSON line per round to the loopback port in ``FINETUNE_REWARD_PORT`` and hands each
rank its answers.
"""

import json
import os
import socket

import torch.distributed as dist


class RewardChannel:
    """Rank 0's connection to the launcher's reward channel (one JSON line out, one back)."""

    def __init__(self):
        self.stream = None

    def ask(self, request):
        if self.stream is None:
            port = os.environ.get("FINETUNE_REWARD_PORT")
            if not port:
                raise RuntimeError("FINETUNE_REWARD_PORT is not set: GRPO's rewards are scored by the finetune "
                                   "launcher, start the run with it")
            connection = socket.create_connection(("127.0.0.1", int(port)))
            self.stream = connection.makefile("rwb")
            self.stream.write((os.environ.get("FINETUNE_REWARD_TOKEN", "") + "\n").encode("utf-8"))
        self.stream.write((json.dumps(request) + "\n").encode("utf-8"))
        self.stream.flush()
        line = self.stream.readline()
        if not line:
            raise RuntimeError("the launcher closed the reward channel")
        return json.loads(line)


def score(channel, split, batches, completions, world):
    """Every rank's completions to the launcher through rank 0; this rank's answers back, in order."""
    mine = [{"index": b.key[1], "completions": c} for b, c in zip(batches, completions)]
    parts = [None] * world.size if world.rank == 0 else None
    dist.gather_object(mine, parts, dst=0)
    answer = [None]
    if world.rank == 0:
        try:
            reply = channel.ask({"split": split, "batches": [item for part in parts for item in part]})
        except Exception as error:  # noqa: BLE001 - every rank stops with the same message
            reply = {"error": "%s: %s" % (type(error).__name__, error)}
        if "error" in reply:
            answer = [{"error": reply["error"]}]
        else:
            answers, at = [], 0
            for part in parts:
                answers.append(reply["batches"][at:at + len(part)])
                at += len(part)
            answer = [{"ranks": answers}]
    dist.broadcast_object_list(answer, src=0)
    if "error" in answer[0]:
        raise RuntimeError("reward channel: " + answer[0]["error"])
    return answer[0]["ranks"][world.rank]
