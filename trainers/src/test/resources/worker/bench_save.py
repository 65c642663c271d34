"""Benchmark (not a test): the time of one save of the trained weights on W ranks, before and after #21.

    torchrun --standalone --nproc-per-node 2 bench_save.py OUT_DIR [qwen0.5b|tiny]

``before``: what every save did until #21: the full state gathered (get_model_state_dict, full_state_dict,
cpu_offload), rank 0 writing one model.safetensors and hashing it alone while the others wait. ``after``:
finetune_worker.hf_layout.write: every rank its own rows, each file hashed by its creator. Same random model
(Qwen2.5-0.5B's shape, bf16, FSDP2 per decoder layer) and the same folder; rank 0 prints one line per variant with
the seconds (the slowest rank's) and rank 0's peak resident set so far. Run it alone on a quiet machine
(PYTHONPATH=trainers/src/main/python, OMP_NUM_THREADS=1).
"""

import os
import resource
import sys
import time

import torch
import torch.distributed as dist


def _model(shape):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if shape == "tiny":
        config = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=2)
    else:  # Qwen2.5-0.5B's config.json
        config = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                             num_attention_heads=14, num_key_value_heads=2, tie_word_embeddings=True,
                             max_position_embeddings=32768)
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(torch.bfloat16)


def _before(model, world, folder):
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from finetune_worker import hf_layout

    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if world.rank == 0:
        state.pop("lm_head.weight", None)
        path = os.path.join(folder, "model.safetensors")
        save_file({k: v.contiguous() for k, v in state.items()}, path, metadata={"format": "pt"})
        hf_layout.sha256(path)
    dist.barrier()


def _after(model, world, folder):
    from finetune_worker import hf_layout

    hf_layout.write(model, False, world, folder, 5 * 10**9, 64 << 20)
    dist.barrier()


def main(folder, shape):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from finetune_worker import distributed

    world = distributed.start(1800)
    model = _model(shape)
    mesh = init_device_mesh("cpu", (world.size,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # after first: the peak resident set is a high-water mark, so the second variant's includes the first's
    for name, variant in (("after (every rank its rows)", _after), ("before (gather to rank 0)", _before)):
        target = os.path.join(folder, name.split()[0])
        if world.rank == 0:
            os.makedirs(target, exist_ok=True)
        dist.barrier()
        started = time.perf_counter()
        variant(model, world, target)
        seconds = distributed.max_all(time.perf_counter() - started, world.device)
        if world.rank == 0:
            print("%s: %.2f s on %d ranks, rank 0 peak RSS %.0f MiB" % (
                name, seconds, world.size, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), flush=True)
    distributed.finish()
    distributed.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "qwen0.5b")
