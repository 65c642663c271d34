package dev.finetune.trainers.backend;

import com.google.gson.Gson;
import com.google.gson.GsonBuilder;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.adapters.io.AtomicFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The ownership marker {@link OutputFolder#MARKER}: JSON with the owning run's recipe hash, the resume keys it hashes
 * (to name what changed), the values a resume may adjust, provenance, and the list of entries the run writes
 * ({@link RunLayout}), which is all that {@code overwrite_output_dir} may ever delete. Apart from
 * {@link OutputFolder}, which decides what a run may do with a folder, because this is the marker's format: how it
 * is written, and how an old, foreign or damaged one reads.
 */
final class RunMarker {
    private static final Gson GSON = new GsonBuilder().setPrettyPrinting().disableHtmlEscaping().create();

    private RunMarker() {}

    /** The marker's text, bounded (a marker is a few KiB; someone else's file in its place may be anything). */
    private static String text(Path folder) throws IOException {
        Path marker = folder.resolve(OutputFolder.MARKER);
        if (!Files.exists(marker, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            throw new NoSuchFileException(marker.toString());
        }
        return dev.finetune.recipes.BoundedFiles.readText(marker, dev.finetune.recipes.BoundedFiles.CONFIG_BYTES,
                "the ownership marker");
    }

    /** A string map of the marker, empty when it has none. */
    static Map<String, String> map(Path folder, String field) {
        Map<String, String> values = new TreeMap<>();
        try {
            JsonObject json = JsonParser.parseString(text(folder))
                    .getAsJsonObject();
            if (json.has(field)) {
                json.getAsJsonObject(field).entrySet().forEach(e -> values.put(e.getKey(), e.getValue().getAsString()));
            }
        } catch (IOException | RuntimeException e) {
            // an unreadable marker was refused before this is asked
        }
        return values;
    }

    /** The marker's list of what its run writes; a marker written before the list existed: this build's list. */
    static List<String> runEntries(Path folder) {
        try {
            JsonObject json = JsonParser.parseString(text(folder))
                    .getAsJsonObject();
            if (!json.has("run_files")) {
                return RunLayout.entries();
            }
            List<String> entries = new ArrayList<>();
            json.getAsJsonArray("run_files").forEach(e -> entries.add(e.getAsString()));
            return entries;
        } catch (IOException | RuntimeException e) {
            return List.of(); // unreadable: nothing in the folder is provably the run's
        }
    }

    /** The resume keys of the run that owns the folder, or {@code null} when no readable marker is there. */
    static Map<String, String> ownerKeys(Path folder) {
        Path marker = folder.resolve(OutputFolder.MARKER);
        try {
            JsonObject json = JsonParser.parseString(text(folder)).getAsJsonObject();
            Map<String, String> keys = new TreeMap<>();
            json.getAsJsonObject("resume_keys").entrySet().forEach(e -> keys.put(e.getKey(), e.getValue().getAsString()));
            return keys;
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException | JsonParseException | IllegalStateException | ClassCastException
                | UnsupportedOperationException | NullPointerException e) {
            throw new UserError(marker.toString(), "the ownership marker is unreadable (" + e.getMessage() + ")",
                    "choose another output_dir, or set overwrite_output_dir=true to start this folder over");
        }
    }

    static void write(Path folder, OutputFolder.Claim claim) throws IOException {
        Map<String, Object> marker = new LinkedHashMap<>();
        marker.put("recipe_hash", claim.hash());
        marker.put("resume_keys", claim.resumeKeys());
        marker.put("adjustable", claim.adjustable());
        marker.put("claimed_at", Instant.now().toString());
        marker.put("pid", ProcessHandle.current().pid());
        marker.put("provenance", claim.provenance());
        // what overwrite_output_dir may delete later: this run's files, never anything else in the folder
        marker.put("run_files", RunLayout.entries());
        AtomicFiles.writeString(folder.resolve(OutputFolder.MARKER), GSON.toJson(marker) + "\n");
    }
}
