package dev.finetune.recipes;

/** One problem or warning about a recipe: where, what, and the smallest fix. */
public record Finding(String where, String message, String hint) {

    public String oneLine() {
        return new UserError(where, message, hint).oneLine();
    }

    public UserError toError() {
        return new UserError(where, message, hint);
    }
}
