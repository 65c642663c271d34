package dev.finetune.trainers.backend.fsdp;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.generation.Completion;
import dev.finetune.trainers.generation.GenerationSettings;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Locale;

/**
 * {@code finetune generate} on the torch worker ({@code finetune_worker/generate.py}): for the families the in-JVM
 * model does not implement. One plain worker process loads the base model and the saved adapter with the worker's
 * own loading code, continues the prompts with {@code Generator.java}'s loop and sampler, and hands back what a
 * {@link Completion} holds, so the command prints the same lines whichever engine served it.
 */
public final class WorkerGeneration {
    /** Lines of the worker's output kept for a failure's message. */
    private static final int TAIL = 40;

    private WorkerGeneration() {}

    /**
     * One completion per prompt, in order.
     *
     * @param base the model folder (a merged or plain model, or the adapter's base)
     * @param adapter the PEFT adapter folder on top of {@code base}, or null
     */
    public static List<Completion> generate(String python, Path base, Path adapter, List<long[]> prompts,
            GenerationSettings settings) {
        WorkerPython.check(python);
        try (WorkerPython.Code code = WorkerPython.privateCopy()) {
            Path request = code.folder().resolve("generate-request.json");
            Path result = code.folder().resolve("generate-result.json");
            Files.writeString(request, new Gson().toJson(request(base, adapter, prompts, settings)));
            List<String> command = WorkerPython.command(python, code.entry(), "generate", request.toString(),
                    result.toString());
            Process process = new ProcessBuilder(command).redirectErrorStream(true).start();
            process.getOutputStream().close();
            Deque<String> tail = new ArrayDeque<>();
            try (InputStream in = process.getInputStream()) {
                // read to the end so the worker never blocks on a full pipe; only the last lines are kept
                for (String line : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
                    if (tail.size() == TAIL) {
                        tail.removeFirst();
                    }
                    tail.addLast(line);
                }
            }
            int exit = process.waitFor();
            if (exit != 0 || !Files.isRegularFile(result)) {
                throw new FsdpBackend.WorkerFailed("the torch worker could not generate (exit " + exit + "): "
                        + cause(tail));
            }
            return completions(JsonParser.parseString(Files.readString(result)).getAsJsonObject(), prompts.size());
        } catch (IOException e) {
            throw new UserError("python", "cannot run '" + python + "' for generate: " + e.getMessage(),
                    WorkerPython.pipCommand(python));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while the worker generated", e);
        }
    }

    private static JsonObject request(Path base, Path adapter, List<long[]> prompts, GenerationSettings settings) {
        JsonObject request = new JsonObject();
        request.addProperty("model", base.toAbsolutePath().toString());
        request.addProperty("adapter", adapter == null ? null : adapter.toAbsolutePath().toString());
        JsonArray rows = new JsonArray();
        prompts.forEach(p -> rows.add(longs(p)));
        request.add("prompts", rows);
        request.addProperty("max_new_tokens", settings.maxNewTokens());
        request.addProperty("temperature", settings.temperature());
        request.addProperty("top_k", settings.topK());
        request.addProperty("top_p", settings.topP());
        request.addProperty("min_p", settings.minP());
        request.addProperty("repetition_penalty", settings.repetitionPenalty());
        request.addProperty("seed", settings.seed());
        request.add("eos_ids", longs(settings.eosIds().stream().mapToLong(Long::longValue).sorted().toArray()));
        JsonArray stops = new JsonArray();
        settings.stopSequences().forEach(s -> stops.add(longs(s)));
        request.add("stop_sequences", stops);
        return request;
    }

    private static List<Completion> completions(JsonObject result, int rows) {
        JsonArray all = result.getAsJsonArray("completions");
        if (all.size() != rows) {
            throw new IllegalStateException("the worker returned " + all.size() + " completions for " + rows + " prompts");
        }
        List<Completion> out = new ArrayList<>();
        for (JsonElement element : all) {
            JsonObject row = element.getAsJsonObject();
            JsonArray tokens = row.getAsJsonArray("tokens");
            long[] ids = new long[tokens.size()];
            for (int i = 0; i < ids.length; i++) {
                ids[i] = tokens.get(i).getAsLong();
            }
            JsonArray logits = row.getAsJsonArray("last_logits");
            float[] last = new float[logits.size()];
            for (int i = 0; i < last.length; i++) {
                last[i] = logits.get(i).getAsFloat();
            }
            out.add(new Completion(ids, Completion.Stop.valueOf(row.get("stop").getAsString().toUpperCase(Locale.ROOT)),
                    last));
        }
        return out;
    }

    /** The worker's own error: the last line of its traceback, else its last line. */
    private static String cause(Deque<String> tail) {
        String last = "(no output)";
        for (String line : tail) {
            String t = line.strip();
            if (!t.isEmpty() && !t.startsWith("File ") && !t.startsWith("^") && !t.startsWith("~")) {
                last = t;
            }
        }
        return last;
    }

    private static JsonArray longs(long[] values) {
        JsonArray array = new JsonArray();
        for (long v : values) {
            array.add(v);
        }
        return array;
    }
}
