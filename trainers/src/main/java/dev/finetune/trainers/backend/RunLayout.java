package dev.finetune.trainers.backend;

import dev.finetune.trainers.backend.fsdp.WorkerPlan;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.HfTrainerState;
import dev.finetune.trainers.train.output.LossCurve;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.TrainResults;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The entries a run writes at the top of its {@code output_dir}, either backend: recorded in the folder's
 * {@link OutputFolder#MARKER} when a run claims it, and the only entries {@code overwrite_output_dir} may ever delete.
 * Anything else in the folder was put there by someone else (a thesis, a {@code .git}, photos) and is never touched:
 * the Hugging Face Trainer deletes nothing with this flag, and a shared recipe must not be able to empty a folder.
 *
 * <p>An entry is a name, or a pattern where {@code #} stands for a step number and {@code *} for anything.
 */
public final class RunLayout {
    private RunLayout() {}

    /** What this build writes; a marker from an older build without its own list is read with this one. */
    public static List<String> entries() {
        List<String> entries = new ArrayList<>(List.of(OutputFolder.MARKER, OutputFolder.LOCK,
                RunFiles.RESOLVED_RECIPE, MetricsLog.FILE, LossCurve.FILE, TrainResults.FILE, HfTrainerState.FILE,
                CheckpointStore.ADAPTER_WEIGHTS, "adapter_config.json", CheckpointStore.MODEL_WEIGHTS, "config.json",
                "generation_config.json", "runs", WorkerPlan.FOLDER, "checkpoint-#", CheckpointStore.SET_ASIDE_PREFIX + "#",
                ".tmp-checkpoint-*",
                ".old-checkpoint-*", ".worker-final", ".*.tmp", MetricsLog.FILE + ".tmp", ".loss-curve.png"));
        entries.addAll(RunFiles.TOKENIZER_FILES);
        return List.copyOf(entries);
    }

    /** Whether {@code name} (a top-level entry of output_dir) is one of {@code entries}. */
    public static boolean owns(List<String> entries, String name) {
        for (String entry : entries) {
            if (entry.equals(name) || (entry.contains("#") || entry.contains("*")) && pattern(entry).matcher(name).matches()) {
                return true;
            }
        }
        return false;
    }

    private static Pattern pattern(String entry) {
        StringBuilder regex = new StringBuilder();
        for (char c : entry.toCharArray()) {
            regex.append(switch (c) {
                case '#' -> "\\d+";
                case '*' -> ".*";
                default -> Pattern.quote(String.valueOf(c));
            });
        }
        return Pattern.compile(regex.toString());
    }
}
