"""Entry point: ``torchrun ... -m finetune_worker PLAN.json`` (or ``python -m finetune_worker check``)."""

import sys


def main(argv):
    if len(argv) == 2 and argv[1] == "check":
        from finetune_worker import environment

        return environment.check()
    if len(argv) != 2:
        print("usage: python -m finetune_worker PLAN.json | check", file=sys.stderr)
        return 2
    from finetune_worker import train

    return train.main(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
