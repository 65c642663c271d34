package dev.finetune.recipes;

import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

/**
 * A closed set of recipe values is listed once, in its enum (the section readers take the enum's values); the doc
 * line recipe-keys.tsv shows for the key must name every one of them, so the two cannot drift apart unnoticed.
 */
class ChoiceDocsTest {

    static Map<String, List<String>> choices() {
        Map<String, List<String>> keys = new LinkedHashMap<>();
        keys.put("excess_length_strategy", KeyReader.spellings(Recipe.ExcessLength.class));
        keys.put("backend", KeyReader.spellings(Recipe.Backend.class));
        keys.put("save_strategy", KeyReader.spellings(SaveStrategy.class));
        keys.put("eval_strategy", KeyReader.spellings(EvalStrategy.class));
        keys.put("datasets[].train_on_eos", KeyReader.spellings(TrainOnEos.class));
        keys.put("datasets[].ds_type", KeyReader.spellings(DataFormat.class));
        keys.put("lr_scheduler", Arrays.stream(LrScheduler.values()).map(LrScheduler::key).toList());
        keys.put("optimizer", Arrays.stream(Optimizer.values()).map(Optimizer::axolotlName).toList());
        keys.put("dpo_loss_type", DpoLossType.keys());
        keys.put("trl.loss_type", GrpoLossType.keys());
        keys.put("trl.scale_rewards", ScaleRewards.keys());
        keys.put("adapter", AdapterType.keys());
        keys.put("rl", Arrays.stream(RlType.values()).filter(RlType::trained).map(RlType::key).toList());
        return keys;
    }

    @Test
    void everyAllowedValueIsNamedInTheKeyTable() {
        choices().forEach((key, values) -> {
            RecipeKeys.Key spec = RecipeKeys.get(key);
            assertNotNull(spec, key + " is not in recipe-keys.tsv");
            for (String value : values) {
                Pattern word = Pattern.compile("(?<![A-Za-z0-9_])" + Pattern.quote(value) + "(?![A-Za-z0-9_])");
                assertTrue(word.matcher(spec.note()).find(),
                        key + " accepts '" + value + "', which its recipe-keys.tsv line does not name: " + spec.note());
            }
        });
    }
}
