package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Scalar;
import java.math.BigInteger;

/** Numbers in YAML scalars, as the recipe readers take them, and as their messages print them. */
final class YamlNumbers {
    private YamlNumbers() {}

    /** A whole number as YAML or quoted text writes it; {@code Long.MAX_VALUE} for one beyond a long; else null. */
    static Long wholeNumber(YamlNode n) {
        if (!(n instanceof Scalar s)) {
            return null;
        }
        Object v = s.value();
        if (v instanceof Long l) {
            return l;
        }
        if (v instanceof BigInteger) {
            return Long.MAX_VALUE;
        }
        if (v instanceof String t) {
            try {
                return Long.parseLong(t.trim());
            } catch (NumberFormatException e) {
                return null;
            }
        }
        return null;
    }

    /** Any number, also from numeric text (a quoted {@code "2e-4"}, as Axolotl's schema reads it); else null. */
    static Double realNumber(YamlNode n) {
        if (!(n instanceof Scalar s)) {
            return null;
        }
        Object v = s.value();
        if (v instanceof Long || v instanceof Double || v instanceof BigInteger) {
            return ((Number) v).doubleValue();
        }
        if (v instanceof String t) {
            try {
                return Double.parseDouble(t.trim());
            } catch (NumberFormatException e) {
                return null;
            }
        }
        return null;
    }

    /** A number as a message shows it: whole numbers without {@code .0}. */
    static String fmt(double v) {
        return v == Math.rint(v) && Math.abs(v) < 1e15 ? Long.toString((long) v) : Double.toString(v);
    }
}
