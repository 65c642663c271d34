package dev.finetune.trainers.train;

import ai.djl.engine.Engine;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.jni.JniUtils;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.recipes.Resume;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * A training process for {@link KillDrillTest} to kill: trains {@link ToyModel} with the real loop and
 * checkpoints, and reports progress on stdout for the parent to time its kill.
 *
 * <p>Arguments: {@code outputDir sequenceLen stepDelayMs stallBeforePublishingStep [toy|stories260K] [sft|dpo|grpo]}.
 * {@code sequenceLen} is a resume-invariant recipe value (change it to test the refusal); a positive stall step
 * makes the process hang with that checkpoint written but not yet published; the last argument picks the model
 * (default the toy, which has dropout; stories260K is the real Llama code, fully fine-tuned) and the last the
 * objective: DPO and GRPO train LoRA on stories260K with the adapter-off reference (GRPO also samples rollouts).
 */
public final class KillDrillMain {
    static final int VOCAB = 17;
    static final int LLAMA_VOCAB = 512;
    static final int MAX_STEPS = 12;
    static final int SAVE_STEPS = 3;
    static final int ACCUMULATION = 2;

    private KillDrillMain() {}

    static TrainableModel<?> model(NDManager manager, boolean llama) {
        if (llama) {
            return new LlamaTrainable(LlamaModel.load(Stories260KReference.modelDir(), manager,
                    LoadOptions.fullFineTune()));
        }
        return new ToyModel(manager, VOCAB, 16, 3, 0.1, true, 11);
    }

    static List<SftBatch> data(int sequenceLen, boolean llama) {
        return ToyData.batches(5, 3, sequenceLen, llama ? LLAMA_VOCAB : VOCAB, 21);
    }

    public static void main(String[] args) throws InterruptedException {
        Path outputDir = Path.of(args[0]);
        int sequenceLen = Integer.parseInt(args[1]);
        long stepDelayMs = Long.parseLong(args[2]);
        long stallStep = Long.parseLong(args[3]);
        boolean llama = args.length > 4 && args[4].equals("stories260K");
        String objective = args.length > 5 ? args[5] : "sft";
        Engine.getInstance();
        JniUtils.setNumThreads(1);
        JniUtils.setNumInteropThreads(1);
        TestRuns options = TestRuns.in(outputDir)
                .accumulation(ACCUMULATION).maxSteps(MAX_STEPS).learningRate(3e-2)
                .scheduler(LrScheduler.COSINE).warmupSteps(2).weightDecay(0.01).maxGradNorm(1.0)
                .checkpointing(true).evalEvery(4).saveEvery(SAVE_STEPS).saveTotalLimit(2)
                .resume(new Resume.Newest()).seed(7)
                .invariants(Map.of("base_model", "toy", "sequence_len", Integer.toString(sequenceLen)))
                ;
        Trainer.Listener reporter = new Trainer.Listener() {
            @Override
            public void afterStep(long step, Map<String, Object> metrics) {
                System.out.println("STEP " + step);
                System.out.flush();
                sleep(stepDelayMs);
            }

            @Override
            public void beforeCheckpointPublished(Path temporaryFolder) {
                if (temporaryFolder.getFileName().toString().startsWith(".tmp-checkpoint-" + stallStep + "-")) {
                    System.out.println("STALLED " + temporaryFolder);
                    System.out.flush();
                    sleep(Long.MAX_VALUE);
                }
            }
        };
        try (NDManager manager = NDManager.newBaseManager()) {
            Trainer.Summary summary;
            if (objective.equals("sft")) {
                List<SftBatch> all = data(sequenceLen, llama);
                summary = new Trainer<>(model(manager, llama), new SftObjective(), all.subList(0, 4),
                        all.subList(4, 5), options.build(4), manager, reporter).run();
            } else {
                summary = RlDrill.run(objective, options.learningRate(1e-2), manager, reporter);
            }
            System.out.println("DONE " + summary.steps());
        } catch (UserError e) {
            System.err.println(e.oneLine());
            System.exit(2);
        }
    }

    private static void sleep(long millis) {
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
