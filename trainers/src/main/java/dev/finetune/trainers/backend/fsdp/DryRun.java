package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * {@code --dry-run}: the exact torchrun command, the ranks' environment and the global batch identity, rendered
 * without starting or writing anything, so a cluster user sees what each node will run.
 */
final class DryRun {
    private DryRun() {}

    /** The text: command, environment, world size, global batch and its identity. */
    static String render(ValidatedRecipe validated, Launch launch, String python) {
        Recipe recipe = validated.recipe();
        Path outputDir = Path.of(recipe.output().outputDir()).toAbsolutePath();
        Path worker = outputDir.resolve(WorkerPlan.FOLDER);
        int micro = validated.plan().micro();
        int accumulation = validated.plan().accumulation();
        int perStep = WorkerPlan.microBatchesPerStep(validated);
        StringBuilder s = new StringBuilder();
        s.append("dry run: nothing started\n");
        // the worker's code goes into a private folder made at launch; its name is known only then
        Path code = Path.of(System.getProperty("java.io.tmpdir"), "finetune-worker-XXXX");
        s.append("command: ").append(ShellWords.join(launch.command(python, new WorkerPython.Code(code).entry(),
                worker.resolve("plan.json"), worker.resolve("logs"), Launch.runId(recipe)))).append('\n');
        s.append("worker code: a private copy extracted at launch into ").append(code.getParent())
                .append("/finetune-worker-*\n");
        s.append("environment:\n");
        launch.environment(Runtime.getRuntime().availableProcessors(), System.getenv())
                .forEach((k, v) -> s.append("  ").append(k).append('=').append(v).append('\n'));
        s.append(String.format(Locale.ROOT, "world size: %d (%d node%s x %d process%s per node), this node's rank %d%n",
                launch.worldSize(), launch.nnodes(), launch.nnodes() == 1 ? "" : "s", launch.nprocPerNode(),
                launch.nprocPerNode() == 1 ? "" : "es", launch.nodeRank()));
        s.append(String.format(Locale.ROOT, "global batch: micro %d x ranks %d x accumulation %d = %d sequences per "
                + "optimizer step (%d micro batches)%n", micro, validated.plan().dataParallelRanks(), accumulation,
                validated.plan().global(), perStep));
        s.append(String.format(Locale.ROOT, "global batch identity: step s trains on the micro batches at data "
                + "positions [%d*s, %d*s + %d) of the seed-%d order; rank r takes positions r, r+%d, ...; the loss is "
                + "divided by the target count of all %d%n", perStep, perStep, perStep, recipe.training().seed(),
                validated.plan().dataParallelRanks(), perStep));
        return s.toString();
    }


}
