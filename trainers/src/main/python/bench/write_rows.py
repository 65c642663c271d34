"""N alpaca rows of short English text, as rows.parquet (pyarrow, snappy) and rows.jsonl, for DataReadBench.
Usage: write_rows.py N OUT_DIR"""
import json
import os
import random
import sys

import pyarrow as pa
import pyarrow.parquet as pq

n, out = int(sys.argv[1]), sys.argv[2]
rnd = random.Random(0)
words = "once upon a time there was a little girl named lily she liked to play with her ball in the park".split()


def text(k):
    return " ".join(rnd.choice(words) for _ in range(k))


rows = [{"instruction": text(12), "input": text(rnd.randint(0, 8)), "output": text(30)} for _ in range(n)]
os.makedirs(out, exist_ok=True)
pq.write_table(pa.Table.from_pylist(rows), os.path.join(out, "rows.parquet"))
with open(os.path.join(out, "rows.jsonl"), "w", encoding="utf-8") as f:
    for row in rows:
        f.write(json.dumps(row) + "\n")
print(f"wrote {n} rows to {out}")
