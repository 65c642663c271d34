package dev.finetune.trainers.generation;

import dev.finetune.recipes.UserError;

/**
 * The model's logits hold NaN or Inf, so no token can be chosen (argmax would silently pick token 0). Its own type
 * so that a finished run whose weights diverged under {@code stop_on_nonfinite: false} can report the sample as
 * impossible and still end as the user asked, while {@code generate} refuses with exit 2.
 */
public final class NonFiniteLogits extends UserError {
    NonFiniteLogits() {
        super("model", "the model's logits hold NaN or Inf, so no token can be chosen: its weights hold NaN or Inf "
                + "values, or overflow", "check the weights (a run that diverged? see its metrics.jsonl), or generate "
                + "from an earlier checkpoint");
    }
}
