"""Entry point: ``torchrun ... --no-python python -I -u COPY/finetune_worker/__main__.py PLAN.json``, or ``... check``
(can this interpreter run the worker, and what does the worker support), ``... capabilities`` (that alone),
``... verify-checkpoint FOLDER``, ``... generate REQUEST.json RESULT.json`` (``finetune generate`` for the families
the in-JVM model does not implement: :mod:`generate`) and ``... meta-terms PLAN.json RESULT.json [RANK ...]`` (a plan's
tensor terms per rank, computed on the meta device: :mod:`meta_terms`).

The launcher runs this file from the worker's own private copy in isolated mode (``-I``), so neither the working
folder nor this file's folder is on ``sys.path``: the copy's folder is put there here, and nothing else.
(``python -m finetune_worker`` with ``PYTHONPATH`` still works, for tests.)
"""

import json
import os
import sys


def main(argv):
    if len(argv) == 2 and argv[1] == "check":
        from finetune_worker import environment

        return environment.check()
    if len(argv) == 2 and argv[1] == "capabilities":
        from finetune_worker import environment

        print(json.dumps(environment.capabilities()))
        return 0
    if len(argv) == 3 and argv[1] == "verify-checkpoint":
        # the launcher's question before a resume: can this checkpoint's DCP metadata be read safely?
        from finetune_worker import safe_dcp

        print(json.dumps({"problem": safe_dcp.check(argv[2])}))
        return 0
    if len(argv) >= 4 and argv[1] == "meta-terms":
        # the plan's tensor terms as a rank would hold them, computed on the meta device: meta_terms.py
        from finetune_worker import meta_terms

        return meta_terms.main(argv[2], argv[3], [int(r) for r in argv[4:]])
    if len(argv) == 4 and argv[1] == "generate":
        from finetune_worker import generate

        return generate.main(argv[2], argv[3])
    if len(argv) != 2:
        print("usage: python -m finetune_worker PLAN.json | check | capabilities | verify-checkpoint FOLDER"
              " | generate REQUEST.json RESULT.json | meta-terms PLAN.json RESULT.json [RANK ...]", file=sys.stderr)
        return 2
    from finetune_worker import train

    code = train.main(argv[1])
    # The run is over: its process group destroyed, every file written and closed. Python's finalization would
    # still run, and a 2-rank gloo run aborted there about once in 60 (SIGABRT, "terminate called without an
    # active exception", after its last line): the core shows Py_FinalizeEx's garbage collection while a
    # ProcessGroupGloo worker thread, still alive because the device mesh keeps its group referenced, is unwound
    # by the interpreter's shutdown through a noexcept C++ frame. Nothing of ours runs at finalization: skip it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    if not __package__:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    sys.exit(main(sys.argv))
