"""finetune_worker.vocab_parallel on 2 real CPU ranks over gloo (torchrun): a frozen table of 101 rows (51 on rank 0,
50 on rank 1) tied to the head, each rank with its own number of positions (so the exchanged rows are padded), chunks
of 8 positions. The lookup must equal ``F.embedding`` over the whole table bitwise, also from the table gathered for
sampling, where the ranks look up different numbers of times; the SFT loss and its input gradient must equal
``head_loss.sft_loss`` over the whole table (to 1e-6, relative: the sums over the vocabulary are split between
ranks); the gathered table must be the table; and no rank may hold more than its own rows."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.abspath(__file__)
VOCAB, DIM = 101, 24


def _table():
    torch.manual_seed(5)
    return torch.randn(VOCAB, DIM, dtype=torch.float64)


def _inputs(rank):
    """Rank 0: 2 x 7 positions, rank 1: 1 x 5; ids over the whole vocabulary, some targets -100."""
    generator = torch.Generator().manual_seed(11 + rank)
    rows, columns = (2, 7) if rank == 0 else (1, 5)
    ids = torch.randint(0, VOCAB, (rows, columns), generator=generator)
    hidden = torch.randn(rows, columns, DIM, dtype=torch.float64, generator=generator)
    targets = torch.randint(0, VOCAB, (rows, columns), generator=generator)
    targets[0, 0] = -100
    return ids, hidden, targets


def rank_main(folder):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from finetune_worker import distributed, head_loss, vocab_parallel

    world = distributed.start(60)
    mesh = init_device_mesh("cpu", (world.size,))
    table = _table()
    rows, first = vocab_parallel._rows(VOCAB, world.size, world.rank)
    sharded = torch.nn.Parameter(DTensor.from_local(table[first:first + rows].clone(), mesh, [Shard(0)],
                                                    run_check=False, shape=table.shape, stride=table.stride()),
                                 requires_grad=False)
    embedding = torch.nn.Embedding(VOCAB, DIM)
    embedding._parameters["weight"] = sharded
    embedding._finetune_vocab = vocab_parallel._Table(mesh.get_group())
    ids, hidden, targets = _inputs(world.rank)
    looked_up = vocab_parallel._lookup_forward(embedding, ids)
    # gathered (GRPO's sampling): ranks run different numbers of lookups, which exchange nothing
    holder = torch.nn.Module()
    holder.get_input_embeddings = lambda: embedding
    with vocab_parallel.gathered(holder):
        alone = [vocab_parallel._lookup_forward(embedding, ids) for _ in range(1 + world.rank)]

    x = hidden.clone().requires_grad_(True)
    flat, valid = head_loss._flat(x, targets)[1:]
    loss = vocab_parallel._SftLoss.apply(x.reshape(-1, DIM), flat, valid.float(), sharded, 8)
    loss.backward()
    expected_x = hidden.clone().requires_grad_(True)
    expected = head_loss.sft_loss(expected_x, table, targets, rows=8)
    expected.backward()
    gathered = vocab_parallel.full(sharded)
    result = {
        "lookup_equal": bool(torch.equal(looked_up, torch.nn.functional.embedding(ids, table))),
        "gathered_equal": all(torch.equal(a, looked_up) for a in alone),
        "loss": float(loss), "expected_loss": float(expected),
        "grad_error": float((x.grad - expected_x.grad).abs().max() / expected_x.grad.abs().max()),
        "full_equal": bool(torch.equal(gathered, table)),
        "local_rows": sharded.to_local().shape[0],
    }
    with open(os.path.join(folder, "rank%d.json" % world.rank), "w") as f:
        json.dump(result, f)
    distributed.finish()
    distributed.stop()


class VocabParallelTest(unittest.TestCase):
    def test_lookup_loss_and_gradient_equal_the_whole_table(self):
        with tempfile.TemporaryDirectory() as folder:
            env = dict(os.environ, OMP_NUM_THREADS="1")
            command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                       HERE, "rank", folder]
            done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  timeout=600)
            self.assertEqual(0, done.returncode, done.stdout[-6000:])
            ranks = []
            for rank in range(2):
                with open(os.path.join(folder, "rank%d.json" % rank)) as f:
                    ranks.append(json.load(f))
        self.assertEqual([51, 50], [r["local_rows"] for r in ranks])
        for rank, result in enumerate(ranks):
            self.assertTrue(result["lookup_equal"], "rank %d lookup" % rank)
            self.assertTrue(result["gathered_equal"], "rank %d lookup from the gathered table" % rank)
            self.assertTrue(result["full_equal"], "rank %d gathered table" % rank)
            self.assertAlmostEqual(result["expected_loss"], result["loss"],
                                   delta=1e-6 * abs(result["expected_loss"]), msg="rank %d loss" % rank)
            self.assertLess(result["grad_error"], 1e-6, "rank %d input gradient" % rank)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "rank":
        rank_main(sys.argv[2])
    else:
        unittest.main()
