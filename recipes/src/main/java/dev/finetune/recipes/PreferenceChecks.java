package dev.finetune.recipes;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.Locale;

/**
 * Preference pairs that teach nothing: the chosen answer equal to the rejected one (DPO's loss is flat in it, so
 * the pair only dilutes the batch) or an answer that is only whitespace. Counted the same way by {@code validate}
 * (local files) and by the trainer, and reported as one warning with counts.
 */
public final class PreferenceChecks {
    private long rows;
    private long identical;
    private long blank;

    /** Counts one row's answers, as written in the dataset (text, a message, or a list of messages). */
    public void add(JsonElement chosen, JsonElement rejected) {
        rows++;
        if (chosen == null || rejected == null) {
            return;
        }
        if (isBlank(chosen) || isBlank(rejected)) {
            blank++;
        } else if (text(chosen).strip().equals(text(rejected).strip())) {
            identical++;
        }
    }

    /** The warning to print, or {@code null} when every pair can teach something. */
    public String warning() {
        if (identical == 0 && blank == 0) {
            return null;
        }
        StringBuilder s = new StringBuilder();
        if (identical > 0) {
            s.append(String.format(Locale.ROOT, "%d of %d preference rows have chosen == rejected", identical, rows));
        }
        if (blank > 0) {
            s.append(s.length() > 0 ? ", and " : "").append(String.format(Locale.ROOT,
                    "%d of %d have a whitespace-only answer", blank, rows));
        }
        return s.append(": such pairs teach nothing and only dilute the batch").toString();
    }

    public static final String HINT = "fix or remove those rows";

    /** The answer's words: a string, a message's content, or the last message of a list. */
    private static String text(JsonElement answer) {
        if (answer.isJsonPrimitive()) {
            return answer.getAsString();
        }
        if (answer.isJsonObject()) {
            JsonElement content = ((JsonObject) answer).get("content");
            return content != null && content.isJsonPrimitive() ? content.getAsString() : answer.toString();
        }
        if (answer.isJsonArray() && !((JsonArray) answer).isEmpty()) {
            JsonArray list = (JsonArray) answer;
            return text(list.get(list.size() - 1));
        }
        return answer.toString();
    }

    private static boolean isBlank(JsonElement answer) {
        return !answer.isJsonNull() && text(answer).isBlank();
    }
}
