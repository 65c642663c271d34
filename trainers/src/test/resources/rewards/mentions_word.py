"""A reward program for the tests: 1 if the completion mentions the row's word, plus 0.1 per completion seen so far
in this process (so a test can tell that one process serves the whole run)."""
import json
import sys

seen = 0
for line in sys.stdin:
    row = json.loads(line)
    word = row["fields"]["word"]
    score = (1.0 if word in row["completion"] else 0.0) + 0.1 * seen
    seen += 1
    print(score, flush=True)
