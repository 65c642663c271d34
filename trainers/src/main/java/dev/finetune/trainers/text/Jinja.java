package dev.finetune.trainers.text;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.interpret.RenderResult;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import java.time.ZonedDateTime;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Renders Hugging Face chat templates with jinjava, configured like transformers' environment (trim_blocks,
 * lstrip_blocks, {@code raise_exception}, {@code strftime_now}).
 *
 * <p>jinjava differs from Jinja2 in two ways that real templates hit, and both would render silently wrong:
 * it ignores the filter of {@code {% for x in xs if cond %}} (rewritten here into an equivalent two-pass loop, so
 * {@code loop.index}/{@code loop.last} still count only the kept items), and it reads {@code not a == b} as
 * {@code (not a) == b}, and it prints a for loop's {@code else} branch after every item (both refused, with the
 * fix to write).
 */
final class Jinja {
    private static final Jinjava ENGINE = newEngine();
    private static final Pattern TAG = Pattern.compile("\\{%([-+]?)(.*?)([-+]?)%\\}", Pattern.DOTALL);
    private static final Pattern NOT_BEFORE_COMPARISON = Pattern.compile(
            "\\bnot\\s+(?!\\()(?!(?:none|true|false|defined)\\b)[A-Za-z_][\\w.]*(?:\\[[^\\]]*\\])*\\s*(?:==|!=|<=|>=|<|>|in\\b)");
    private static final Pattern EXPRESSIONS = Pattern.compile("\\{\\{(.*?)\\}\\}|\\{%(.*?)%\\}", Pattern.DOTALL);

    private Jinja() {}

    /** Thrown for a template jinjava would get wrong, or one that fails while rendering. */
    static final class TemplateException extends RuntimeException {
        TemplateException(String message) {
            super(message);
        }
    }

    /** The source jinjava should run: loop filters rewritten; templates it would misread refused. */
    static String adapt(String source) {
        Matcher expression = EXPRESSIONS.matcher(source);
        while (expression.find()) {
            String body = expression.group(1) != null ? expression.group(1) : expression.group(2);
            Matcher misread = NOT_BEFORE_COMPARISON.matcher(body);
            if (misread.find()) {
                throw new TemplateException("the template has `" + misread.group().trim()
                        + "`, which jinjava evaluates as `(not a) == b` where Jinja2 means `not (a == b)`;"
                        + " add the parentheses in a copy of the template and pass it as chat_template_jinja");
            }
        }
        refuseForElse(source);
        return rewriteLoopFilters(source);
    }

    /** jinjava prints a for loop's {@code else} branch after every item instead of only for an empty loop. */
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
                        throw new TemplateException("the template has a for loop with an else branch, which jinjava"
                                + " renders after every item; pass a rewritten copy as chat_template_jinja");
                    }
                }
                default -> { }
            }
        }
    }

    static String render(String adaptedSource, Map<String, Object> context) {
        RenderResult result = ENGINE.renderForResult(adaptedSource, context);
        for (TemplateError error : result.getErrors()) {
            if (error.getSeverity() == TemplateError.ErrorType.FATAL
                    || error.getReason() == TemplateError.ErrorReason.SYNTAX_ERROR
                    || error.getReason() == TemplateError.ErrorReason.EXCEPTION) {
                String line = error.getLineno() > 0 ? " (template line " + error.getLineno() + ")" : "";
                throw new TemplateException(raisedMessage(error) + line);
            }
        }
        return result.getOutput();
    }

    /** {@code raise_exception('msg')} in a template; jinjava reports it as a fatal error carrying our message. */
    public static String raiseException(String message) {
        throw new TemplateException(RAISED + message);
    }

    /** Python's {@code strftime} for the handful of fields chat templates put in a date line. */
    public static String strftimeNow(String pythonFormat) {
        ZonedDateTime now = ZonedDateTime.now();
        StringBuilder out = new StringBuilder();
        for (int i = 0; i < pythonFormat.length(); i++) {
            char c = pythonFormat.charAt(i);
            if (c != '%' || i + 1 == pythonFormat.length()) {
                out.append(c);
                continue;
            }
            char field = pythonFormat.charAt(++i);
            out.append(switch (field) {
                case 'd' -> String.format("%02d", now.getDayOfMonth());
                case 'm' -> String.format("%02d", now.getMonthValue());
                case 'Y' -> String.valueOf(now.getYear());
                case 'y' -> String.format("%02d", now.getYear() % 100);
                case 'b' -> now.getMonth().getDisplayName(java.time.format.TextStyle.SHORT, java.util.Locale.ENGLISH);
                case 'B' -> now.getMonth().getDisplayName(java.time.format.TextStyle.FULL, java.util.Locale.ENGLISH);
                case 'a' -> now.getDayOfWeek().getDisplayName(java.time.format.TextStyle.SHORT, java.util.Locale.ENGLISH);
                case 'A' -> now.getDayOfWeek().getDisplayName(java.time.format.TextStyle.FULL, java.util.Locale.ENGLISH);
                case 'H' -> String.format("%02d", now.getHour());
                case 'M' -> String.format("%02d", now.getMinute());
                case 'S' -> String.format("%02d", now.getSecond());
                case '%' -> "%";
                default -> throw new TemplateException("strftime_now: unsupported field %" + field);
            });
        }
        return out.toString();
    }

    private static final String RAISED = "template raised: ";

    /** jinjava wraps what a template function throws; dig out a raise_exception message if there is one. */
    private static String raisedMessage(TemplateError error) {
        for (Throwable cause = error.getException(); cause != null; cause = cause.getCause()) {
            if (cause instanceof TemplateException raised) {
                return raised.getMessage();
            }
        }
        return "template error: " + error.getMessage();
    }

    /**
     * {@code {% for T in ITER if COND %}} becomes a first loop that collects the kept items into a fresh list and
     * a second loop over that list, so the body and {@code loop.*} see exactly what Jinja2 would show them.
     */
    static String rewriteLoopFilters(String source) {
        Matcher tag = TAG.matcher(source);
        StringBuilder out = new StringBuilder();
        int copied = 0;
        int rewritten = 0;
        while (tag.find()) {
            String body = tag.group(2).strip();
            if (!body.startsWith("for ") && !body.startsWith("for(")) {
                continue;
            }
            String header = body.substring(3).strip();
            int in = topLevelKeyword(header, "in", 0);
            if (in < 0) {
                continue;
            }
            int filter = topLevelKeyword(header, "if", in + 2);
            if (filter < 0) {
                continue;
            }
            String target = header.substring(0, in).strip();
            String iterable = header.substring(in + 2, filter).strip();
            String condition = header.substring(filter + 2).strip();
            if (topLevelKeyword(condition, "recursive", 0) >= 0) {
                throw new TemplateException("the template filters a recursive loop (`" + body + "`), which jinjava cannot"
                        + " evaluate; pass a rewritten copy as chat_template_jinja");
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

    /** Index of {@code keyword} as a separate word outside brackets and string literals, or -1. */
    private static int topLevelKeyword(String text, String keyword, int from) {
        int depth = 0;
        char quote = 0;
        for (int i = from; i < text.length(); i++) {
            char c = text.charAt(i);
            if (quote != 0) {
                if (c == '\\') {
                    i++;
                } else if (c == quote) {
                    quote = 0;
                }
                continue;
            }
            switch (c) {
                case '\'', '"' -> quote = c;
                case '(', '[', '{' -> depth++;
                case ')', ']', '}' -> depth--;
                default -> {
                    if (depth == 0 && text.startsWith(keyword, i) && isWordBoundary(text, i - 1)
                            && isWordBoundary(text, i + keyword.length())) {
                        return i;
                    }
                }
            }
        }
        return -1;
    }

    private static boolean isWordBoundary(String text, int index) {
        return index < 0 || index >= text.length() || !Character.isJavaIdentifierPart(text.charAt(index));
    }

    private static Jinjava newEngine() {
        Jinjava engine = new Jinjava(JinjavaConfig.newBuilder().withTrimBlocks(true).withLstripBlocks(true).build());
        engine.registerFunction(new ELFunctionDefinition("", "raise_exception", Jinja.class, "raiseException", String.class));
        engine.registerFunction(new ELFunctionDefinition("", "strftime_now", Jinja.class, "strftimeNow", String.class));
        return engine;
    }
}
