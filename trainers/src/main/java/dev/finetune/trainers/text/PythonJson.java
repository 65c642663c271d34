package dev.finetune.trainers.text;

import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.lib.filter.Filter;
import java.util.Arrays;
import java.util.Collection;
import java.util.Map;
import java.util.function.BiConsumer;

/**
 * The {@code tojson} filter as transformers defines it: Python's {@code json.dumps} with {@code ensure_ascii=False}
 * and its default separators ({@code ", "} and {@code ": "}), plus {@code indent}. jinjava's own filter writes
 * compact JSON, which would change every rendered tool list and dict.
 */
final class PythonJson implements Filter {
    private static final long serialVersionUID = 1L;

    @Override
    public String getName() {
        return "tojson";
    }

    @Override
    public Object filter(Object value, JinjavaInterpreter interpreter, String... args) {
        return dumps(value, args.length > 0 && args[0] != null ? Integer.parseInt(args[0].strip()) : null);
    }

    @Override
    public Object filter(Object value, JinjavaInterpreter interpreter, Object[] args, Map<String, Object> kwargs) {
        Object indent = kwargs.containsKey("indent") ? kwargs.get("indent") : args.length > 0 ? args[0] : null;
        return dumps(value, indent == null ? null : ((Number) (indent instanceof String s ? Integer.valueOf(s.strip()) : indent)).intValue());
    }

    static String dumps(Object value, Integer indent) {
        StringBuilder out = new StringBuilder();
        write(value, indent, 0, out);
        return out.toString();
    }

    private static void write(Object value, Integer indent, int level, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean || value instanceof Number) {
            out.append(value);
        } else if (value instanceof Map<?, ?> map) {
            writeItems(map.entrySet(), '{', '}', indent, level, out, (entry, o) -> {
                string(String.valueOf(((Map.Entry<?, ?>) entry).getKey()), o);
                o.append(": ");
                write(((Map.Entry<?, ?>) entry).getValue(), indent, level + 1, o);
            });
        } else if (value instanceof Collection<?> items) {
            writeItems(items, '[', ']', indent, level, out, (item, o) -> write(item, indent, level + 1, o));
        } else if (value instanceof Object[] items) {
            writeItems(Arrays.asList(items), '[', ']', indent, level, out, (item, o) -> write(item, indent, level + 1, o));
        } else {
            string(value.toString(), out);
        }
    }

    private static void writeItems(Collection<?> items, char open, char close, Integer indent, int level, StringBuilder out,
            BiConsumer<Object, StringBuilder> item) {
        out.append(open);
        if (items.isEmpty()) {
            out.append(close);
            return;
        }
        boolean first = true;
        for (Object element : items) {
            if (!first) {
                out.append(indent == null ? ", " : ",");
            }
            if (indent != null) {
                out.append('\n').append(" ".repeat(indent * (level + 1)));
            }
            item.accept(element, out);
            first = false;
        }
        if (indent != null) {
            out.append('\n').append(" ".repeat(indent * level));
        }
        out.append(close);
    }

    private static void string(String text, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                case '\n' -> out.append("\\n");
                case '\r' -> out.append("\\r");
                case '\t' -> out.append("\\t");
                case '\b' -> out.append("\\b");
                case '\f' -> out.append("\\f");
                default -> {
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
                }
            }
        }
        out.append('"');
    }
}
