package dev.finetune.trainers.text;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.JinjavaInterpreterResolver;
import com.hubspot.jinjava.interpret.RenderResult;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import java.time.ZonedDateTime;
import java.util.Map;
import jinjava.javax.el.CompositeELResolver;

/**
 * Renders Hugging Face chat templates with jinjava, set up like transformers' Jinja2 environment: trim_blocks and
 * lstrip_blocks, whitespace control on expressions, {@code raise_exception}, {@code strftime_now}, the
 * {@code generation} tag, and Python's string methods. Sources go through {@link JinjaSource#adapt} first.
 */
final class Jinja {
    private static final Jinjava ENGINE = newEngine();
    private static final String RAISED = "template raised: ";
    /**
     * Jinja2 sees transformers' functions as globals, so {@code strftime_now is defined} holds; jinjava's functions
     * are not variables. These markers make the test pass; calls still reach the registered functions.
     */
    static final Map<String, Object> GLOBALS = Map.of("strftime_now", true, "raise_exception", true);

    private Jinja() {}

    /** Thrown for a template jinjava would get wrong, or one that fails while rendering. */
    static final class TemplateException extends RuntimeException {
        TemplateException(String message) {
            super(message);
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

    /** jinjava wraps what a template function throws; dig out a raise_exception message if there is one. */
    private static String raisedMessage(TemplateError error) {
        for (Throwable cause = error.getException(); cause != null; cause = cause.getCause()) {
            if (cause instanceof TemplateException raised) {
                return raised.getMessage();
            }
        }
        return "template error: " + error.getMessage();
    }

    private static Jinjava newEngine() {
        // Without the trimming override jinjava ignores {{- and -}} on expressions, which real templates rely on.
        LegacyOverrides jinja2Whitespace = LegacyOverrides.newBuilder().withUseTrimmingForNotesAndExpressions(true).build();
        CompositeELResolver resolver = new CompositeELResolver();
        resolver.add(new PythonStrings());
        resolver.add(JinjavaInterpreterResolver.DEFAULT_RESOLVER_READ_WRITE);
        Jinjava engine = new Jinjava(JinjavaConfig.newBuilder().withTrimBlocks(true).withLstripBlocks(true)
                .withLegacyOverrides(jinja2Whitespace).withElResolver(resolver).build());
        engine.registerTag(new GenerationTag());
        engine.registerFunction(new ELFunctionDefinition("", "raise_exception", Jinja.class, "raiseException", String.class));
        engine.registerFunction(new ELFunctionDefinition("", "strftime_now", Jinja.class, "strftimeNow", String.class));
        return engine;
    }
}
