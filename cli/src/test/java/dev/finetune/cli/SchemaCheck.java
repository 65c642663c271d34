package dev.finetune.cli;

import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Checks a JSON value against the part of JSON Schema our report schema uses: type (one or several), const, enum,
 * required, properties, additionalProperties: false, items, minimum. A keyword outside that set is itself a
 * violation, so the schema cannot silently say more than is checked.
 */
final class SchemaCheck {
    private static final List<String> KNOWN = List.of("$schema", "$id", "title", "description", "type", "const", "enum",
            "required", "properties", "additionalProperties", "items", "minimum");

    private SchemaCheck() {}

    static void check(JsonObject schema, JsonElement value, String path, List<String> violations) {
        for (String keyword : schema.keySet()) {
            if (!KNOWN.contains(keyword)) {
                violations.add(path + ": schema keyword '" + keyword + "' is not checked");
            }
        }
        if (schema.has("type")) {
            List<String> types = new ArrayList<>();
            JsonElement t = schema.get("type");
            if (t.isJsonArray()) {
                t.getAsJsonArray().forEach(e -> types.add(e.getAsString()));
            } else {
                types.add(t.getAsString());
            }
            if (types.stream().noneMatch(type -> is(type, value))) {
                violations.add(path + ": " + value + " is not of type " + types);
                return;
            }
        }
        if (schema.has("const") && !schema.get("const").equals(value)) {
            violations.add(path + ": " + value + " is not " + schema.get("const"));
        }
        if (schema.has("enum") && !schema.getAsJsonArray("enum").contains(value)) {
            violations.add(path + ": " + value + " is not one of " + schema.get("enum"));
        }
        if (schema.has("minimum") && value.isJsonPrimitive() && value.getAsJsonPrimitive().isNumber()
                && value.getAsDouble() < schema.get("minimum").getAsDouble()) {
            violations.add(path + ": " + value + " is below " + schema.get("minimum"));
        }
        if (value.isJsonObject()) {
            JsonObject object = value.getAsJsonObject();
            if (schema.has("required")) {
                for (JsonElement key : schema.getAsJsonArray("required")) {
                    if (!object.has(key.getAsString())) {
                        violations.add(path + ": missing '" + key.getAsString() + "'");
                    }
                }
            }
            JsonObject properties = schema.has("properties") ? schema.getAsJsonObject("properties") : new JsonObject();
            for (Map.Entry<String, JsonElement> e : object.entrySet()) {
                if (properties.has(e.getKey())) {
                    check(properties.getAsJsonObject(e.getKey()), e.getValue(), path + "." + e.getKey(), violations);
                } else if (schema.has("additionalProperties") && !schema.get("additionalProperties").getAsBoolean()) {
                    violations.add(path + ": unexpected '" + e.getKey() + "'");
                }
            }
        }
        if (value.isJsonArray() && schema.has("items")) {
            JsonArray array = value.getAsJsonArray();
            for (int i = 0; i < array.size(); i++) {
                check(schema.getAsJsonObject("items"), array.get(i), path + "[" + i + "]", violations);
            }
        }
    }

    private static boolean is(String type, JsonElement v) {
        return switch (type) {
            case "object" -> v.isJsonObject();
            case "array" -> v.isJsonArray();
            case "null" -> v.isJsonNull();
            case "string" -> v.isJsonPrimitive() && v.getAsJsonPrimitive().isString();
            case "boolean" -> v.isJsonPrimitive() && v.getAsJsonPrimitive().isBoolean();
            case "integer" -> v.isJsonPrimitive() && v.getAsJsonPrimitive().isNumber()
                    && v.getAsDouble() == Math.rint(v.getAsDouble()) && !v.getAsString().contains(".");
            case "number" -> v.isJsonPrimitive() && v.getAsJsonPrimitive().isNumber();
            default -> false;
        };
    }
}
