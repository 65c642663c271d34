package dev.finetune.trainers.backend.fsdp;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * The micro batches of one epoch (and the eval batches) as the worker's {@code finetune_worker.data} reads them: per
 * split, each column of every batch one after another ({@code ids}, {@code positions}, {@code segments} and
 * {@code targets} as I32, {@code mask} as U8), the batches' {@code shapes} [N, 2] and loss {@code weights} [N].
 */
final class BatchesFile {
    private BatchesFile() {}

    static void write(Path file, List<WorkerBatch> train, List<WorkerBatch> eval, Map<String, String> metadata) {
        List<TensorsFile.Tensor> tensors = new ArrayList<>();
        split(tensors, "train", train);
        split(tensors, "eval", eval);
        TensorsFile.write(file, tensors, metadata);
    }

    private static void split(List<TensorsFile.Tensor> tensors, String name, List<WorkerBatch> batches) {
        long cells = 0;
        for (WorkerBatch b : batches) {
            cells += (long) b.rows() * b.columns();
        }
        tensors.add(ints(name + ".ids", cells, batches, WorkerBatch::ids));
        tensors.add(ints(name + ".positions", cells, batches, WorkerBatch::positions));
        tensors.add(ints(name + ".segments", cells, batches, WorkerBatch::segments));
        tensors.add(ints(name + ".targets", cells, batches, WorkerBatch::targets));
        tensors.add(new TensorsFile.Tensor(name + ".mask", "U8", new long[] {cells}, sink -> {
            for (WorkerBatch b : batches) {
                for (byte m : b.mask()) {
                    sink.uint8(m);
                }
            }
        }));
        tensors.add(new TensorsFile.Tensor(name + ".shapes", "I32", new long[] {batches.size(), 2}, sink -> {
            for (WorkerBatch b : batches) {
                sink.int32(b.rows());
                sink.int32(b.columns());
            }
        }));
        tensors.add(new TensorsFile.Tensor(name + ".weights", "I64", new long[] {batches.size()}, sink -> {
            for (WorkerBatch b : batches) {
                sink.int64(b.weight());
            }
        }));
    }

    private static TensorsFile.Tensor ints(String name, long cells, List<WorkerBatch> batches,
            Function<WorkerBatch, long[]> column) {
        return new TensorsFile.Tensor(name, "I32", new long[] {cells}, sink -> {
            for (WorkerBatch b : batches) {
                for (long value : column.apply(b)) {
                    sink.int32(value);
                }
            }
        });
    }
}
