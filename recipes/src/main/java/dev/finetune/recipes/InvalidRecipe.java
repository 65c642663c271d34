package dev.finetune.recipes;

import java.util.List;

/** Every error found in one recipe; {@link #oneLine()} is the first, {@link #errors()} holds them all. */
public final class InvalidRecipe extends UserError {
    private final List<Finding> errors;
    private final List<Finding> warnings;

    public InvalidRecipe(List<Finding> errors, List<Finding> warnings) {
        super(errors.get(0).where(), errors.get(0).message(), errors.get(0).hint());
        this.errors = List.copyOf(errors);
        this.warnings = List.copyOf(warnings);
    }

    public List<Finding> errors() {
        return errors;
    }

    public List<Finding> warnings() {
        return warnings;
    }
}
