package dev.finetune.trainers.text;

import com.hubspot.jinjava.Jinjava;
import com.hubspot.jinjava.JinjavaConfig;
import com.hubspot.jinjava.LegacyOverrides;
import com.hubspot.jinjava.el.JinjavaInterpreterResolver;
import com.hubspot.jinjava.interpret.Context;
import com.hubspot.jinjava.interpret.JinjavaInterpreter;
import com.hubspot.jinjava.interpret.TemplateError;
import com.hubspot.jinjava.lib.fn.ELFunctionDefinition;
import com.hubspot.jinjava.tree.Node;
import java.time.ZonedDateTime;
import java.time.format.TextStyle;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import jinjava.javax.el.CompositeELResolver;

/**
 * Renders Hugging Face chat templates with jinjava, set up like transformers' Jinja2 environment: trim_blocks and
 * lstrip_blocks, whitespace control on expressions, {@code raise_exception}, {@code strftime_now}, the
 * {@code generation} tag, and Python's string methods. Sources go through {@link JinjaSource#adapt} first.
 */
final class Jinja {
    private static final Jinjava ENGINE = newEngine();
    private static final String RAISED = "template raised: ";
    private static final Pattern BLOCK = Pattern.compile("(\\{\\{|\\{%)(.*?)(\\}\\}|%\\})", Pattern.DOTALL);
    private static final Pattern STRING_LITERAL = Pattern.compile("'(?:[^'\\\\]|\\\\.)*'|\"(?:[^\"\\\\]|\\\\.)*\"");
    private static final Pattern FILTER_NAME = Pattern.compile("\\|\\s*([A-Za-z_]\\w*)");
    private static final Pattern TEST_NAME = Pattern.compile("\\bis\\s+(?:not\\s+)?([A-Za-z_]\\w*)");
    /**
     * Jinja2 sees transformers' functions as globals, so {@code strftime_now is defined} holds; jinjava's functions
     * are not variables. These markers make the test pass; calls still reach the registered functions.
     */
    static final Map<String, Object> GLOBALS = Map.of("strftime_now", true, "raise_exception", true);

    private Jinja() {}

    /**
     * jinjava renders an unknown filter as an empty string without any error, where Jinja2 refuses the template;
     * refuse it here too. Tests ({@code x is foo}) are checked the same way.
     */
    static void requireKnownFiltersAndTests(String source) {
        Matcher block = BLOCK.matcher(source);
        while (block.find()) {
            String body = withoutStrings(block.group(2));
            Matcher filter = FILTER_NAME.matcher(body);
            while (filter.find()) {
                if (ENGINE.getGlobalContext().getFilter(filter.group(1)) == null) {
                    throw new TemplateException("the template uses the filter '" + filter.group(1) + "', which jinjava does not have");
                }
            }
            Matcher test = TEST_NAME.matcher(body);
            while (test.find()) {
                if (ENGINE.getGlobalContext().getExpTest(test.group(1)) == null) {
                    throw new TemplateException("the template uses the test 'is " + test.group(1) + "', which jinjava does not have");
                }
            }
        }
    }

    /** The expression with every string literal emptied, so a '|' or 'is' inside quotes is not mistaken. */
    private static String withoutStrings(String expression) {
        return STRING_LITERAL.matcher(expression).replaceAll("''");
    }

    /** A template parsed once; jinjava would otherwise parse the whole source again for every render. */
    static final class Compiled {
        private final Node tree;

        private Compiled(Node tree) {
            this.tree = tree;
        }
    }

    /** Parses the adapted source, failing now (not at the first dataset row) on a syntax error. */
    static Compiled compile(String adaptedSource) {
        JinjavaInterpreter interpreter = ENGINE.newInterpreter();
        JinjavaInterpreter.pushCurrent(interpreter);
        try {
            Node tree = interpreter.parse(adaptedSource);
            failOnErrors(interpreter.getErrorsCopy());
            return new Compiled(tree);
        } finally {
            JinjavaInterpreter.popCurrent();
        }
    }

    static final long MAX_OUTPUT_CHARS = 4L << 20;
    /** Wall time one render may take: a few milliseconds is normal; nested loops can ask for hours. */
    static final long RENDER_SECONDS = 20;
    private static java.util.concurrent.ExecutorService renderer = newRenderer();

    private static java.util.concurrent.ExecutorService newRenderer() {
        return java.util.concurrent.Executors.newSingleThreadExecutor(task -> {
            Thread thread = new Thread(task, "chat-template");
            thread.setDaemon(true); // a runaway render must not keep the process alive after its error
            return thread;
        });
    }

    /** {@link #renderUnbounded} on a worker thread, given up on after {@link #RENDER_SECONDS}. */
    static synchronized String render(Compiled template, Map<String, Object> variables) {
        java.util.concurrent.Future<String> result = renderer.submit(() -> renderUnbounded(template, variables));
        try {
            return result.get(RENDER_SECONDS, java.util.concurrent.TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            result.cancel(true);
            renderer.shutdownNow();
            renderer = newRenderer();
            throw new TemplateException("the chat template did not finish within " + RENDER_SECONDS
                    + " s for one row (loops nested too deep?)");
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof RuntimeException runtime) {
                throw runtime;
            }
            if (e.getCause() instanceof OutOfMemoryError) {
                throw new TemplateException("the chat template built more text than memory holds (a string that "
                        + "doubles in a loop?)");
            }
            throw new TemplateException("template error: " + e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new TemplateException("interrupted while rendering the chat template");
        }
    }

    /** What {@code Jinjava.renderForResult} does, minus the parse: a fresh context over a copy of the globals. */
    private static String renderUnbounded(Compiled template, Map<String, Object> variables) {
        Context context = new Context(ENGINE.getGlobalContextCopy(), variables);
        JinjavaInterpreter interpreter = new JinjavaInterpreter(ENGINE, context, ENGINE.getGlobalConfig());
        JinjavaInterpreter.pushCurrent(interpreter);
        String output;
        try {
            output = interpreter.render(template.tree);
        } catch (TemplateException e) {
            throw e;
        } catch (RuntimeException e) {
            throw new TemplateException("template error: " + String.valueOf(e.getMessage()).replaceAll("\\b[A-Za-z]*Exception: ", ""));
        } finally {
            JinjavaInterpreter.popCurrent();
            context.reset();
        }
        failOnErrors(interpreter.getErrorsCopy());
        return output;
    }

    private static void failOnErrors(List<TemplateError> errors) {
        for (TemplateError error : errors) {
            if (error.getSeverity() == TemplateError.ErrorType.FATAL
                    || error.getReason() == TemplateError.ErrorReason.SYNTAX_ERROR
                    || error.getReason() == TemplateError.ErrorReason.EXCEPTION) {
                String line = error.getLineno() > 0 ? " (template line " + error.getLineno() + ")" : "";
                throw new TemplateException(raisedMessage(error) + line);
            }
        }
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
                case 'b' -> now.getMonth().getDisplayName(TextStyle.SHORT, Locale.ENGLISH);
                case 'B' -> now.getMonth().getDisplayName(TextStyle.FULL, Locale.ENGLISH);
                case 'a' -> now.getDayOfWeek().getDisplayName(TextStyle.SHORT, Locale.ENGLISH);
                case 'A' -> now.getDayOfWeek().getDisplayName(TextStyle.FULL, Locale.ENGLISH);
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
        // the engine's exception class names say nothing to someone fixing a template
        return "template error: " + String.valueOf(error.getMessage()).replaceAll("\\b[A-Za-z]*Exception: ", "");
    }

    private static Jinjava newEngine() {
        // Without the trimming override jinjava ignores {{- and -}} on expressions, which real templates rely on;
        // the pyish mapper prints dicts and lists the way Python does.
        LegacyOverrides jinja2Whitespace = LegacyOverrides.newBuilder().withUseTrimmingForNotesAndExpressions(true)
                .withUsePyishObjectMapper(true).build();
        CompositeELResolver resolver = new CompositeELResolver();
        resolver.add(new PythonStrings());
        resolver.add(JinjavaInterpreterResolver.DEFAULT_RESOLVER_READ_WRITE);
        // Templates come with shared models and recipes: bound what one render may build (real chat templates
        // render a few kilobytes from a few loops).
        Jinjava engine = new Jinjava(JinjavaConfig.newBuilder().withTrimBlocks(true).withLstripBlocks(true)
                .withLegacyOverrides(jinja2Whitespace).withElResolver(resolver)
                .withMaxOutputSize(MAX_OUTPUT_CHARS).withMaxStringLength(MAX_OUTPUT_CHARS).withMaxListSize(100_000)
                .withMaxMapSize(100_000).withRangeLimit(10_000).withMaxRenderDepth(20).withMaxMacroRecursionDepth(50)
                .build());
        engine.registerTag(new GenerationTag());
        engine.registerFilter(new PythonJson());
        engine.registerFunction(new ELFunctionDefinition("", "raise_exception", Jinja.class, "raiseException", String.class));
        engine.registerFunction(new ELFunctionDefinition("", "strftime_now", Jinja.class, "strftimeNow", String.class));
        return engine;
    }
}
