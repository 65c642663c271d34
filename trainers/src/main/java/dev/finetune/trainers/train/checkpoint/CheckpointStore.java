package dev.finetune.trainers.train.checkpoint;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import com.google.gson.FieldNamingPolicy;
import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * The {@code checkpoint-N/} folders of an output directory.
 *
 * <p>A checkpoint is what the Hugging Face Trainer writes, so the HF stack opens it: PEFT's adapter files
 * ({@code adapter_model.safetensors} + {@code adapter_config.json}) or a model folder ({@code model.safetensors} +
 * {@code config.json}), the tokenizer, and {@code trainer_state.json} in HF's schema with the log history. Beside
 * them, what only we read: {@link #STATE} (data position, schedule, RNG, the recipe's resume hash) and the
 * optimizer moments.
 *
 * <p>A checkpoint is written into a hidden temporary folder, flushed to disk, and renamed into place in one atomic
 * step; {@link #STATE} is among its files. So a {@code checkpoint-N} folder with that file is always complete, a
 * kill at any moment leaves the previous ones intact, and leftovers of an interrupted write are hidden folders
 * that {@link #removeLeftovers()} deletes on the next start.
 */
public final class CheckpointStore {
    /** A LoRA checkpoint's weights, PEFT's name for them. */
    public static final String ADAPTER_WEIGHTS = "adapter_model.safetensors";
    /** A full fine-tune's weights, transformers' name for them. */
    public static final String MODEL_WEIGHTS = "model.safetensors";
    public static final String OPTIMIZER = "optimizer.safetensors";
    /** Our resume state; the HF Trainer's is {@link HfTrainerState#FILE}. */
    public static final String STATE = "finetune_state.json";
    /**
     * SHA-256 of every other file of the checkpoint, in {@code sha256sum} format (so {@code sha256sum -c} checks
     * it too); written last, verified before a resume trusts a byte.
     */
    public static final String CHECKSUMS = "checksums.sha256";

    private static final Pattern COMPLETE = Pattern.compile("checkpoint-(\\d+)");
    private static final String TEMPORARY_PREFIX = ".tmp-checkpoint-";
    private static final String DISCARDED_PREFIX = ".old-checkpoint-";
    /** A checkpoint whose weights led to a non-finite loss: kept, under a name no resume picks. */
    public static final String SET_ASIDE_PREFIX = "nonfinite-checkpoint-";
    private static final Gson GSON = new GsonBuilder()
            .setFieldNamingPolicy(FieldNamingPolicy.LOWER_CASE_WITH_UNDERSCORES)
            .setPrettyPrinting()
            .serializeSpecialFloatingPointValues()
            .create();

    /** Called when a checkpoint's files are all written and flushed, just before it is published by renaming. */
    @FunctionalInterface
    public interface BeforePublish {
        void written(Path temporaryFolder);
    }

    /** A complete checkpoint folder and the step it was taken after. */
    public record Saved(long step, Path folder) {}

    /** What a checkpoint holds, loaded. Arrays belong to the manager passed to {@link #load}. */
    public record Loaded(Map<String, NDArray> weights, Map<String, NDArray> optimizer, TrainerState state) {}

    private final Path outputDir;
    private final int totalLimit;
    /** The best checkpoint ({@code load_best_model_at_end}, {@code save_strategy: best}): kept beyond the limit. */
    private Path kept;

    /** @param totalLimit {@code save_total_limit}; 0 or less keeps every checkpoint */
    public CheckpointStore(Path outputDir, int totalLimit) {
        this.outputDir = outputDir;
        this.totalLimit = totalLimit;
    }

    /**
     * Keeps {@code folder} whatever {@code save_total_limit} says, as the HF Trainer keeps the best checkpoint next to
     * the newest ones; {@code null} keeps none.
     */
    public void keep(Path folder) {
        this.kept = folder;
    }

    /** Deletes what interrupted writes left behind; they were never published, so nothing is lost. */
    public void removeLeftovers() {
        if (!Files.isDirectory(outputDir)) {
            return;
        }
        try (Stream<Path> children = Files.list(outputDir)) {
            for (Path child : children.toList()) {
                String name = child.getFileName().toString();
                if (name.startsWith(TEMPORARY_PREFIX) || name.startsWith(DISCARDED_PREFIX)) {
                    deleteTree(child);
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /**
     * Renames {@code checkpoint-<step>} to {@link #SET_ASIDE_PREFIX}{@code <step>} (kept for inspection, never resumed:
     * its weights led to a non-finite loss); returns the new folder, or null when there was no such checkpoint.
     */
    public Path setAside(long step) {
        Path folder = outputDir.resolve("checkpoint-" + step);
        if (!Files.isDirectory(folder)) {
            return null;
        }
        Path aside = outputDir.resolve(SET_ASIDE_PREFIX + step);
        try {
            deleteTree(aside);
            move(folder, aside);
            return aside;
        } catch (IOException | UncheckedIOException e) {
            throw new UserError(folder.toString(), "cannot set aside this checkpoint, whose weights led to a "
                    + "non-finite loss: " + e.getMessage(), "delete it by hand before resuming");
        }
    }

    /** Complete checkpoints, oldest first. */
    public List<Saved> complete() {
        List<Saved> found = new ArrayList<>();
        if (!Files.isDirectory(outputDir)) {
            return found;
        }
        try (Stream<Path> children = Files.list(outputDir)) {
            for (Path child : children.toList()) {
                Matcher name = COMPLETE.matcher(child.getFileName().toString());
                if (name.matches() && Files.isRegularFile(child.resolve(STATE))) {
                    found.add(new Saved(Long.parseLong(name.group(1)), child));
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        found.sort(Comparator.comparingLong(Saved::step));
        return found;
    }

    /** What a checkpoint holds besides tensors and our state, written into its folder before the checksums. */
    @FunctionalInterface
    public interface Extras {
        void write(Path folder) throws IOException;
    }

    /**
     * The weights file of a checkpoint folder: PEFT's adapter file for LoRA, else the model file.
     */
    public static String weightsFile(Path folder) {
        return Files.isRegularFile(folder.resolve(ADAPTER_WEIGHTS)) ? ADAPTER_WEIGHTS : MODEL_WEIGHTS;
    }

    /** Adapter parameters carry PEFT's names; a full fine-tune's are the model's own. */
    static String weightsFile(List<NamedArray> weights) {
        boolean adapter = !weights.isEmpty() && weights.stream().allMatch(w -> w.name().startsWith("base_model.model."));
        return adapter ? ADAPTER_WEIGHTS : MODEL_WEIGHTS;
    }

    /**
     * Writes {@code checkpoint-<step>}, then deletes the oldest beyond the limit; returns the new folder.
     *
     * @param hfState the HF Trainer's {@code trainer_state.json}
     * @param extras adapter or model config, tokenizer: what makes the folder one the HF stack loads
     */
    public Path save(List<NamedArray> weights, List<NamedArray> optimizer, TrainerState state, String hfState,
            Extras extras, BeforePublish hook) {
        Path target = outputDir.resolve("checkpoint-" + state.globalStep());
        Path temporary = outputDir.resolve(TEMPORARY_PREFIX + state.globalStep() + "-" + ProcessHandle.current().pid());
        try {
            Files.createDirectories(outputDir);
            deleteTree(temporary);
            Files.createDirectory(temporary);
            TensorFile.write(temporary.resolve(weightsFile(weights)), weights);
            TensorFile.write(temporary.resolve(OPTIMIZER), optimizer);
            Files.writeString(temporary.resolve(HfTrainerState.FILE), hfState, StandardCharsets.UTF_8);
            extras.write(temporary);
            Files.writeString(temporary.resolve(STATE), GSON.toJson(state), StandardCharsets.UTF_8);
            Checksums.write(temporary, CHECKSUMS);
            try (Stream<Path> files = Files.list(temporary)) {
                for (Path file : files.filter(Files::isRegularFile).toList()) {
                    flush(file);
                }
            }
            hook.written(temporary);
            publish(temporary, target);
        } catch (IOException | UncheckedIOException e) {
            // a full disk (or a quota) must cost this checkpoint only: the partial one goes, the older ones stay
            removeQuietly(temporary);
            Throwable cause = e instanceof UncheckedIOException u && u.getCause() != null ? u.getCause() : e;
            throw new UserError(outputDir.toString(), "could not save checkpoint-" + state.globalStep() + " ("
                    + cause.getMessage() + "); the partial copy was removed and the earlier checkpoints are intact",
                    "free space on the disk of output_dir or move it to a larger one, then continue with "
                            + "resume_from_checkpoint=true", e);
        }
        prune(target);
        return target;
    }

    /**
     * The folder {@code resume_from_checkpoint} names: a path as the HF Trainer reads it (from the working
     * directory), or relative to {@code output_dir} ({@code checkpoint-40}).
     */
    public Path resolve(String where, Path requested) {
        Path folder = requested.isAbsolute() || Files.isRegularFile(requested.resolve(STATE))
                || Files.isRegularFile(requested.resolve(HfTrainerState.FILE)) ? requested : outputDir.resolve(requested);
        if (!Files.isRegularFile(folder.resolve(STATE)) && Files.isRegularFile(folder.resolve(HfTrainerState.FILE))) {
            throw new UserError(where, folder + " is a Hugging Face Trainer checkpoint (or an older finetune's): it "
                    + "has no " + STATE + " with the data position and optimizer moments finetune resumes from",
                    "to continue from its weights, start a new run with lora_model_dir: " + folder
                            + " (an adapter), or base_model: " + folder + " (a full model)");
        }
        if (!Files.isRegularFile(folder.resolve(STATE))) {
            throw new UserError(where, folder + " is not a complete checkpoint (it has no " + STATE + ")",
                    "name a checkpoint-N folder that holds " + STATE + ", or use resume_from_checkpoint: true");
        }
        return folder;
    }

    /** Verifies, then loads a checkpoint. */
    public static Loaded load(Path folder, NDManager manager) {
        return loadVerified(folder, verify(folder), manager);
    }

    /** Loads a checkpoint whose {@link #verify} returned {@code state}. */
    public static Loaded loadVerified(Path folder, TrainerState state, NDManager manager) {
        return new Loaded(TensorFile.read(folder.resolve(weightsFile(folder)), manager),
                TensorFile.read(folder.resolve(OPTIMIZER), manager), state);
    }

    /**
     * Checks every file against {@link #CHECKSUMS} and reads the state, whose fields must be self-consistent;
     * throws {@link Damaged} (saying what is wrong) for anything else. Reads every byte once.
     */
    public static TrainerState verify(Path folder) {
        Checksums.verify(folder, CHECKSUMS, List.of(weightsFile(folder), OPTIMIZER, STATE));
        TrainerState state;
        try {
            state = GSON.fromJson(dev.finetune.recipes.BoundedFiles.readText(folder.resolve(STATE),
                    dev.finetune.recipes.BoundedFiles.CONFIG_BYTES, STATE), TrainerState.class);
        } catch (RuntimeException e) {
            throw new Damaged(folder, STATE + " is not readable JSON (" + e.getMessage() + ")");
        }
        if (state == null) {
            throw new Damaged(folder, STATE + " is empty");
        }
        String problem = state.problem();
        if (problem != null) {
            throw new Damaged(folder, STATE + ": " + problem);
        }
        return state;
    }

    /** A checkpoint folder that must not be resumed from: a checksum, a file or a state field is wrong. */
    public static final class Damaged extends UserError {
        private final Path folder;

        public Damaged(Path folder, String reason) {
            super(folder.toString(), "damaged checkpoint: " + reason,
                    "resume_from_checkpoint: true resumes from the newest intact checkpoint instead");
            this.folder = folder;
        }

        public Path folder() {
            return folder;
        }
    }

    private void publish(Path temporary, Path target) throws IOException {
        if (Files.exists(target)) {
            // A rerun from an older checkpoint reaches this step again: set the old folder aside first, so that at
            // every moment either it or the new one is complete under its final name.
            Path discarded = outputDir.resolve(DISCARDED_PREFIX + target.getFileName() + "-"
                    + ProcessHandle.current().pid());
            move(target, discarded);
            move(temporary, target);
            deleteTree(discarded);
        } else {
            move(temporary, target);
        }
        flushDirectory(outputDir);
    }

    private void prune(Path keep) {
        if (totalLimit <= 0) {
            return;
        }
        List<Saved> all = complete();
        int excess = all.size() - totalLimit;
        for (Saved saved : all) {
            if (excess <= 0) {
                break;
            }
            if (!saved.folder().equals(keep) && !saved.folder().equals(kept)) {
                deleteTree(saved.folder());
                excess--;
            }
        }
    }

    private static void move(Path from, Path to) throws IOException {
        AtomicFiles.publish(from, to);
    }

    private static void flush(Path file) throws IOException {
        try (FileChannel channel = FileChannel.open(file, StandardOpenOption.WRITE)) {
            channel.force(true);
        }
    }

    private static void flushDirectory(Path directory) {
        try (FileChannel channel = FileChannel.open(directory, StandardOpenOption.READ)) {
            channel.force(true);
        } catch (IOException e) {
            // Some file systems cannot sync a directory; the rename itself is still atomic.
        }
    }

    private static void removeQuietly(Path folder) {
        try {
            deleteTree(folder);
        } catch (UncheckedIOException e) {
            // what cannot be deleted now is a hidden leftover that removeLeftovers() deletes on the next start
        }
    }

    static void deleteTree(Path root) {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path path : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.delete(path);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("could not delete " + root, e);
        }
    }
}
