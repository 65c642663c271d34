package dev.finetune.cli;

import dev.finetune.recipes.UserError;
import dev.finetune.trainers.bench.GenerationBench;
import java.io.IOException;
import java.io.PrintWriter;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/**
 * Benchmark: load memory and generation speed, with and without the KV cache ({@link GenerationBench}).
 *
 * <pre>
 * finetune bench-generate --save-random /tmp/medium   # vocab 32000, dim 512, 8 layers, 8 heads, ffn 1376 (the peer bench's MEDIUM)
 * finetune bench-generate /tmp/medium                 # then measure in a fresh process
 * finetune bench-generate configs/models/stories260K
 * </pre>
 */
@Command(name = "bench-generate", mixinStandardHelpOptions = true,
        description = {"Benchmark: load memory and generation tokens/s, with and without the KV cache.",
                "Run it alone on the machine."})
final class BenchGenerateCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Parameters(index = "0", arity = "0..1", paramLabel = "MODEL_DIR")
    Path modelDir;

    @Option(names = "--save-random", paramLabel = "DIR", description = "Write a random model of the medium bench shape to DIR and exit.")
    Path saveRandom;

    @Option(names = "--batch", defaultValue = "1")
    int batch;

    @Option(names = "--prompt-tokens", defaultValue = "16")
    int promptTokens;

    @Option(names = "--new-tokens", defaultValue = "128")
    int newTokens;

    @Option(names = "--owned", description = "Copy weights into engine memory instead of mapping the file (what training does).")
    boolean owned;

    @Option(names = "--skip-recompute", description = "Only time the cached path.")
    boolean skipRecompute;

    @Option(names = "--repeat", defaultValue = "1", description = "Run the cached generation this many times, printing peak resident memory after each (a leak keeps raising it).")
    int repeat;

    @Override
    public Integer call() throws IOException {
        PrintWriter out = spec.commandLine().getOut();
        if (saveRandom != null) {
            GenerationBench.writeRandomModel(saveRandom);
            out.println("wrote " + saveRandom);
            return ExitCode.OK;
        }
        if (modelDir == null) {
            throw new UserError("bench-generate", "give MODEL_DIR or --save-random DIR", "see --help");
        }
        GenerationBench.run(new GenerationBench.Settings(modelDir, batch, promptTokens, newTokens, owned, skipRecompute,
                repeat), out);
        return ExitCode.OK;
    }
}
