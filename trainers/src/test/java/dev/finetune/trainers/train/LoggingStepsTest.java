package dev.finetune.trainers.train;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDManager;
import com.google.gson.JsonObject;
import dev.finetune.recipes.LrScheduler;
import dev.finetune.trainers.train.output.MetricsLog;
import dev.finetune.trainers.train.output.Progress;
import dev.finetune.trainers.train.output.TrainResults;
import dev.finetune.trainers.train.sft.SftBatch;
import dev.finetune.trainers.train.sft.SftObjective;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.core.LogEvent;
import org.apache.logging.log4j.core.LoggerContext;
import org.apache.logging.log4j.core.appender.AbstractAppender;
import org.apache.logging.log4j.core.config.Configurator;
import org.apache.logging.log4j.core.config.Property;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code logging_steps} and TRL's {@code num_tokens} in {@code metrics.jsonl}, the HF run summary beside it, and
 * the console's progress lines following the same steps.
 */
class LoggingStepsTest {

    @Test
    void everyThirdStepIsLoggedAsTheMeanOfItsStepsThenTheSummary(@TempDir Path dir) throws Exception {
        List<SftBatch> data = ToyData.batches(4, 2, 6, 11, 3);
        List<Map<String, Object>> steps = new ArrayList<>();
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.0, true, 5);
            TestRuns options = TestRuns.in(dir).maxSteps(7).learningRate(0.05)
                    .scheduler(LrScheduler.CONSTANT).logEvery(3);
            new Trainer<>(model, new SftObjective(), data, List.of(), options.build(data.size()), manager, new Trainer.Listener() {
                @Override
                public void afterStep(long step, Map<String, Object> metrics) {
                    steps.add(metrics);
                }
            }).run();
        }
        List<JsonObject> lines = MetricsLog.read(dir.resolve(MetricsLog.FILE));
        assertEquals(List.of(3L, 6L, 7L), lines.stream().map(l -> l.get("step").getAsLong()).toList(),
                "steps 3 and 6, and the last step");
        double firstThree = (loss(steps.get(0)) + loss(steps.get(1)) + loss(steps.get(2))) / 3;
        assertEquals(firstThree, lines.get(0).get("loss").getAsDouble(), 1e-12, "the interval's mean loss");
        assertEquals((double) steps.get(2).get("learning_rate"), lines.get(0).get("learning_rate").getAsDouble());
        assertEquals((double) steps.get(2).get("grad_norm"), lines.get(0).get("grad_norm").getAsDouble(),
                "the last step's gradient norm, as HF logs it");
        long tokens = 0;
        DataOrder order = new DataOrder(data.size(), 42);
        for (int i = 0; i < 7; i++) {
            tokens += data.get(order.at(i)).tokenCount();
        }
        assertEquals(tokens, lines.get(2).get("num_tokens").getAsLong(), "every real token of the 7 steps");
        JsonObject summary = com.google.gson.JsonParser.parseString(java.nio.file.Files.readString(
                dir.resolve(TrainResults.FILE))).getAsJsonObject();
        double meanLoss = steps.stream().mapToDouble(LoggingStepsTest::loss).average().orElseThrow();
        assertEquals(meanLoss, summary.get("train_loss").getAsDouble(), 1e-12);
        double runtime = summary.get("train_runtime").getAsDouble();
        assertTrue(runtime > 0);
        assertEquals(7 / runtime, summary.get("train_steps_per_second").getAsDouble(), 1e-9 * 7 / runtime);
        assertEquals(7 * 2 / runtime, summary.get("train_samples_per_second").getAsDouble(), 1e-9 * 14 / runtime,
                "two rows per micro batch");
        assertTrue(summary.get("total_flos").getAsDouble() > 6.0 * tokens, "6 x tokens x parameters");
        for (Map<String, Object> step : steps) {
            double accuracy = (double) step.get("mean_token_accuracy");
            assertTrue(accuracy >= 0 && accuracy <= 1, "TRL's mean_token_accuracy: " + accuracy);
            assertTrue((double) step.get("entropy") > 0 && (double) step.get("entropy") <= Math.log(11) + 1e-6,
                    "the entropy of a distribution over 11 tokens: " + step.get("entropy"));
        }
    }

    /** The console lines (no terminal under the test: log lines) follow logging_steps as metrics.jsonl does. */
    @Test
    void progressLinesAreTheLoggedStepsOnly(@TempDir Path dir) throws Exception {
        List<SftBatch> data = ToyData.batches(4, 2, 6, 11, 3);
        List<String> printed = new CopyOnWriteArrayList<>();
        String name = Progress.class.getName();
        LoggerContext context = (LoggerContext) LogManager.getContext(false);
        Level before = context.getConfiguration().getLoggerConfig(name).getLevel();
        AbstractAppender appender = new AbstractAppender("progress-lines", null, null, true, Property.EMPTY_ARRAY) {
            @Override
            public void append(LogEvent event) {
                printed.add(event.getMessage().getFormattedMessage());
            }
        };
        appender.start();
        Configurator.setLevel(name, Level.INFO);
        org.apache.logging.log4j.core.Logger logger = context.getLogger(name);
        logger.addAppender(appender);
        try (NDManager manager = NDManager.newBaseManager()) {
            ToyModel model = new ToyModel(manager, 11, 8, 2, 0.0, true, 5);
            TestRuns options = TestRuns.in(dir).maxSteps(7).learningRate(0.05)
                    .scheduler(LrScheduler.CONSTANT).logEvery(3);
            new Trainer<>(model, new SftObjective(), data, List.of(), options.build(data.size()), manager,
                    new Trainer.Listener() {}).run();
        } finally {
            logger.removeAppender(appender);
            Configurator.setLevel(name, before);
        }
        List<String> steps = printed.stream().filter(l -> l.startsWith("step ")).toList();
        assertEquals(List.of("step 3/7", "step 6/7", "step 7/7"),
                steps.stream().map(l -> l.substring(0, l.indexOf("  "))).toList(), String.join("\n", printed));
        List<JsonObject> lines = MetricsLog.read(dir.resolve(MetricsLog.FILE));
        for (int i = 0; i < lines.size(); i++) {
            String loss = String.format(java.util.Locale.ROOT, "loss %.4f", lines.get(i).get("loss").getAsDouble());
            assertTrue(steps.get(i).contains(loss), "the interval's mean loss, as metrics.jsonl has it: "
                    + steps.get(i) + " vs " + loss);
        }
    }

    private static double loss(Map<String, Object> line) {
        return (double) line.get("loss");
    }
}
