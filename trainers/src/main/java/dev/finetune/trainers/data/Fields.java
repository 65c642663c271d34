package dev.finetune.trainers.data;

import com.google.gson.JsonElement;
import com.google.gson.JsonObject;

/** Typed access to a row's fields, failing with the field's name and what was found instead. */
final class Fields {
    private Fields() {}

    static String requiredString(JsonObject row, String field, String typeName) {
        JsonElement value = row.get(field);
        if (value == null || value.isJsonNull()) {
            throw new InvalidRow("missing field '" + field + "' (type " + typeName + ")",
                    "every row of a " + typeName + " dataset needs '" + field + "'" + renameHint(typeName));
        }
        return asString(value, field);
    }

    /** Absent and null read as the empty string, as Axolotl treats a missing alpaca {@code input}. */
    static String optionalString(JsonObject row, String field) {
        JsonElement value = row.get(field);
        return value == null || value.isJsonNull() ? "" : asString(value, field);
    }

    static String asString(JsonElement value, String field) {
        if (value.isJsonPrimitive() && value.getAsJsonPrimitive().isString()) {
            return value.getAsString();
        }
        throw new InvalidRow("field '" + field + "' must be a string, found " + describe(value), "quote the value");
    }

    static String describe(JsonElement value) {
        if (value.isJsonArray()) {
            return "an array";
        }
        if (value.isJsonObject()) {
            return "an object";
        }
        if (value.isJsonNull()) {
            return "null";
        }
        String kind = value.getAsJsonPrimitive().isNumber() ? "number" : value.getAsJsonPrimitive().isBoolean() ? "boolean" : "string";
        return "the " + kind + " " + value;
    }

    private static String renameHint(String typeName) {
        return switch (typeName) {
            case "completion" -> "; a different text field is named with the dataset's field: key";
            case "chat_template" -> "; a different list field is named with field_messages:";
            default -> "";
        };
    }
}
