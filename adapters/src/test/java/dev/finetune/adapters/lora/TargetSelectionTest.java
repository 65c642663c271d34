package dev.finetune.adapters.lora;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.types.DataType;
import ai.djl.ndarray.types.Shape;
import dev.finetune.adapters.PlainProjection;
import dev.finetune.adapters.Projection;
import dev.finetune.adapters.peft.AdapterConfig;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.UserError;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class TargetSelectionTest {
    private static final List<String> PROJECTIONS =
            List.of("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj");

    /** Builds a two-layer Llama's linear layers (plus the head) and returns the factory that saw them. */
    private static LoraFactory build(NDManager manager, List<String> targets, boolean allLinear,
            List<String> builtOut) {
        LoraFactory factory = new LoraFactory(new AdapterSpec.Lora(2, 4, 0, targets, allLinear, false, null),
                manager, 1);
        List<String> names = new ArrayList<>();
        for (int layer = 0; layer < 2; layer++) {
            for (String projection : PROJECTIONS) {
                names.add("model.layers." + layer + "." + projection);
            }
        }
        names.add("lm_head");
        for (String name : names) {
            Projection projection = factory.create(name, manager.ones(new Shape(4, 4), DataType.FLOAT32), null);
            if (projection instanceof LoraProjection) {
                builtOut.add(name);
            } else {
                assertInstanceOf(PlainProjection.class, projection);
            }
        }
        return factory;
    }

    @Test
    void shortModuleNamesMatchEveryLayer() {
        try (NDManager manager = NDManager.newBaseManager()) {
            List<String> adapted = new ArrayList<>();
            LoraFactory factory = build(manager, List.of("q_proj", "v_proj"), false, adapted);
            assertEquals(List.of("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                    "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"), factory.requireMatches());
            assertEquals(factory.requireMatches(), adapted);
            assertEquals(new AdapterConfig.Targets.Names(List.of("q_proj", "v_proj")), factory.peftTargets());
        }
    }

    @Test
    void regexesMatchTheFullLayerName() {
        try (NDManager manager = NDManager.newBaseManager()) {
            List<String> adapted = new ArrayList<>();
            LoraFactory factory = build(manager, List.of("model\\.layers\\.0\\..*_proj"), false, adapted);
            assertEquals(7, adapted.size());
            assertTrue(adapted.stream().allMatch(n -> n.startsWith("model.layers.0.")));
            // Short names would also select layer 1 in PEFT, so the config carries an exact regex instead.
            AdapterConfig.Targets targets = factory.peftTargets();
            Pattern exact = Pattern.compile(((AdapterConfig.Targets.Regex) targets).pattern());
            assertTrue(adapted.stream().allMatch(n -> exact.matcher(n).matches()));
            assertTrue(!exact.matcher("model.layers.1.self_attn.q_proj").matches());
            assertTrue(!exact.matcher("model.layers.0.self_attn.q_projX").matches());

            List<String> qv = new ArrayList<>();
            build(manager, List.of(".*\\.(q|v)_proj"), false, qv);
            assertEquals(4, qv.size());
        }
    }

    @Test
    void allLinearSkipsTheHead() {
        try (NDManager manager = NDManager.newBaseManager()) {
            List<String> adapted = new ArrayList<>();
            LoraFactory factory = build(manager, List.of(), true, adapted);
            assertEquals(14, adapted.size());
            assertTrue(!adapted.contains("lm_head"));
            assertEquals(new AdapterConfig.Targets.Names(
                    List.of("down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj")),
                    factory.peftTargets());
        }
    }

    @Test
    void zeroMatchesNameTheKeyAndTheAvailableModules() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LoraFactory factory = build(manager, List.of("query_key_value"), false, new ArrayList<>());
            UserError error = assertThrows(UserError.class, factory::requireMatches);
            assertEquals("lora_target_modules", error.where());
            String line = error.oneLine();
            assertTrue(line.contains("query_key_value"), line);
            for (String name : List.of("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                    "lm_head")) {
                assertTrue(line.contains(name), line);
            }
        }
    }

    /** The plan's check, on the names the model really built: one misspelt entry fails, even when another matched. */
    @Test
    void anEntryThatMatchesNoBuiltLayerFailsWithDidYouMean() {
        try (NDManager manager = NDManager.newBaseManager()) {
            List<String> adapted = new ArrayList<>();
            LoraFactory factory = build(manager, List.of("q_prj", "v_proj"), false, adapted);
            assertEquals(2, adapted.size());
            UserError error = assertThrows(UserError.class, factory::requireMatches);
            assertEquals("lora_target_modules", error.where());
            String line = error.oneLine();
            assertTrue(line.contains("entry 'q_prj' matches no linear layer"), line);
            assertTrue(line.contains("did you mean 'q_proj'?"), line);
        }
    }

    @Test
    void allLinearOnAHeadOnlyModelBlamesLoraTargetLinear() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LoraFactory factory = new LoraFactory(new AdapterSpec.Lora(2, 4, 0, List.of(), true, false, null),
                    manager, 1);
            factory.create("lm_head", manager.ones(new Shape(4, 4)), null);
            assertEquals("lora_target_linear", assertThrows(UserError.class, factory::requireMatches).where());
        }
    }

    @Test
    void anInvalidRegexIsAUserError() {
        try (NDManager manager = NDManager.newBaseManager()) {
            UserError error = assertThrows(UserError.class, () -> new LoraFactory(
                    new AdapterSpec.Lora(2, 4, 0, List.of("q_proj("), false, false, null), manager, 1));
            assertEquals("lora_target_modules", error.where());
            assertTrue(error.getMessage().contains("q_proj("));
        }
    }
}
