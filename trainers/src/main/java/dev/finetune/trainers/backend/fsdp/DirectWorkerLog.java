package dev.finetune.trainers.backend.fsdp;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * The one worker process of a direct launch ({@link Launch#direct}, no torchrun) kept in
 * {@code worker/logs/rank0.log}, as torchrun's {@code --tee} keeps each rank's output, so that the failure message
 * can point there either way. The log is a convenience: a write that fails never fails the run, the lines are still
 * relayed, and the next line tries the file again.
 */
final class DirectWorkerLog {
    private final Path outputDir;
    private BufferedWriter writer;

    DirectWorkerLog(Path outputDir) {
        this.outputDir = outputDir;
    }

    void write(String raw) {
        try {
            if (writer == null) {
                Path logs = outputDir.resolve(WorkerPlan.FOLDER).resolve("logs");
                Files.createDirectories(logs);
                writer = Files.newBufferedWriter(logs.resolve("rank0.log"), StandardCharsets.UTF_8,
                        StandardOpenOption.CREATE, StandardOpenOption.APPEND);
            }
            writer.write(raw);
            writer.newLine();
            writer.flush();
        } catch (IOException e) {
            writer = null;
        }
    }

    void close() {
        if (writer != null) {
            try {
                writer.close();
            } catch (IOException e) {
                // nothing left to lose: every line was flushed as it came
            }
        }
    }
}
