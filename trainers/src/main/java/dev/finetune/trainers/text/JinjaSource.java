package dev.finetune.trainers.text;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.function.IntPredicate;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Rewrites a Hugging Face chat template so jinjava renders it as Jinja2 would, or refuses it. Each rewrite keeps
 * the template's meaning in Jinja2 and fixes one place where jinjava reads the same text differently:
 *
 * <ul>
 *   <li>{@code {% for x in xs if cond %}}: jinjava drops the filter. Becomes a loop that collects the kept items
 *       and a loop over them, so {@code loop.index}, {@code loop.last} and the body see what Jinja2 shows.
 *   <li>{@code not a == b}: jinjava reads {@code (not a) == b}. Becomes {@code not (a == b)}.
 *   <li>{@code namespace(n=xs|length - 1)}: jinjava fails on arithmetic in a named argument. Values get parentheses.
 *   <li>{@code xs[::-1]}: jinjava has no step slices. Becomes {@code xs|reverse}.
 *   <li>A final newline: Jinja2 drops it (keep_trailing_newline is off in transformers); so do we.
 *   <li>{@code {% for %}…{% else %}}: jinjava prints the else branch after every item. Refused.
 * </ul>
 */
final class JinjaSource {
    private static final Pattern TAG = Pattern.compile("\\{%([-+]?)(.*?)([-+]?)%\\}", Pattern.DOTALL);
    private static final Pattern EXPRESSION_OR_TAG = Pattern.compile("(\\{\\{|\\{%)(.*?)(\\}\\}|%\\})", Pattern.DOTALL);
    private static final String OPERAND = "[A-Za-z_][\\w.]*(?:\\[[^\\]]*\\]|\\([^)]*\\))*(?:\\s*\\|\\s*\\w+(?:\\([^)]*\\))?)*";
    private static final Pattern NOT_BEFORE_COMPARISON = Pattern.compile(
            "\\bnot\\s+(?!(?:none|true|false|defined|in)\\b)(" + OPERAND + ")\\s*(?:==|!=|<=|>=|<|>|\\bin\\b|\\bnot\\s+in\\b)");
    private static final Pattern NAMESPACE_CALL = Pattern.compile("\\bnamespace\\s*\\(");
    private static final Pattern NAMED_ARGUMENT = Pattern.compile("(\\s*[A-Za-z_]\\w*\\s*)=(?!=)(.+)", Pattern.DOTALL);
    private static final Pattern REVERSED_SLICE = Pattern.compile("\\[\\s*:\\s*:\\s*-\\s*1\\s*\\]");

    private JinjaSource() {}

    /** The source jinjava should run; throws {@link Jinja.TemplateException} for one it cannot run faithfully. */
    static String adapt(String source) {
        refuseForElse(source);
        String adapted = source.endsWith("\r\n") ? source.substring(0, source.length() - 2)
                : source.endsWith("\n") ? source.substring(0, source.length() - 1) : source;
        adapted = parenthesizeNegatedComparisons(adapted);
        adapted = rewriteLoopFilters(adapted);
        adapted = parenthesizeNamespaceArguments(adapted);
        return REVERSED_SLICE.matcher(adapted).replaceAll("|reverse");
    }

    private static void refuseForElse(String source) {
        Deque<String> open = new ArrayDeque<>();
        Matcher tag = TAG.matcher(source);
        while (tag.find()) {
            String keyword = tag.group(2).strip().split("[\\s(]", 2)[0];
            switch (keyword) {
                case "for", "if" -> open.push(keyword);
                case "endfor", "endif" -> open.poll();
                case "else" -> {
                    if ("for".equals(open.peek())) {
                        throw new Jinja.TemplateException("the template has a for loop with an else branch, which jinjava"
                                + " renders after every item; pass a rewritten copy as chat_template_jinja");
                    }
                }
                default -> { }
            }
        }
    }

    static String parenthesizeNegatedComparisons(String source) {
        StringBuilder out = new StringBuilder();
        Matcher block = EXPRESSION_OR_TAG.matcher(source);
        int copied = 0;
        while (block.find()) {
            String body = block.group(2);
            String rewritten = body;
            // Right to left, so earlier offsets stay valid.
            List<int[]> edits = new ArrayList<>();
            Matcher negation = NOT_BEFORE_COMPARISON.matcher(body);
            while (negation.find()) {
                if (!insideString(body, negation.start())) {
                    int operand = negation.start(1);
                    int end = scan(body, operand, body.length(),
                            i -> body.charAt(i) == ',' || keywordAt(body, i, "and") || keywordAt(body, i, "or")
                                    || keywordAt(body, i, "if") || keywordAt(body, i, "else"));
                    edits.add(new int[] {operand, end < 0 ? trimmedEnd(body) : end});
                }
            }
            for (int e = edits.size() - 1; e >= 0; e--) {
                int start = edits.get(e)[0];
                int end = edits.get(e)[1];
                while (end > start && Character.isWhitespace(rewritten.charAt(end - 1))) {
                    end--;
                }
                rewritten = rewritten.substring(0, start) + "(" + rewritten.substring(start, end) + ")" + rewritten.substring(end);
            }
            out.append(source, copied, block.start(2)).append(rewritten);
            copied = block.end(2);
        }
        return out.append(source, copied, source.length()).toString();
    }

    /** Where a tag body's expression ends, before a trailing whitespace-control sign. */
    private static int trimmedEnd(String body) {
        int end = body.length();
        while (end > 0 && (Character.isWhitespace(body.charAt(end - 1)) || body.charAt(end - 1) == '-' || body.charAt(end - 1) == '+')) {
            end--;
        }
        return end;
    }

    static String rewriteLoopFilters(String source) {
        Matcher tag = TAG.matcher(source);
        StringBuilder out = new StringBuilder();
        int copied = 0;
        int rewritten = 0;
        while (tag.find()) {
            String body = tag.group(2).strip();
            if (!body.startsWith("for ")) {
                continue;
            }
            String header = body.substring(4);
            int in = keyword(header, "in", 0);
            int filter = in < 0 ? -1 : keyword(header, "if", in + 2);
            if (filter < 0) {
                continue;
            }
            String target = header.substring(0, in).strip();
            String iterable = header.substring(in + 2, filter).strip();
            String condition = header.substring(filter + 2).strip();
            if (keyword(condition, "recursive", 0) >= 0) {
                throw new Jinja.TemplateException("the template filters a recursive loop (`" + body + "`), which jinjava"
                        + " cannot evaluate; pass a rewritten copy as chat_template_jinja");
            }
            String kept = "finetune_kept_" + rewritten++;
            String item = target.contains(",") ? "[" + target.replaceAll("^\\(|\\)$", "") + "]" : target;
            out.append(source, copied, tag.start())
                    .append("{%").append(tag.group(1)).append(" set ").append(kept).append(" = [] %}")
                    .append("{% for ").append(target).append(" in ").append(iterable).append(" %}")
                    .append("{% if ").append(condition).append(" %}{% do ").append(kept).append(".append(").append(item)
                    .append(") %}{% endif %}{% endfor %}")
                    .append("{% for ").append(target).append(" in ").append(kept).append(' ').append(tag.group(3)).append("%}");
            copied = tag.end();
        }
        return out.append(source, copied, source.length()).toString();
    }

    static String parenthesizeNamespaceArguments(String source) {
        StringBuilder out = new StringBuilder();
        int copied = 0;
        Matcher call = NAMESPACE_CALL.matcher(source);
        while (call.find()) {
            int open = call.end() - 1;
            int close = scan(source, open + 1, source.length(), i -> false);
            if (close < 0 || source.charAt(close) != ')' || close < copied) {
                continue;
            }
            List<String> arguments = new ArrayList<>();
            int start = open + 1;
            for (int comma; (comma = scan(source, start, close, i -> source.charAt(i) == ',')) >= 0 && comma < close; start = comma + 1) {
                arguments.add(source.substring(start, comma));
            }
            arguments.add(source.substring(start, close));
            List<String> wrapped = new ArrayList<>();
            for (String argument : arguments) {
                Matcher named = NAMED_ARGUMENT.matcher(argument);
                wrapped.add(named.matches() ? named.group(1) + "=(" + named.group(2) + ")" : argument);
            }
            out.append(source, copied, open + 1).append(String.join(",", wrapped)).append(')');
            copied = close + 1;
        }
        return out.append(source, copied, source.length()).toString();
    }

    /** Index of {@code word} as a separate word, outside brackets and string literals, or -1. */
    private static int keyword(String text, String word, int from) {
        int at = scan(text, from, text.length(), i -> keywordAt(text, i, word));
        return at >= 0 && keywordAt(text, at, word) ? at : -1;
    }

    private static boolean keywordAt(String text, int i, String word) {
        return text.startsWith(word, i) && boundary(text, i - 1) && boundary(text, i + word.length());
    }

    private static boolean boundary(String text, int index) {
        return index < 0 || index >= text.length() || !Character.isJavaIdentifierPart(text.charAt(index));
    }

    private static boolean insideString(String text, int position) {
        char quote = 0;
        for (int i = 0; i < position; i++) {
            char c = text.charAt(i);
            if (quote != 0 && c == '\\') {
                i++;
            } else if (quote != 0 && c == quote) {
                quote = 0;
            } else if (quote == 0 && (c == '\'' || c == '"')) {
                quote = c;
            }
        }
        return quote != 0;
    }

    /**
     * Walks {@code text} from {@code from} to {@code to} outside string literals and returns the first index where
     * {@code stop} holds at bracket depth 0, or where a closing bracket without its opener appears; -1 if neither.
     */
    private static int scan(String text, int from, int to, IntPredicate stop) {
        int depth = 0;
        char quote = 0;
        for (int i = from; i < to; i++) {
            char c = text.charAt(i);
            if (quote != 0) {
                if (c == '\\') {
                    i++;
                } else if (c == quote) {
                    quote = 0;
                }
                continue;
            }
            if (depth == 0 && stop.test(i)) {
                return i;
            }
            switch (c) {
                case '\'', '"' -> quote = c;
                case '(', '[', '{' -> depth++;
                case ')', ']', '}' -> {
                    if (--depth < 0) {
                        return i;
                    }
                }
                default -> { }
            }
        }
        return -1;
    }
}
