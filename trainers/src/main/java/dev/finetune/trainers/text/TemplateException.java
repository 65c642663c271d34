package dev.finetune.trainers.text;

/**
 * A chat template that cannot be rendered faithfully, or that failed for one conversation (a
 * {@code raise_exception} in the template, a role order it refuses). Callers add where the template or the
 * conversation came from.
 */
public final class TemplateException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    TemplateException(String message) {
        super(message);
    }
}
