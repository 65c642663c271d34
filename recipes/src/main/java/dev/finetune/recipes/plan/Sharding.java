package dev.finetune.recipes.plan;

/** How model state is spread over the data-parallel ranks. */
public enum Sharding {
    /** One device holds everything. */
    SINGLE("single device"),
    /** Every rank holds a full replica; PyTorch DDP also keeps gradient buckets as large as the gradients. */
    DDP("DDP (full replica per device)"),
    /** FSDP FULL_SHARD / ZeRO-3: weights, gradients and optimizer state divided by the ranks; units gathered on use. */
    FSDP_FULL_SHARD("FSDP full shard"),
    /** FSDP with {@code offload_params}: sharded state lives in host memory, the device keeps gathered units. */
    FSDP_OFFLOAD("FSDP full shard, parameters and optimizer offloaded to host");

    private final String label;

    Sharding(String label) {
        this.label = label;
    }

    public String label() {
        return label;
    }

    public boolean shards() {
        return this == FSDP_FULL_SHARD || this == FSDP_OFFLOAD;
    }
}
