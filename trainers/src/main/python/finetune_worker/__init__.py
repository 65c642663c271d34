"""The fsdp backend's worker: one process per rank under torchrun, driven by the plan the Java side writes.

The Java side decides everything that is data or randomness (tokenized and packed micro batches, their order, the
learning rate of every step, the initial LoRA weights); this package only runs the arithmetic on PyTorch with
transformers, PEFT and FSDP2, and reports JSON lines on stdout.
"""
