package dev.finetune.recipes.model;

import com.google.gson.JsonElement;
import com.google.gson.JsonNull;
import com.google.gson.JsonObject;
import com.google.gson.JsonPrimitive;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.UncheckedIOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;

/**
 * Architectures of well-known hub models, so {@code plan} can answer for {@code base_model:
 * meta-llama/Llama-3.1-8B} without downloading anything.
 *
 * <p>The table is {@code known-models.tsv} beside the recipe key table, read once. Its columns are
 * {@code config.json} keys, and each row goes through {@link ModelConfig#fromJson}, so a hub model in the table and
 * a local model folder are read by the same code. The numbers serve planning; the trainer always reads the
 * checkpoint's own config.
 */
public final class KnownModels {

    private static final String TABLE = "/dev/finetune/recipes/known-models.tsv";
    private static final List<String> ROPE_SCALING_KEYS =
            List.of("rope_type", "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings");

    private static final Map<String, ModelConfig> BY_NAME;
    /** Each row's config.json, for a recipe's {@code overrides_of_model_config}. */
    private static final Map<String, JsonObject> JSON_BY_NAME;
    private static final List<String> CANONICAL;

    static {
        Map<String, ModelConfig> byName = new LinkedHashMap<>();
        Map<String, JsonObject> jsonByName = new LinkedHashMap<>();
        List<String> canonical = new ArrayList<>();
        List<String> columns = null;
        try (InputStream in = KnownModels.class.getResourceAsStream(TABLE)) {
            if (in == null) {
                throw new IllegalStateException(TABLE + " is missing from the recipes jar");
            }
            BufferedReader reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8));
            String line;
            int number = 0;
            while ((line = reader.readLine()) != null) {
                number++;
                if (line.startsWith("#") || line.isBlank()) {
                    continue;
                }
                List<String> cells = List.of(line.split("\t", -1));
                if (columns == null) {
                    columns = cells;
                    continue;
                }
                if (cells.size() != columns.size()) {
                    throw new IllegalStateException(TABLE + ":" + number + ": " + cells.size() + " cells, header has " + columns.size());
                }
                String name = cells.get(0);
                JsonObject json = configJson(columns, cells, number);
                ModelConfig config = ModelConfig.fromJson(json, TABLE + ":" + number);
                canonical.add(name);
                byName.put(key(name), config);
                jsonByName.put(key(name), json);
                String aliases = cells.get(1);
                if (!aliases.equals("-")) {
                    for (String alias : aliases.split(",")) {
                        byName.put(key(alias), config);
                        jsonByName.put(key(alias), json);
                    }
                }
            }
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        BY_NAME = Collections.unmodifiableMap(byName);
        JSON_BY_NAME = Collections.unmodifiableMap(jsonByName);
        CANONICAL = List.copyOf(canonical);
    }

    private KnownModels() {}

    /** The architecture of a hub model by name (case-insensitive), or empty when we do not know it. */
    public static Optional<ModelConfig> lookup(String hubName) {
        return Optional.ofNullable(BY_NAME.get(key(hubName)));
    }

    /** The row of a hub model as the config.json it stands for (a copy), or empty when we do not know it. */
    static Optional<JsonObject> json(String hubName) {
        return Optional.ofNullable(JSON_BY_NAME.get(key(hubName))).map(JsonObject::deepCopy);
    }

    /** The canonical hub names, in table order (aliases left out). */
    public static List<String> names() {
        return CANONICAL;
    }

    private static String key(String name) {
        return name.strip().toLowerCase(Locale.ROOT);
    }

    /** One row as the {@code config.json} it stands for; {@code -} leaves a key out. */
    private static JsonObject configJson(List<String> columns, List<String> cells, int number) {
        JsonObject json = new JsonObject();
        for (int c = 2; c < columns.size(); c++) {
            String cell = cells.get(c);
            if (cell.equals("-")) {
                continue;
            }
            if (columns.get(c).equals("rope_scaling")) {
                String[] parts = cell.split(" ");
                if (parts.length != ROPE_SCALING_KEYS.size()) {
                    throw new IllegalStateException(TABLE + ":" + number + ": rope_scaling needs " + ROPE_SCALING_KEYS);
                }
                JsonObject scaling = new JsonObject();
                for (int i = 0; i < parts.length; i++) {
                    scaling.add(ROPE_SCALING_KEYS.get(i), value(parts[i]));
                }
                json.add("rope_scaling", scaling);
            } else {
                json.add(columns.get(c), value(cell));
            }
        }
        return json;
    }

    private static JsonElement value(String cell) {
        if (cell.equals("null")) {
            return JsonNull.INSTANCE;
        }
        if (cell.equals("true") || cell.equals("false")) {
            return new JsonPrimitive(Boolean.parseBoolean(cell));
        }
        try {
            return new JsonPrimitive(new BigDecimal(cell));
        } catch (NumberFormatException e) {
            return new JsonPrimitive(cell);
        }
    }
}
