package dev.finetune.trainers.data;

import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.Recipe.ExcessLength;

/** Axolotl's defaults for the data keys (sequence_len 512, no packing, no split, long rows dropped), for tests. */
public final class DataDefaults {
    private DataDefaults() {}

    public static DataOptions options() {
        return new DataOptions(512, false, false, 0, 42, ExcessLength.DROP, false, DataOptions.Templates.NONE,
                DataSelection.DEFAULTS);
    }
}
