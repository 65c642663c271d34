package dev.finetune.cli;

import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import dev.finetune.recipes.ResolvedRun;
import dev.finetune.trainers.backend.SavedModelGeneration;
import dev.finetune.trainers.backend.SavedModels;
import dev.finetune.trainers.backend.fsdp.WorkerPython;
import dev.finetune.trainers.text.Tokenizer;
import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Model.CommandSpec;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;
import picocli.CommandLine.Spec;

/** {@code finetune generate MODEL_DIR}: continue a prompt with a model, for people (text) or machines (--json). */
@Command(name = "generate", mixinStandardHelpOptions = true,
        description = "Continue a prompt with a model directory (Hugging Face layout, safetensors weights) or a"
                + " training output_dir holding a LoRA adapter. The in-JVM model runs Llama, Mistral, Qwen2 and Qwen3;"
                + " the torch worker (transformers) runs every other family, with the same loop and sampler.")
final class GenerateCommand implements Callable<Integer> {

    @Spec
    CommandSpec spec;

    @Parameters(index = "0", paramLabel = "MODEL_DIR", description = "A model directory with config.json and safetensors weights, or a LoRA run's output_dir.")
    Path modelDir;

    @Option(names = "--prompt", paramLabel = "TEXT",
            description = "Prompt text, encoded with the model's tokenizer.json after its BOS token. Repeat for a batch.")
    List<String> prompt;

    @Option(names = "--prompt-ids", paramLabel = "IDS",
            description = "Prompt as comma-separated token ids, e.g. 1,403,407. Repeat to generate for several prompts as one batch.")
    List<String> promptIds;

    @Option(names = "--max-new-tokens", paramLabel = "N", defaultValue = "128", description = "Tokens to generate at most (default: ${DEFAULT-VALUE}).")
    int maxNewTokens;

    @Option(names = "--temperature", paramLabel = "T", defaultValue = "0.8", description = "Sampling temperature; 0 is greedy (default: ${DEFAULT-VALUE}).")
    float temperature;

    @Option(names = "--top-p", paramLabel = "P", defaultValue = "1.0", description = "Nucleus sampling mass; 1 turns it off (default: ${DEFAULT-VALUE}).")
    float topP;

    @Option(names = "--top-k", paramLabel = "K", defaultValue = "0", description = "Sample among the K most likely tokens; 0 turns it off (default: ${DEFAULT-VALUE}).")
    int topK;

    @Option(names = "--seed", paramLabel = "S", defaultValue = "0", description = "Sampling seed (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--greedy", description = "Always take the most likely token (same as --temperature 0).")
    boolean greedy;

    @Option(names = "--ignore-eos", description = "Do not stop at the model's end-of-sequence token.")
    boolean ignoreEos;

    @Option(names = "--python", paramLabel = "PYTHON", description = "The interpreter of the torch worker, which "
            + "generates for the families the in-JVM model does not implement (default: FINETUNE_PYTHON, .venv/bin/python"
            + " beside the launcher, python3).")
    String python;

    @Option(names = "--json",
            description = "Print one JSON object per prompt and line: prompt_ids, generated_ids, stop, text (prompt and continuation, "
                    + "when the model has a tokenizer), last_logits (raw logits at the last prompt position).")
    boolean json;

    @Override
    public Integer call() {
        if ((prompt == null) == (promptIds == null)) {
            throw new UserError("generate", "give exactly one of --prompt and --prompt-ids", "e.g. --prompt \"Once upon a time\"");
        }
        List<long[]> parsedIds = promptIds == null ? null : parseIds();
        if (!Files.isDirectory(modelDir)) {
            throw new UserError(modelDir.toString(), "model directory not found", "give a directory holding config.json and model.safetensors");
        }
        // Text needs the tokenizer; ids are decoded with it when the model has one, and printed as numbers otherwise.
        // A LoRA run's output_dir holds the tokenizer; a merged or plain model folder usually does too.
        Path tokenizerDir = SavedModels.tokenizerDir(modelDir);
        try (Tokenizer tokenizer = prompt != null || Files.isRegularFile(tokenizerDir.resolve("tokenizer.json")) ? Tokenizer.load(tokenizerDir) : null) {
            List<long[]> prompts = parsedIds != null ? parsedIds : encode(tokenizer);
            return generate(prompts, tokenizer);
        }
    }

    private List<long[]> encode(Tokenizer tokenizer) {
        List<long[]> prompts = new ArrayList<>();
        for (String text : prompt) {
            prompts.add(Arrays.stream(tokenizer.encode(text, true)).asLongStream().toArray());
        }
        return prompts;
    }

    private int generate(List<long[]> prompts, Tokenizer tokenizer) {
        // Checked before the engine starts, so a typo costs no model load.
        dev.finetune.recipes.model.ModelConfig config = SavedModels.config(modelDir);
        // the in-JVM model for the families it implements, the torch worker for every other: decided once, said once
        ResolvedRun engine = ResolvedRun.forGeneration(config);
        int vocabulary = config.vocabSize();
        int context = config.maxPositionEmbeddings();
        for (int p = 0; p < prompts.size(); p++) {
            // the KV cache and positions are sized by prompt + new tokens: beyond the context there is nothing
            // trained to attend with, only memory to exhaust
            long needed = (long) prompts.get(p).length + Math.max(0, maxNewTokens);
            if (needed > context) {
                String which = prompts.size() > 1 ? " #" + (p + 1) : "";
                throw prompts.get(p).length >= context
                        ? new UserError(prompt != null ? "--prompt" + which : "--prompt-ids" + which, "the prompt is "
                                + prompts.get(p).length + " tokens, and the model's context is " + context,
                                "shorten the prompt to fewer than " + context + " tokens")
                        : new UserError("--max-new-tokens", "the prompt's " + prompts.get(p).length + " tokens plus "
                                + maxNewTokens + " new ones exceed the model's context of " + context + " tokens",
                                "use --max-new-tokens " + (context - prompts.get(p).length) + " or less");
            }
            for (long id : prompts.get(p)) {
                if (id < 0 || id >= vocabulary) {
                    throw new UserError((prompt != null ? "--prompt" : "--prompt-ids")
                            + (prompts.size() > 1 ? " #" + (p + 1) : ""), "token id " + id + " is outside the "
                            + "vocabulary [0, " + vocabulary + ")" + (prompt != null ? " of config.json, though the "
                            + "model's tokenizer gave it: the two do not belong together" : ""),
                            "use ids from this model's tokenizer");
                }
            }
        }
        GenerationSettings settings = new GenerationSettings(maxNewTokens, greedy ? 0f : temperature, topK, topP, seed, Set.of(), List.of());
        Set<Long> eos = new HashSet<>();
        if (config.eosTokenId() != null) {
            eos.add(config.eosTokenId().longValue());
        }
        if (tokenizer != null && tokenizer.special().eosId() >= 0) {
            eos.add((long) tokenizer.special().eosId());
        }
        if (!ignoreEos) {
            settings = settings.withStops(eos, List.of());
        }
        spec.commandLine().getErr().print(engine.describeGeneration(config));
        spec.commandLine().getErr().flush();
        List<Completion> completions = SavedModelGeneration.generate(modelDir, engine, prompts, settings,
                WorkerPython.find(python, System.getenv(), System.getProperty("finetune.home")));
        for (int p = 0; p < prompts.size(); p++) {
            print(prompts.get(p), completions.get(p), tokenizer);
        }
        return ExitCode.OK;
    }

    private List<long[]> parseIds() {
        List<long[]> prompts = new ArrayList<>();
        for (String text : promptIds) {
            String[] parts = text.split(",", -1);
            long[] ids = new long[parts.length];
            for (int i = 0; i < parts.length; i++) {
                try {
                    ids[i] = Long.parseLong(parts[i].trim());
                } catch (NumberFormatException e) {
                    throw new UserError("--prompt-ids", "'" + parts[i] + "' (item " + (i + 1) + ") is not a token id",
                            "give comma-separated integers, e.g. 1,403,407");
                }
            }
            prompts.add(ids);
        }
        return prompts;
    }

    private void print(long[] ids, Completion completion, Tokenizer tokenizer) {
        PrintWriter out = spec.commandLine().getOut();
        String text = tokenizer == null ? null : tokenizer.decode(toInts(concat(ids, completion.tokens())), true);
        if (json) {
            JsonObject result = new JsonObject();
            result.add("prompt_ids", array(ids));
            result.add("generated_ids", array(completion.tokens()));
            result.addProperty("stop", completion.stop().name().toLowerCase(java.util.Locale.ROOT));
            if (text != null) {
                result.addProperty("text", text);
            }
            JsonArray logits = new JsonArray();
            for (float v : completion.lastPromptLogits()) {
                logits.add(v);
            }
            result.add("last_logits", logits);
            out.println(result);
        } else if (text != null) {
            out.println(text);
        } else {
            StringBuilder line = new StringBuilder();
            for (long id : completion.tokens()) {
                line.append(line.length() == 0 ? "" : " ").append(id);
            }
            out.println(line);
        }
        out.flush();
    }

    private static long[] concat(long[] a, long[] b) {
        long[] out = Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }

    private static int[] toInts(long[] ids) {
        return Arrays.stream(ids).mapToInt(Math::toIntExact).toArray();
    }

    private static JsonArray array(long[] values) {
        JsonArray a = new JsonArray();
        for (long v : values) {
            a.add(v);
        }
        return a;
    }
}
