package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.UserError;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.backend.DatasetIdentity;
import dev.finetune.trainers.backend.RunFiles;
import dev.finetune.trainers.backend.SingleDeviceBackend;
import dev.finetune.trainers.backend.TrainingData;
import dev.finetune.trainers.data.DataOptions;
import dev.finetune.trainers.hub.HubModels;
import dev.finetune.trainers.text.Tokenizer;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.DigestInputStream;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * {@code finetune preprocess}: tokenizes, masks and packs a recipe's data once, with the JVM trainer's own code
 * ({@link TrainingData}), into the batches file the fsdp workers read. Ranks never tokenize, so they never wait on
 * each other for it, and a second run with the same data reuses the file.
 *
 * <p>The file is named by a key over everything that decides its contents: the datasets (files' bytes included), the
 * data settings, the micro batch sizes, the objective and the tokenizer files. Anything else may change freely.
 */
public final class Preprocess {
    static final String FORMAT = "finetune-batches-1";

    /**
     * @param file the batches file
     * @param trainBatches micro batches per epoch
     * @param reused the file was already there for this key
     */
    public record Prepared(Path file, String key, int trainBatches, int evalBatches, long rows, long tokens,
            long targets, boolean reused, double tokensPerSecond) {

        public double trainedShare() {
            return tokens == 0 ? 0 : (double) targets / tokens;
        }

        public String describe() {
            if (reused) {
                return String.format(Locale.ROOT, "preprocess: reused %s (same data, settings and tokenizer): %,d rows, "
                        + "%,d tokens, trained on %.1f%%, %d train / %d eval micro batches%n", file, rows, tokens,
                        100 * trainedShare(), trainBatches, evalBatches);
            }
            return String.format(Locale.ROOT, "preprocess: %,d rows -> %,d tokens, trained on %.1f%%, %d train / %d eval "
                    + "micro batches; %,.0f tokens/s; wrote %s%n", rows, tokens, 100 * trainedShare(), trainBatches,
                    evalBatches, tokensPerSecond, file);
        }
    }

    private Preprocess() {}

    /** Where the batches files of a recipe live: {@code dataset_prepared_path}, else {@code output_dir/prepared}. */
    public static Path folder(Recipe recipe) {
        String prepared = recipe.data().preparedPath();
        return prepared != null ? Path.of(prepared) : Path.of(recipe.output().outputDir())
                .resolve(dev.finetune.trainers.backend.OutputFolder.PREPARED);
    }

    /** The batches file for {@code validated}, made now unless an identical one exists. */
    public static Prepared run(ValidatedRecipe validated, PrintWriter out) {
        Recipe recipe = validated.recipe();
        String objective = objectiveKind(recipe);
        Path modelDir = HubModels.base(recipe.model());
        Path tokenizerDir = HubModels.tokenizer(recipe.model());
        int micro = validated.plan().micro();
        String key = key(recipe, objective, micro, tokenizerDir);
        Path file = folder(recipe).resolve("batches-" + key.substring(0, 16) + ".safetensors");
        Map<String, String> existing = readMetadata(file);
        if (existing != null && key.equals(existing.get("key")) && FORMAT.equals(existing.get("format"))) {
            Prepared prepared = fromMetadata(file, existing, true, Double.NaN);
            out.print(prepared.describe());
            out.flush();
            return prepared;
        }
        long started = System.nanoTime();
        List<WorkerBatch> train = new ArrayList<>();
        List<WorkerBatch> eval = new ArrayList<>();
        long rows;
        Map<String, String> special = new LinkedHashMap<>();
        try (Tokenizer tokenizer = Tokenizer.load(tokenizerDir)) {
            tokenizer.limitTo(dev.finetune.recipes.model.ModelConfig.read(modelDir).vocabSize(),
                    modelDir.resolve("config.json").toString());
            if (recipe.objective() instanceof Recipe.Objective.Grpo grpo) {
                TrainingData<dev.finetune.trainers.train.grpo.GrpoBatch> data = TrainingData.grpo(recipe, grpo, micro,
                        tokenizer);
                int padId = TrainingData.padId(tokenizer);
                // where the worker's sampling stops and what fills the rows after shorter completions
                special.put("eos_id", Long.toString(tokenizer.special().eosId()));
                special.put("pad_id", Integer.toString(padId));
                data.train().forEach(b -> train.add(WorkerBatch.of(b, padId)));
                data.eval().forEach(b -> eval.add(WorkerBatch.of(b, padId)));
                rows = data.rows();
                out.print(data.report());
            } else if (objective.equals("dpo")) {
                TrainingData<dev.finetune.trainers.train.dpo.DpoBatch> data = TrainingData.dpo(recipe, micro, tokenizer);
                data.train().forEach(b -> train.add(WorkerBatch.of(b)));
                data.eval().forEach(b -> eval.add(WorkerBatch.of(b)));
                rows = data.rows();
                out.print(data.report());
            } else {
                TrainingData<dev.finetune.trainers.train.sft.SftBatch> data = TrainingData.sft(recipe, micro, tokenizer);
                data.train().forEach(b -> train.add(WorkerBatch.of(b)));
                data.eval().forEach(b -> eval.add(WorkerBatch.of(b)));
                rows = data.rows();
                out.print(data.report());
            }
        }
        if (train.isEmpty()) {
            throw new UserError("datasets", "the data made no training batch", "check the datasets and sequence_len");
        }
        double seconds = (System.nanoTime() - started) / 1e9;
        long tokens = train.stream().mapToLong(WorkerBatch::tokens).sum();
        long targets = train.stream().mapToLong(WorkerBatch::targetCount).sum();
        Map<String, String> metadata = new LinkedHashMap<>();
        metadata.put("format", FORMAT);
        metadata.put("key", key);
        metadata.put("objective", objective);
        metadata.put("train_batches", Integer.toString(train.size()));
        metadata.put("eval_batches", Integer.toString(eval.size()));
        metadata.put("rows", Long.toString(rows));
        metadata.put("tokens", Long.toString(tokens));
        metadata.put("targets", Long.toString(targets));
        metadata.putAll(special);
        BatchesFile.write(file, train, eval, metadata);
        Prepared prepared = fromMetadata(file, metadata, false, tokens / Math.max(1e-9, seconds));
        out.print(prepared.describe());
        out.flush();
        return prepared;
    }

    static String objectiveKind(Recipe recipe) {
        if (recipe.objective() instanceof Recipe.Objective.Sft) {
            return "sft";
        }
        if (recipe.objective() instanceof Recipe.Objective.Dpo) {
            return "dpo";
        }
        return "grpo";
    }

    private static Prepared fromMetadata(Path file, Map<String, String> m, boolean reused, double tokensPerSecond) {
        return new Prepared(file, m.get("key"), Integer.parseInt(m.get("train_batches")),
                Integer.parseInt(m.get("eval_batches")), Long.parseLong(m.get("rows")), Long.parseLong(m.get("tokens")),
                Long.parseLong(m.get("targets")), reused, tokensPerSecond);
    }

    private static Map<String, String> readMetadata(Path file) {
        if (!Files.isRegularFile(file)) {
            return null;
        }
        try {
            return TensorsFile.metadata(file);
        } catch (IOException | RuntimeException e) {
            // An unreadable cache file is made again, never trusted.
            return null;
        }
    }

    /** SHA-256 over everything that decides the batches. */
    static String key(Recipe recipe, String objective, int micro, Path tokenizerDir) {
        MessageDigest digest = sha256();
        update(digest, FORMAT);
        update(digest, objective);
        if (recipe.objective() instanceof Recipe.Objective.Grpo grpo) {
            // a micro batch holds whole groups: micro / num_generations prompts, each written once per completion
            update(digest, Integer.toString(grpo.numGenerations()));
        }
        update(digest, DatasetIdentity.of(recipe.data().datasets()));
        update(digest, DatasetIdentity.of(recipe.data().testDatasets()));
        update(digest, String.valueOf(recipe.data().datasets()));
        update(digest, String.valueOf(recipe.data().testDatasets()));
        update(digest, String.valueOf(DataOptions.of(recipe)));
        // how evaluation rows are cut and packed
        update(digest, recipe.training().evalSequenceLen() + " " + recipe.training().evalSamplePacking());
        update(digest, Integer.toString(micro));
        update(digest, String.valueOf(recipe.batch().evalBatchSize()));
        for (String name : RunFiles.TOKENIZER_FILES) {
            Path file = tokenizerDir.resolve(name);
            if (Files.isRegularFile(file)) {
                update(digest, name);
                try (InputStream in = new DigestInputStream(Files.newInputStream(file), digest)) {
                    in.transferTo(java.io.OutputStream.nullOutputStream());
                } catch (IOException e) {
                    throw new UserError(file.toString(), "cannot read the tokenizer: " + e.getMessage(), "check the file");
                }
            }
        }
        return HexFormat.of().formatHex(digest.digest());
    }

    private static void update(MessageDigest digest, String text) {
        digest.update(text.getBytes(StandardCharsets.UTF_8));
        digest.update((byte) 0);
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }
}
