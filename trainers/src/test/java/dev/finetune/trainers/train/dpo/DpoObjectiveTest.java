package dev.finetune.trainers.train.dpo;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import ai.djl.ndarray.NDScope;
import ai.djl.training.GradientCollector;
import dev.finetune.adapters.NamedArray;
import dev.finetune.adapters.lora.LoraFactory;
import dev.finetune.recipes.AdapterSpec;
import dev.finetune.recipes.DpoLossType;
import dev.finetune.trainers.data.PreferencePair;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.train.ForwardPass;
import dev.finetune.trainers.train.LlamaTrainable;
import dev.finetune.trainers.train.Objective;
import java.util.List;
import org.junit.jupiter.api.Test;

/** DPO on the real stories260K model: the reference is the policy at step 0, with LoRA and with full fine-tuning. */
@SuppressWarnings("try")
class DpoObjectiveTest {
    static final List<PreferencePair> PAIRS = List.of(
            new PreferencePair(new long[] {1, 403, 407}, new long[] {261, 378, 429, 2}, new long[] {300, 2}),
            new PreferencePair(new long[] {1, 301}, new long[] {302, 303}, new long[] {304, 305, 306, 307, 2}));

    private record Step(float loss, java.util.Map<String, Double> metrics) {}

    private static Step step(Objective<DpoBatch> objective, DpoBatch batch, LlamaTrainable model,
            NDManager manager, boolean recompute) {
        try (NDScope scope = new NDScope();
                GradientCollector collector = Engine.getInstance().newGradientCollector()) {
            ForwardPass forward = ForwardPass.of(model, 5, recompute);
            Objective.Loss loss = objective.loss(batch, forward, manager);
            float value = loss.sum().getFloat();
            forward.backward(loss.sum(), collector);
            return new Step(value, loss.metrics());
        }
    }

    @Test
    void withTheAdapterOffTheReferenceIsThePolicyAtStepZero() {
        AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0, List.of(), true, false, null);
        try (NDManager manager = NDManager.newBaseManager()) {
            LoraFactory factory = new LoraFactory(spec, manager, 7);
            LlamaTrainable model = new LlamaTrainable(LlamaModel.load(Stories260KReference.modelDir(), manager,
                    LoadOptions.adapters(factory)));
            DpoBatch batch = DpoBatch.of(PAIRS, 0);
            DpoObjective objective = new DpoObjective(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0), model,
                    factory.adapters());
            for (boolean recompute : new boolean[] {false, true}) {
                Step loss = step(objective, batch, model, manager, recompute);
                assertEquals(2 * Math.log(2), loss.loss(), 1e-6, "summed over two pairs");
                assertEquals(0.0, loss.metrics().get("rewards/margins"));
                assertEquals(0.0, loss.metrics().get("rewards/accuracies"), "ties are not wins, as in TRL");
            }
            // LoRA's B starts at zero, so only B receives a gradient at step 0, and it does
            double bGradient = 0;
            for (NamedArray p : model.trainable()) {
                if (p.name().endsWith("lora_B.weight")) {
                    bGradient += p.array().getGradient().abs().sum().getFloat();
                }
            }
            assertTrue(bGradient > 0, "the DPO loss reaches the adapter");
        }
    }

    @Test
    void fullFineTuningUsesReferenceValuesComputedBeforeTraining() {
        try (NDManager manager = NDManager.newBaseManager()) {
            LlamaTrainable model = new LlamaTrainable(LlamaModel.load(Stories260KReference.modelDir(), manager,
                    LoadOptions.fullFineTune()));
            List<DpoBatch> batches = DpoObjective.precompute(model, null, List.of(DpoBatch.of(PAIRS, 0)),
                    manager);
            float[] reference = batches.get(0).reference();
            assertEquals(4, reference.length);
            for (float value : reference) {
                assertTrue(value < 0 && Float.isFinite(value), "log-probabilities: " + value);
            }
            DpoObjective objective = new DpoObjective(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0), model, null);
            Step loss = step(objective, batches.get(0), model, manager, false);
            assertEquals(2 * Math.log(2), loss.loss(), 1e-5);
            // the stored values are the sequence log-probs the policy computes at step 0
            assertArrayEquals(reference, new float[] {
                loss.metrics().get("logps/chosen").floatValue() * 2 - reference[1], reference[1],
                reference[2], reference[3]}, 1e-4f);
        }
    }

    @Test
    void aContinuedAdapterIsItsOwnReferenceAsInTrlAndTheBaseOnlyWhenNotFrozen() {
        AdapterSpec.Lora spec = new AdapterSpec.Lora(4, 8, 0, List.of(), true, false, null);
        for (boolean frozen : new boolean[] {true, false}) {
            try (NDManager manager = NDManager.newBaseManager()) {
                LoraFactory factory = new LoraFactory(spec, manager, 7);
                LlamaTrainable model = new LlamaTrainable(LlamaModel.load(Stories260KReference.modelDir(), manager,
                        LoadOptions.adapters(factory)));
                // what lora_model_dir loads: an adapter that already moved away from the base (B no longer 0)
                java.util.SplittableRandom random = new java.util.SplittableRandom(3);
                for (NamedArray p : model.trainable()) {
                    float[] values = p.array().toFloatArray();
                    for (int i = 0; i < values.length; i++) {
                        values[i] += (float) (0.05 * (random.nextDouble() * 2 - 1));
                    }
                    p.array().set(values);
                }
                if (frozen) {
                    factory.freezeReference();
                }
                DpoObjective objective = new DpoObjective(new DpoLoss(DpoLossType.SIGMOID, 0.1, 0), model,
                        factory.adapters());
                Step step = step(objective, DpoBatch.of(PAIRS, 0), model, manager, false);
                if (frozen) {
                    assertEquals(2 * Math.log(2), step.loss(), 1e-6, "policy = reference at step 0");
                    assertEquals(0.0, step.metrics().get("rewards/margins"), 1e-9);
                } else {
                    assertTrue(Math.abs(step.metrics().get("rewards/margins")) > 1e-4,
                            "against the base model the loaded adapter already has a margin");
                }
            }
        }
    }
}
