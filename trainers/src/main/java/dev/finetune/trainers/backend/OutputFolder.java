package dev.finetune.trainers.backend;

import com.google.gson.JsonObject;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.checkpoint.CheckpointStore;
import dev.finetune.trainers.train.checkpoint.ResumeKeys;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.stream.Stream;

/**
 * An {@code output_dir} belongs to one run: the run that wrote its {@link #MARKER}, identified by the hash of the
 * recipe values its checkpoints are valid for (the resume keys). A run may write into a folder only when
 *
 * <ul>
 *   <li>the folder is new or empty, or it is this recipe's own folder and the run resumes it; or the user asked
 *       for {@code overwrite_output_dir} on an earlier run's folder, and then that run's files (the {@link RunLayout}
 *       list its marker records) are deleted first, so two runs never mix; anything else in the folder is the
 *       user's, and the run refuses to start rather than delete it;</li>
 *   <li>the folder is none of the run's inputs, holds none of them and lies inside none of them (base model,
 *       tokenizer, datasets, {@code lora_model_dir}, the recipe files): those are never written to, whatever the
 *       user asks;</li>
 *   <li>no other live run holds it: an OS lock on {@link #LOCK}, which the kernel drops when its process dies,
 *       however it dies, so there is never a stale lock to clean up.</li>
 * </ul>
 *
 * <p>Every refusal happens before anything is written and names the folder, why, and the ways out.
 */
public final class OutputFolder implements AutoCloseable {
    private static final org.apache.logging.log4j.Logger LOG =
            org.apache.logging.log4j.LogManager.getLogger(OutputFolder.class);
    /** The ownership marker ({@link RunMarker}): JSON with {@code recipe_hash} and the resume keys it hashes. */
    public static final String MARKER = "finetune-run.json";
    /** Held locked for the whole run ({@link FolderLock}); its content (the holder's pid) is only for messages. */
    public static final String LOCK = ".finetune.lock";
    /** {@code finetune launch --slurm}'s script, written before the run claims the folder. */
    public static final String SBATCH = "launch.sbatch";
    /**
     * {@code finetune preprocess}'s cache of packed batches (the fsdp backend's input), named by a hash of the data,
     * settings and tokenizer: written before a run claims the folder and valid for any run, so it neither makes the
     * folder someone else's nor is deleted by {@code overwrite_output_dir}.
     */
    public static final String PREPARED = "prepared";
    /** The fsdp worker's resume state in its {@code checkpoint-N} folders (the JVM trainer's is CheckpointStore.STATE). */
    public static final String WORKER_STATE = "worker_state.json";

    private static final List<String> FINAL_WEIGHTS = List.of("adapter_model.safetensors", "model.safetensors");

    /** What the run may do with the folder. */
    enum Verdict { FRESH, RESUME, CLEAN }

    private final Path folder;
    private final FolderLock lock;

    private OutputFolder(Path folder, FolderLock lock) {
        this.folder = folder;
        this.lock = lock;
    }

    /**
     * The run's request.
     *
     * @param inputs every file or folder the run reads, by the recipe key that names it
     * @param resumeKeys the recipe values the run's checkpoints are valid for; their hash is the folder's owner
     * @param adjustable values a resume may change ({@code ResumeInvariants.adjustable}): each change is said
     * @param resuming the recipe resumes ({@code resume_from_checkpoint} or {@code auto_resume_from_checkpoints})
     * @param overwrite {@code overwrite_output_dir}: delete an earlier run's own files and start clean
     * @param provenance what the run's result comes from ({@link Provenance#toJson}), recorded in the marker
     */
    public record Claim(Path folder, Map<Path, String> inputs, Map<String, String> resumeKeys,
            Map<String, String> adjustable, boolean resuming, boolean overwrite, JsonObject provenance) {
        public Claim {
            inputs = new LinkedHashMap<>(inputs);
            resumeKeys = new TreeMap<>(resumeKeys);
            adjustable = new TreeMap<>(adjustable);
        }

        String hash() {
            return ResumeKeys.hash(resumeKeys);
        }
    }

    /** Refuses, without writing anything, a folder the run could not claim; for an early answer before slow work. */
    public static void check(Path folder, Map<Path, String> inputs, boolean resuming, boolean overwrite) {
        requireNoInput(folder, inputs);
        requireFolder(folder);
        FolderLock.requireFree(folder);
        if (!resuming) {
            List<String> contents = contents(folder);
            if (!contents.isEmpty()) {
                Map<String, String> owner = RunMarker.ownerKeys(folder);
                if (owner == null) {
                    throw foreign(folder, contents, overwrite);
                }
                if (overwrite) {
                    requireOnlyRunFiles(folder);
                } else if (holdsResults(folder)) {
                    throw finishedRun(folder);
                }
            }
        }
    }

    /**
     * Refuses, before {@code finetune preprocess} writes its cache into {@code output_dir/prepared}, a folder a run
     * could not use either: an input, one inside an input, a file, or a folder of someone else's files.
     */
    public static void checkForPreprocess(Path folder, Map<Path, String> inputs) {
        requireNoInput(folder, inputs);
        requireFolder(folder);
        List<String> contents = contents(folder);
        if (!contents.isEmpty() && RunMarker.ownerKeys(folder) == null) {
            throw foreign(folder, contents, false);
        }
    }

    /**
     * Takes the folder for this run: checks, creates it, locks it, checks again under the lock (another run may
     * have claimed it in between), deletes old contents when asked to, and writes the marker.
     */
    public static OutputFolder claim(Claim claim) {
        Path folder = claim.folder();
        verdict(claim); // refuse before writing anything
        FolderLock lock = null;
        try {
            Files.createDirectories(folder);
            lock = FolderLock.take(folder);
            Verdict verdict = verdict(claim);
            if (verdict == Verdict.CLEAN) {
                deleteRunFiles(folder);
            } else if (verdict == Verdict.RESUME) {
                for (String change : ResumeKeys.differences(RunMarker.map(folder, "adjustable"), claim.adjustable())) {
                    if (!change.contains("(unset)")) {
                        LOG.warn("warning: resuming with {} (the run continues with the new value)", change);
                    }
                }
            }
            RunMarker.write(folder, claim);
            OutputFolder claimed = new OutputFolder(folder, lock);
            lock = null;
            return claimed;
        } catch (IOException e) {
            throw new UserError(folder.toString(), "cannot use output_dir: " + e.getMessage(),
                    "check that output_dir is writable and the disk has space");
        } finally {
            if (lock != null) {
                lock.closeQuietly();
            }
        }
    }

    public Path folder() {
        return folder;
    }

    /** Releases the lock (the kernel does it anyway when the process ends). */
    @Override
    public void close() {
        lock.close();
    }

    /** What the run may do with the folder, or a refusal; reads only. */
    static Verdict verdict(Claim claim) {
        Path folder = claim.folder();
        requireNoInput(folder, claim.inputs());
        requireFolder(folder);
        List<String> contents = contents(folder);
        if (contents.isEmpty()) {
            return Verdict.FRESH;
        }
        Map<String, String> owner = RunMarker.ownerKeys(folder);
        if (claim.resuming()) {
            if (owner != null && claim.hash().equals(ResumeKeys.hash(owner))) {
                return Verdict.RESUME;
            }
            if (owner != null) {
                List<String> changes = ResumeKeys.differences(owner, claim.resumeKeys());
                throw new UserError(folder.toString(), "output_dir belongs to a run of a different recipe: "
                        + (changes.isEmpty() ? "its recipe hash differs" : String.join("; ", changes)),
                        "restore these values to resume it, or start this recipe in another output_dir");
            }
            // Folders written before the marker existed: a complete checkpoint whose recipe hash is ours (the
            // trainer refuses any other before this point) shows the folder is this recipe's.
            if (checkpoints(folder) > 0) {
                return Verdict.RESUME;
            }
        }
        if (owner == null) {
            throw foreign(folder, contents, claim.overwrite());
        }
        if (claim.overwrite() || claim.hash().equals(ResumeKeys.hash(owner)) && !holdsResults(folder)) {
            // the second: this recipe's earlier attempt stopped before it saved anything worth keeping
            requireOnlyRunFiles(folder);
            return Verdict.CLEAN;
        }
        throw finishedRun(folder);
    }

    /**
     * Refuses to clean a folder that holds anything its run did not write (by the marker's {@link RunLayout} list):
     * what is not a run's own file is the user's, and is never deleted.
     */
    private static void requireOnlyRunFiles(Path folder) {
        List<String> entries = RunMarker.runEntries(folder);
        List<String> others = contents(folder).stream().filter(name -> !RunLayout.owns(entries, name)).toList();
        if (!others.isEmpty()) {
            throw new UserError(folder.toString(), "output_dir holds files the run recorded in " + MARKER
                    + " did not write, and overwrite_output_dir deletes only a run's own files: " + shown(folder, others),
                    "move these out of output_dir (or choose another output_dir), then run again");
        }
    }

    /** Names, folders marked with a slash, the first few of many. */
    private static String shown(Path folder, List<String> names) {
        List<String> marked = names.stream().limit(8)
                .map(n -> Files.isDirectory(folder.resolve(n), java.nio.file.LinkOption.NOFOLLOW_LINKS) ? n + "/" : n)
                .toList();
        return String.join(", ", marked) + (names.size() > 8 ? ", … (" + names.size() + " entries)" : "");
    }

    /** A checkpoint or final weights: what a run must not silently replace or mix with its own. */
    private static boolean holdsResults(Path folder) {
        return checkpoints(folder) > 0 || FINAL_WEIGHTS.stream().anyMatch(name -> Files.exists(folder.resolve(name)));
    }

    /** Complete checkpoints of either backend: the JVM trainer's, and the fsdp worker's. */
    private static int checkpoints(Path folder) {
        int worker = 0;
        if (Files.isDirectory(folder)) {
            try (Stream<Path> children = Files.list(folder)) {
                worker = (int) children.filter(c -> c.getFileName().toString().matches("checkpoint-\\d+")
                        && Files.isRegularFile(c.resolve(WORKER_STATE))).count();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return new CheckpointStore(folder, 0).complete().size() + worker;
    }

    private static UserError finishedRun(Path folder) {
        int checkpoints = checkpoints(folder);
        return new UserError(folder.toString(), "output_dir already holds an earlier run ("
                + (checkpoints == 0 ? "no checkpoints" : checkpoints + (checkpoints == 1 ? " checkpoint" : " checkpoints"))
                + "), and a new run would mix its files with that one's",
                "continue it with resume_from_checkpoint=true, start over with overwrite_output_dir=true (deletes "
                        + "its files), or choose another output_dir");
    }

    private static UserError foreign(Path folder, List<String> contents, boolean overwrite) {
        return new UserError(folder.toString(), "output_dir is not empty and was not written by finetune (it holds "
                + shown(folder, contents) + ")" + (overwrite ? "; overwrite_output_dir deletes only files a finetune "
                + "run recorded as its own (" + MARKER + "), and there is no such record here" : ""),
                "choose a new or empty folder for output_dir");
    }

    private static void requireFolder(Path folder) {
        if (Files.exists(folder) && !Files.isDirectory(folder)) {
            throw new UserError(folder.toString(), "output_dir is a file, not a folder",
                    "choose a new folder for output_dir");
        }
    }

    /** The folder is none of the inputs, holds none of them, and is not inside an input folder. */
    public static void requireNoInput(Path folder, Map<Path, String> inputs) {
        Path out = real(folder);
        for (Map.Entry<Path, String> input : inputs.entrySet()) {
            Path in = real(input.getKey());
            boolean inside = out.startsWith(in) && Files.isDirectory(in);
            if (in.startsWith(out) || inside) {
                throw new UserError(folder.toString(), (in.equals(out) ? "output_dir is the run's input "
                        : inside ? "output_dir lies inside the run's input " : "output_dir holds the run's input ")
                        + input.getKey() + " (" + input.getValue() + "), and a run writes and deletes files in its "
                        + "output_dir", "choose an output_dir that neither is, nor contains, nor lies inside a model, "
                        + "dataset or recipe the run reads (inputs are never written to, even with overwrite_output_dir)");
            }
        }
    }

    /** The real path of {@code path}'s longest existing ancestor, with the rest appended: links resolved. */
    static Path real(Path path) {
        Path absolute = path.toAbsolutePath().normalize();
        Path existing = absolute;
        while (existing != null && !Files.exists(existing)) {
            existing = existing.getParent();
        }
        if (existing == null) {
            return absolute;
        }
        try {
            return existing.toRealPath().resolve(existing.relativize(absolute));
        } catch (IOException e) {
            return absolute;
        }
    }

    /** The folder's entries but the lock file and the preprocess cache, sorted; none when it does not exist. */
    private static List<String> contents(Path folder) {
        if (!Files.isDirectory(folder)) {
            return List.of();
        }
        try (Stream<Path> children = Files.list(folder)) {
            return children.filter(p -> !kept(p)).map(p -> p.getFileName().toString()).sorted().toList();
        } catch (IOException e) {
            throw new UserError(folder.toString(), "cannot list output_dir: " + e.getMessage(),
                    "check the folder's permissions");
        }
    }

    /**
     * The lock, and {@link #PREPARED} while it holds nothing but preprocess's batches files (a folder of the same
     * name with anything else in it is the user's, and counts).
     */
    private static boolean kept(Path child) {
        String name = child.getFileName().toString();
        // the lock, and what `finetune launch --slurm` puts there before any run: its script and Slurm's log
        if (name.equals(LOCK) || Files.isRegularFile(child, java.nio.file.LinkOption.NOFOLLOW_LINKS)
                && (name.equals(SBATCH) || name.matches("slurm-\\d+\\.out"))) {
            return true;
        }
        if (!name.equals(PREPARED) || Files.isSymbolicLink(child) || !Files.isDirectory(child)) {
            return false;
        }
        try (Stream<Path> files = Files.list(child)) {
            return files.allMatch(f -> Files.isRegularFile(f, java.nio.file.LinkOption.NOFOLLOW_LINKS)
                    && f.getFileName().toString().matches("\\.?batches-[0-9a-f]{16}\\.safetensors(\\.tmp)?"));
        } catch (IOException e) {
            return false;
        }
    }

    /**
     * Deletes the run's own entries (its marker's list; {@link #requireOnlyRunFiles} checked there are no others) but
     * the lock and the preprocess cache; links are removed, never followed.
     */
    private static void deleteRunFiles(Path folder) throws IOException {
        List<String> entries = RunMarker.runEntries(folder);
        List<Path> children;
        try (Stream<Path> listing = Files.list(folder)) {
            children = listing.filter(p -> !kept(p) && RunLayout.owns(entries, p.getFileName().toString())).toList();
        }
        List<Path> all = new ArrayList<>();
        for (Path child : children) {
            try (Stream<Path> walk = Files.walk(child)) {
                all.addAll(walk.toList());
            }
        }
        all.sort(Comparator.comparingInt(Path::getNameCount).reversed());
        for (Path path : all) {
            Files.deleteIfExists(path);
        }
    }
}
