package dev.finetune.trainers.families;

import com.google.gson.Gson;
import com.google.gson.JsonArray;
import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.parity.PythonStack;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.stream.Stream;

/**
 * Tiny random models of every family, made once per test JVM by transformers ({@code families/tiny_families.py}:
 * a few layers, widths of 32, stories260K's 512-token tokenizer, safetensors), and the Python views of them
 * ({@code families/views.py}) that the tests compare with.
 */
public final class TinyFamilies {
    private static Path root;
    private static JsonObject expected;

    private TinyFamilies() {}

    /** The folder holding one model folder per variant and {@code expected.json}. */
    public static synchronized Path root() {
        if (root == null) {
            try {
                Path dir = Files.createTempDirectory("tiny-families-");
                Runtime.getRuntime().addShutdownHook(new Thread(() -> delete(dir)));
                Path script = PythonStack.script("/families/tiny_families.py", dir);
                List<String> arguments = new ArrayList<>(List.of(dir.resolve("models").toString(), "--weights",
                        Stories260KReference.modelDir().toString()));
                if (Boolean.getBoolean("finetune.families.wide")) {
                    // a measurement, not the suite: widths 8x, vocabulary 32000 (see tiny_families.py)
                    arguments.add("--wide");
                }
                PythonStack.runScript(script, dir, arguments.toArray(String[]::new));
                expected = JsonParser.parseString(Files.readString(dir.resolve("models/expected.json"))).getAsJsonObject();
                root = dir.resolve("models");
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
        return root;
    }

    /** A variant's model folder ({@code mistral}, {@code qwen2_moe}, ...). */
    public static Path model(String variant) {
        return root().resolve(variant);
    }

    /** What transformers counted for each variant: num_parameters(), named_parameters() shapes. */
    public static synchronized JsonObject expected() {
        root();
        return expected;
    }

    /** Runs {@code views.py} on the requests in one Python process; one result per request, in order. */
    public static JsonArray views(List<JsonObject> requests, Path work) {
        try {
            Path in = work.resolve("views-request.json");
            Path out = work.resolve("views-result.json");
            Files.writeString(in, new Gson().toJson(requests));
            Path script = work.resolve("views.py");
            if (!Files.exists(script)) {
                PythonStack.script("/families/views.py", work);
            }
            PythonStack.runScript(script, work, in.toString(), out.toString());
            return JsonParser.parseString(Files.readString(out)).getAsJsonArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void delete(Path dir) {
        try (Stream<Path> walk = Files.walk(dir)) {
            walk.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // a temporary folder left behind is all this costs
        }
    }
}
