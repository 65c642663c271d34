package dev.finetune.recipes;

import com.google.gson.JsonObject;
import com.google.gson.JsonParser;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * What the torch worker implements, as it declares it itself in {@code finetune_worker/capabilities.json}: the worker
 * builds its lists from that file, and the build copies the same file here, so {@code validate} and {@code --dry-run}
 * refuse what the worker lacks without starting Python, and Java keeps no list of its own.
 *
 * @param objectives the objectives it trains ({@link Recipe.Objective#key})
 * @param dpoLossTypes TRL's DPO loss types it implements ({@link DpoLossType#key})
 */
public record WorkerCapabilities(List<String> objectives, List<String> dpoLossTypes) {
    private static final String RESOURCE = "/dev/finetune/recipes/capabilities.json";
    private static final WorkerCapabilities DECLARED = read();

    /** The capabilities of the worker shipped with this build. */
    public static WorkerCapabilities declared() {
        return DECLARED;
    }

    private static WorkerCapabilities read() {
        try (InputStream in = WorkerCapabilities.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException(RESOURCE + " is missing from this build (recipes/pom.xml copies it "
                        + "from the worker's package)");
            }
            JsonObject json = JsonParser.parseReader(new InputStreamReader(in, StandardCharsets.UTF_8)).getAsJsonObject();
            return new WorkerCapabilities(strings(json, "objectives"), strings(json, "dpo_loss_types"));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static List<String> strings(JsonObject json, String key) {
        List<String> out = new ArrayList<>();
        json.getAsJsonArray(key).forEach(e -> out.add(e.getAsString()));
        return List.copyOf(out);
    }
}
