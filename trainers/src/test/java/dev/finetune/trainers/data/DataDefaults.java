package dev.finetune.trainers.data;

import dev.finetune.recipes.DataSelection;
import dev.finetune.recipes.Recipe.ExcessLength;
import dev.finetune.recipes.RecipeKeys;
import dev.finetune.recipes.TrainOnEos;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;

/** Axolotl's defaults for the data keys (sequence_len 512, no packing, no split, long rows dropped), for tests. */
public final class DataDefaults {
    private DataDefaults() {}

    /**
     * What the recipe reader gives a dataset that leaves {@code field}, {@code roles_to_train} and
     * {@code train_on_eos} out: the key table's defaults, for tests that build a {@code DatasetSpec} directly.
     */
    public static final String FIELD = RecipeKeys.get("datasets[].field").defaultValue();
    public static final List<String> ROLES_TO_TRAIN = Arrays.stream(RecipeKeys.get("datasets[].roles_to_train")
            .defaultValue().replaceAll("[\\[\\]]", "").split(",")).map(String::strip).toList();
    public static final TrainOnEos TRAIN_ON_EOS = TrainOnEos.valueOf(RecipeKeys.get("datasets[].train_on_eos")
            .defaultValue().toUpperCase(Locale.ROOT));

    public static DataOptions options() {
        return new DataOptions(512, false, false, 0, 42, ExcessLength.DROP, false, DataOptions.Templates.NONE,
                DataSelection.DEFAULTS);
    }
}
