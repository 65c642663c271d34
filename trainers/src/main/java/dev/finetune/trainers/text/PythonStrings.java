package dev.finetune.trainers.text;

import java.beans.FeatureDescriptor;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.Locale;
import jinjava.javax.el.ELContext;
import jinjava.javax.el.ELResolver;

/**
 * Python's {@code str} methods for templates ({@code content.startswith('<tool_response>')},
 * {@code text.split('</think>')}, {@code s.rstrip('\n')}, {@code ', '.join(xs)}): Jinja2 exposes them because its
 * strings are Python strings; jinjava would call Java's methods instead, which either do not exist or differ
 * ({@code split} takes a regex in Java). Indexing a string ({@code role[0]}) is handled here too.
 */
final class PythonStrings extends ELResolver {
    private static final java.util.regex.Pattern INDEX = java.util.regex.Pattern.compile("\\s*-?\\d{1,9}\\s*");

    @Override
    public Object invoke(ELContext context, Object base, Object method, Class<?>[] types, Object[] args) {
        if (!(base instanceof String text) || !(method instanceof String name)) {
            return null;
        }
        Object[] a = args == null ? new Object[0] : args;
        Object result = switch (name) {
            case "startswith" -> a.length == 1 ? anyMatch(a[0], text::startsWith) : null;
            case "endswith" -> a.length == 1 ? anyMatch(a[0], text::endsWith) : null;
            case "strip" -> a.length <= 1 ? strip(text, chars(a), true, true) : null;
            case "lstrip" -> a.length <= 1 ? strip(text, chars(a), true, false) : null;
            case "rstrip" -> a.length <= 1 ? strip(text, chars(a), false, true) : null;
            case "split" -> a.length <= 2 ? split(text, a.length > 0 ? (String) a[0] : null, a.length > 1 ? ((Number) a[1]).intValue() : -1) : null;
            case "upper" -> a.length == 0 ? text.toUpperCase(Locale.ROOT) : null;
            case "lower" -> a.length == 0 ? text.toLowerCase(Locale.ROOT) : null;
            case "replace" -> a.length == 2 ? text.replace(String.valueOf(a[0]), String.valueOf(a[1])) : null;
            case "join" -> a.length == 1 && a[0] instanceof Collection<?> items ? join(text, items) : null;
            case "find" -> a.length == 1 ? (long) text.indexOf(String.valueOf(a[0])) : null;
            case "count" -> a.length == 1 ? count(text, String.valueOf(a[0])) : null;
            default -> null;
        };
        if (result != null) {
            context.setPropertyResolved(true);
        }
        return result;
    }

    private static String chars(Object[] args) {
        return args.length == 0 || args[0] == null ? null : String.valueOf(args[0]);
    }

    /** Python accepts a tuple of prefixes; templates pass a list. */
    private static Boolean anyMatch(Object candidates, java.util.function.Predicate<String> test) {
        if (candidates instanceof Collection<?> many) {
            return many.stream().anyMatch(c -> test.test(String.valueOf(c)));
        }
        return test.test(String.valueOf(candidates));
    }

    /** No argument: strip whitespace; an argument: strip any of its characters. */
    private static String strip(String text, String chars, boolean leading, boolean trailing) {
        int start = 0;
        int end = text.length();
        while (leading && start < end && strippable(text.charAt(start), chars)) {
            start++;
        }
        while (trailing && end > start && strippable(text.charAt(end - 1), chars)) {
            end--;
        }
        return text.substring(start, end);
    }

    private static boolean strippable(char c, String chars) {
        return chars == null ? Character.isWhitespace(c) : chars.indexOf(c) >= 0;
    }

    /** Python's split: literal separator; with none, runs of whitespace separate and empty parts vanish. */
    private static List<String> split(String text, String separator, int maxSplit) {
        List<String> parts = new ArrayList<>();
        if (separator == null) {
            for (String part : text.strip().split("\\s+", maxSplit < 0 ? 0 : maxSplit + 1)) {
                if (!part.isEmpty()) {
                    parts.add(part);
                }
            }
            return parts;
        }
        int from = 0;
        for (int at; (maxSplit < 0 || parts.size() < maxSplit) && (at = text.indexOf(separator, from)) >= 0; from = at + separator.length()) {
            parts.add(text.substring(from, at));
        }
        parts.add(text.substring(from));
        return parts;
    }

    private static String join(String separator, Collection<?> items) {
        StringBuilder out = new StringBuilder();
        boolean first = true;
        for (Object item : items) {
            if (!first) {
                out.append(separator);
            }
            out.append(item);
            first = false;
        }
        return out.toString();
    }

    private static long count(String text, String part) {
        if (part.isEmpty()) {
            return text.length() + 1L;
        }
        long count = 0;
        for (int at = text.indexOf(part); at >= 0; at = text.indexOf(part, at + part.length())) {
            count++;
        }
        return count;
    }

    @Override
    public Class<?> getCommonPropertyType(ELContext context, Object base) {
        return null;
    }

    @Override
    public Iterator<FeatureDescriptor> getFeatureDescriptors(ELContext context, Object base) {
        return null;
    }

    @Override
    public Class<?> getType(ELContext context, Object base, Object property) {
        return null;
    }

    /**
     * {@code text[0]}, {@code text[-1]}: jinjava would return null for an index into a string. It hands the index
     * over as text, so a property that reads as an integer is one.
     */
    @Override
    public Object getValue(ELContext context, Object base, Object property) {
        if (!(base instanceof String text) || property == null || !INDEX.matcher(property.toString()).matches()) {
            return null;
        }
        int index = Integer.parseInt(property.toString().strip());
        index = index < 0 ? text.length() + index : index;
        context.setPropertyResolved(true);
        return index >= 0 && index < text.length() ? String.valueOf(text.charAt(index)) : null;
    }

    @Override
    public boolean isReadOnly(ELContext context, Object base, Object property) {
        return true;
    }

    @Override
    public void setValue(ELContext context, Object base, Object property, Object value) {
        // Strings are immutable; nothing to set.
    }
}
