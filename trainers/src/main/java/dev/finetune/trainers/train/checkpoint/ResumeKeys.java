package dev.finetune.trainers.train.checkpoint;

import dev.finetune.recipes.UserError;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * The recipe values a checkpoint is only valid for (model, adapter rank and targets, dataset identity,
 * {@code sequence_len}, …), hashed so a resume can refuse a changed recipe and name what changed.
 */
public final class ResumeKeys {
    private ResumeKeys() {}

    /** SHA-256 over {@code key=value} lines in key order. */
    public static String hash(Map<String, String> keys) {
        StringBuilder canonical = new StringBuilder();
        for (Map.Entry<String, String> entry : new TreeMap<>(keys).entrySet()) {
            canonical.append(entry.getKey()).append('=').append(entry.getValue()).append('\n');
        }
        try {
            byte[] digest = MessageDigest.getInstance("SHA-256")
                    .digest(canonical.toString().getBytes(StandardCharsets.UTF_8));
            return HexFormat.of().formatHex(digest);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("every JDK has SHA-256", e);
        }
    }

    /** {@code key: saved → current} for every key whose value differs, was added or was removed. */
    public static List<String> differences(Map<String, String> saved, Map<String, String> current) {
        SortedMap<String, String> before = new TreeMap<>(saved);
        TreeSet<String> keys = new TreeSet<>(before.keySet());
        keys.addAll(current.keySet());
        List<String> changes = new ArrayList<>();
        for (String key : keys) {
            String was = before.get(key);
            String is = current.get(key);
            if (!Objects.equals(was, is)) {
                changes.add(key + ": " + (was == null ? "(unset)" : was) + " → " + (is == null ? "(unset)" : is));
            }
        }
        return changes;
    }

    /** Refuses to resume from {@code checkpoint} when the recipe changed in a key that must stay fixed. */
    public static void requireUnchanged(TrainerState saved, Map<String, String> current, String checkpoint) {
        if (saved.resumeKeysHash().equals(hash(current))) {
            return;
        }
        List<String> changes = differences(saved.resumeKeys(), current);
        throw new UserError("resume_from_checkpoint",
                checkpoint + " was written by a different recipe: "
                        + (changes.isEmpty() ? "its recipe hash differs" : String.join("; ", changes)),
                "restore these values, or start a fresh run in another output_dir");
    }
}
