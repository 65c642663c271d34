package dev.finetune.recipes;

/**
 * Bad input from the user: a malformed recipe, a missing file, a broken dataset line, a recipe that cannot fit.
 *
 * <p>The CLI prints {@link #oneLine()} and exits with code 2, never a stack trace. {@code where} names the file
 * and line ({@code recipe.yaml:14:3}) or the key; {@code hint} says how to fix it.
 */
public class UserError extends RuntimeException {
    private final String where;
    private final String hint;

    public UserError(String where, String message, String hint) {
        super(message);
        this.where = where;
        this.hint = hint;
    }

    public UserError(String where, String message, String hint, Throwable cause) {
        super(message, cause);
        this.where = where;
        this.hint = hint;
    }

    public String where() {
        return where;
    }

    public String hint() {
        return hint;
    }

    /** {@code where: message (hint)}, the form every user-facing error takes. */
    public String oneLine() {
        StringBuilder line = new StringBuilder();
        if (where != null && !where.isEmpty()) {
            line.append(where).append(": ");
        }
        line.append(getMessage());
        if (hint != null && !hint.isEmpty()) {
            line.append(" (hint: ").append(hint).append(')');
        }
        return line.toString();
    }
}
