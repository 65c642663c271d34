"""The weights in Hugging Face's layout written by every rank at once (finetune_worker.hf_layout), on 2 real CPU
ranks over gloo (torchrun): a random Qwen2-shaped model in bf16, sharded by FSDP2 as the worker shards it, saved into
size-bounded files with their index. transformers' ``from_pretrained`` must load exactly the tensors of the model
(bitwise), PEFT's ``PeftModel.from_pretrained`` the adapter's; every file is created and hashed by one rank, those
hashes are the files' SHA-256, and no rank gathers a whole tensor (every rank's written rows are its own shard's).
"""

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.abspath(__file__)


def _config():
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=3,
                       num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
                       max_position_embeddings=128)


def _reference(lora):
    """The model every rank builds (same seed), unsharded: what the files must hold."""
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(3)
    model = Qwen2ForCausalLM(_config()).to(torch.bfloat16)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"],
                                                 init_lora_weights=False))
    return model


def rank_main(folder, lora):
    """One rank: the model sharded per decoder layer and at the root, then hf_layout.write."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from finetune_worker import distributed, hf_layout

    world = distributed.start(60)
    model = _reference(lora)
    mesh = init_device_mesh("cpu", (world.size,))
    base = model.get_base_model() if lora else model
    for layer in base.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    # what this rank holds of each tensor, to check nobody wrote more than its own rows
    local = {name: p.to_local().numel() for name, p in model.named_parameters()}
    # the largest single write: the staging bound the plan counts (save_chunk_bytes)
    largest = [0]
    pwrite = os.pwrite

    def counted(fd, data, offset):
        largest[0] = max(largest[0], len(data))
        return pwrite(fd, data, offset)

    os.pwrite = counted
    names, digests = hf_layout.write(model, lora, world, folder, max_file_bytes=40_000, chunk_bytes=1000)
    os.pwrite = pwrite
    with open(os.path.join(folder, "rank%d.json" % world.rank), "w") as f:
        json.dump({"names": names, "digests": digests, "local": local, "largest_write": largest[0]}, f)
    distributed.finish()
    distributed.stop()


def _run_ranks(folder, lora):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               HERE, "rank", folder, "lora" if lora else "full"]
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError("the ranks failed (exit %d):\n%s" % (done.returncode, done.stdout[-6000:]))
    return [_json(os.path.join(folder, "rank%d.json" % r)) for r in range(2)]


def _json(path):
    with open(path) as f:
        return json.load(f)


def _sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class HfLayoutTest(unittest.TestCase):
    def test_full_fine_tune_files_load_in_transformers_bitwise(self):
        from safetensors import safe_open
        from transformers import Qwen2ForCausalLM

        with tempfile.TemporaryDirectory() as folder:
            ranks = _run_ranks(folder, lora=False)
            names = ranks[0]["names"]
            self.assertEqual(names, ranks[1]["names"], "every rank computed the same layout")
            weights = [n for n in names if n.endswith(".safetensors")]
            self.assertGreater(len(weights), 2, "size-bounded files: %s" % names)
            self.assertIn("model.safetensors.index.json", names)
            index = _json(os.path.join(folder, "model.safetensors.index.json"))
            self.assertEqual(sorted(set(index["weight_map"].values())), sorted(weights))
            for name in weights:
                with safe_open(os.path.join(folder, name), framework="pt") as f:
                    tensors = {k: f.get_tensor(k) for k in f.keys()}
                # each file stays within the bound unless one tensor alone is larger
                size = sum(t.numel() * t.element_size() for t in tensors.values())
                self.assertTrue(size <= 40_000 or len(tensors) == 1, "%s holds %d bytes" % (name, size))
            # each file hashed once, by the rank that created it, with its real digest
            hashed = {}
            for rank in ranks:
                for name, digest in rank["digests"].items():
                    self.assertNotIn(name, hashed, "%s hashed by two ranks" % name)
                    hashed[name] = digest
            self.assertEqual(sorted(hashed), sorted(weights))
            self.assertTrue(all(ranks[r]["digests"] for r in range(2)), "both ranks hash files")
            for rank in ranks:
                self.assertTrue(0 < rank["largest_write"] <= 1000, "chunk_bytes bounds each copy: %d"
                                % rank["largest_write"])
            for name, digest in hashed.items():
                self.assertEqual(digest, _sha256(os.path.join(folder, name)), name)
            # no rank held more than its half of a sharded tensor while writing it
            reference = _reference(lora=False)
            for name, parameter in reference.named_parameters():
                self.assertLess(ranks[0]["local"][name], parameter.numel(), name)
            reference.config.save_pretrained(folder)
            loaded = Qwen2ForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
            expected = reference.state_dict()
            for name, tensor in loaded.state_dict().items():
                self.assertTrue(torch.equal(tensor, expected[name]), name)
            self.assertEqual(loaded.model.embed_tokens.weight.dtype, torch.bfloat16)

    def test_lora_adapter_loads_in_peft_bitwise(self):
        from peft import PeftModel
        from transformers import Qwen2ForCausalLM

        with tempfile.TemporaryDirectory() as folder:
            ranks = _run_ranks(folder, lora=True)
            self.assertEqual(ranks[0]["names"], ["adapter_model.safetensors"])
            reference = _reference(lora=True)
            reference.peft_config["default"].save_pretrained(folder)
            torch.manual_seed(3)
            base = Qwen2ForCausalLM(_config()).to(torch.bfloat16)
            loaded = PeftModel.from_pretrained(base, folder)
            expected = dict(reference.named_parameters())
            compared = 0
            for name, parameter in loaded.named_parameters():
                if "lora_" in name:
                    self.assertTrue(torch.equal(parameter, expected[name]), name)
                    compared += 1
            self.assertEqual(compared, 3 * 3 * 2, "every LoRA A and B of 3 targets in 3 layers")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "rank":
        rank_main(sys.argv[2], sys.argv[3] == "lora")
    else:
        unittest.main()
