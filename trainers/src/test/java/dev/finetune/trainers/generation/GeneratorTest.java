package dev.finetune.trainers.generation;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDManager;
import dev.finetune.trainers.model.LlamaModel;
import dev.finetune.trainers.model.LoadOptions;
import dev.finetune.trainers.model.Stories260KReference;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

class GeneratorTest {
    static NDManager manager;
    static LlamaModel model;
    static Generator generator;
    static List<Stories260KReference> references;

    @BeforeAll
    static void load() {
        manager = NDManager.newBaseManager();
        model = LlamaModel.load(Stories260KReference.modelDir(), manager, LoadOptions.inference());
        generator = new Generator(model);
        references = Stories260KReference.load();
    }

    @AfterAll
    static void close() {
        manager.close();
    }

    @Test
    void greedyTokensMatchLlama2cForEachPromptAlone() {
        for (Stories260KReference ref : references) {
            Completion c = generator.generate(List.of(ref.promptIds()), GenerationSettings.greedy(32)).get(0);
            assertArrayEquals(ref.generatedIds(), c.tokens());
            assertEquals(Completion.Stop.MAX_NEW_TOKENS, c.stop());
            assertTrue(Stories260KReference.maxAbsDiff(ref.lastLogits(), c.lastPromptLogits()) < 1e-4f);
        }
    }

    /** Left padding must not change any row: pads sit in their own segment and positions start at each row's first token. */
    @Test
    void batchedPromptsOfDifferentLengthsMatchTheReferenceRowByRow() {
        List<long[]> prompts = new ArrayList<>();
        references.forEach(r -> prompts.add(r.promptIds()));
        List<Completion> out = generator.generate(prompts, GenerationSettings.greedy(32));
        for (int i = 0; i < references.size(); i++) {
            assertArrayEquals(references.get(i).generatedIds(), out.get(i).tokens(), "row " + i);
            float diff = Stories260KReference.maxAbsDiff(references.get(i).lastLogits(), out.get(i).lastPromptLogits());
            assertTrue(diff < 1e-4f, "row " + i + " last logits differ by " + diff);
        }
    }

    @Test
    void cachedAndRecomputedGenerationAgreeGreedyAndSampled() {
        List<long[]> prompts = List.of(references.get(0).promptIds(), references.get(1).promptIds());
        GenerationSettings greedy = GenerationSettings.greedy(24);
        List<Completion> cached = generator.generate(prompts, greedy);
        List<Completion> full = generator.generateWithoutCache(prompts, greedy);
        for (int i = 0; i < prompts.size(); i++) {
            assertArrayEquals(full.get(i).tokens(), cached.get(i).tokens());
        }
        GenerationSettings sampled = new GenerationSettings(24, 0.9f, 40, 0.9f, 7L, Set.of(), List.of());
        List<Completion> a = generator.generate(prompts, sampled);
        List<Completion> b = generator.generateWithoutCache(prompts, sampled);
        for (int i = 0; i < prompts.size(); i++) {
            assertArrayEquals(b.get(i).tokens(), a.get(i).tokens());
        }
    }

    /** GRPO-style groups: a prompt shared by several rows runs once, and every row still gets its own draws. */
    @Test
    void sharedPromptsGiveTheSameResultAsSeparatePrompts() {
        long[] a = references.get(0).promptIds();
        long[] b = references.get(1).promptIds();
        List<long[]> grouped = List.of(a, b, a, b, a);
        List<Completion> greedy = generator.generate(grouped, GenerationSettings.greedy(32));
        for (int r = 0; r < grouped.size(); r++) {
            Stories260KReference ref = references.get(r % 2);
            assertArrayEquals(ref.generatedIds(), greedy.get(r).tokens(), "row " + r);
            assertTrue(Stories260KReference.maxAbsDiff(ref.lastLogits(), greedy.get(r).lastPromptLogits()) < 1e-4f, "row " + r);
        }
        GenerationSettings sampled = new GenerationSettings(16, 1.0f, 0, 1f, 21L, Set.of(), List.of());
        List<Completion> shared = generator.generate(grouped, sampled);
        List<Completion> recomputed = generator.generateWithoutCache(grouped, sampled);
        for (int r = 0; r < grouped.size(); r++) {
            assertArrayEquals(recomputed.get(r).tokens(), shared.get(r).tokens(), "row " + r);
        }
        assertNotEquals(List.of(shared.get(0).tokens()), List.of(shared.get(2).tokens()), "rows sharing a prompt must sample independently");
    }

    @Test
    void samplingIsReproducibleBySeedAndDiffersAcrossSeeds() {
        long[] prompt = references.get(0).promptIds();
        GenerationSettings s1 = new GenerationSettings(32, 1.0f, 0, 1f, 1L, Set.of(), List.of());
        GenerationSettings s2 = new GenerationSettings(32, 1.0f, 0, 1f, 2L, Set.of(), List.of());
        long[] first = generator.generate(List.of(prompt), s1).get(0).tokens();
        assertArrayEquals(first, generator.generate(List.of(prompt), s1).get(0).tokens());
        assertNotEquals(List.of(first), List.of(generator.generate(List.of(prompt), s2).get(0).tokens()));
        // With top_k = 1 sampling must reduce to greedy.
        GenerationSettings topOne = new GenerationSettings(32, 1.0f, 1, 1f, 3L, Set.of(), List.of());
        assertArrayEquals(references.get(0).generatedIds(), generator.generate(List.of(prompt), topOne).get(0).tokens());
        // So must a tiny top_p: only the most likely token survives.
        GenerationSettings tinyP = new GenerationSettings(32, 1.0f, 0, 1e-6f, 4L, Set.of(), List.of());
        assertArrayEquals(references.get(0).generatedIds(), generator.generate(List.of(prompt), tinyP).get(0).tokens());
    }

    @Test
    void rowsStopOnEosOrStopSequenceWhileOthersContinue() {
        Stories260KReference ref = references.get(0);
        long[] expected = ref.generatedIds();
        long eos = expected[5];
        long[] stopSequence = {expected[2], expected[3]};
        GenerationSettings eosStop = GenerationSettings.greedy(32).withStops(Set.of(eos), List.of());
        List<Completion> out = generator.generate(List.of(ref.promptIds(), references.get(1).promptIds()), eosStop);
        assertArrayEquals(java.util.Arrays.copyOf(expected, 6), out.get(0).tokens());
        assertEquals(Completion.Stop.EOS, out.get(0).stop());
        GenerationSettings seqStop = GenerationSettings.greedy(32).withStops(Set.of(), List.<long[]>of(stopSequence));
        Completion c = generator.generate(List.of(ref.promptIds()), seqStop).get(0);
        assertArrayEquals(java.util.Arrays.copyOf(expected, 4), c.tokens());
        assertEquals(Completion.Stop.STOP_SEQUENCE, c.stop());
    }

    /** Empirical frequencies over 4000 draws against the softmax the reference logits imply (5 sigma bounds). */
    @Test
    void sampledTokensFollowTheFilteredDistribution() {
        // The second prompt's next token is genuinely uncertain (top probability 0.23 at temperature 0.7).
        float[] logits = references.get(1).lastLogits();
        int draws = 4000;
        Sampler sampler = new Sampler(model.scalars());
        // the two likeliest tokens, already in the row, are what the repetition penalty holds back
        Integer[] byLogit = new Integer[logits.length];
        for (int i = 0; i < byLogit.length; i++) {
            byLogit[i] = i;
        }
        java.util.Arrays.sort(byLogit, (x, y) -> Float.compare(logits[y], logits[x]));
        long[] seen = {byLogit[0], byLogit[1]};
        for (int[] filter : new int[][] {{0, 100, 0, 100}, {3, 100, 0, 100}, {0, 80, 0, 100}, {0, 100, 30, 100},
            {0, 100, 0, 150}}) {
            int topK = filter[0];
            float topP = filter[1] / 100f;
            float minP = filter[2] / 100f;
            float penalty = filter[3] / 100f;
            GenerationSettings settings = new GenerationSettings(1, 0.7f, topK, topP, 11L, Set.of(), List.of(), minP,
                    penalty);
            int[] counts = new int[logits.length];
            try (NDManager step = manager.newSubManager()) {
                NDArray batch = step.create(logits).expandDims(0).repeat(0, draws);
                for (long id : sampler.choose(batch, settings, new java.util.SplittableRandom(5),
                        java.util.Collections.nCopies(draws, seen))) {
                    counts[(int) id]++;
                }
            }
            float[] penalized = logits.clone();
            for (long id : seen) {
                penalized[(int) id] = penalized[(int) id] > 0 ? penalized[(int) id] / penalty
                        : penalized[(int) id] * penalty;
            }
            double[] expected = minP(nucleus(softmax(penalized, 0.7, topK), topP), minP);
            for (int id = 0; id < counts.length; id++) {
                double p = expected[id];
                double sigma = Math.sqrt(draws * p * (1 - p));
                assertTrue(Math.abs(counts[id] - draws * p) <= 5 * sigma + 1e-9,
                        "top_k " + topK + " top_p " + topP + " min_p " + minP + " penalty " + penalty + " token " + id + ": " + counts[id] + " draws, expected " + draws * p);
            }
        }
    }

    /** Keeps the tokens with at least {@code minP} of the likeliest one's probability, then renormalises. */
    private static double[] minP(double[] p, double minP) {
        double top = java.util.Arrays.stream(p).max().orElse(0);
        double[] kept = new double[p.length];
        double sum = 0;
        for (int i = 0; i < p.length; i++) {
            kept[i] = p[i] >= minP * top ? p[i] : 0;
            sum += kept[i];
        }
        for (int i = 0; i < p.length; i++) {
            kept[i] /= sum;
        }
        return kept;
    }

    /** Keeps the most likely tokens while the mass before each is below p, then renormalises. */
    private static double[] nucleus(double[] p, double topP) {
        Integer[] order = new Integer[p.length];
        for (int i = 0; i < p.length; i++) {
            order[i] = i;
        }
        java.util.Arrays.sort(order, (a, b) -> Double.compare(p[b], p[a]));
        double[] kept = new double[p.length];
        double before = 0;
        double sum = 0;
        for (int i : order) {
            if (before >= topP) {
                break;
            }
            kept[i] = p[i];
            before += p[i];
            sum += p[i];
        }
        for (int i = 0; i < kept.length; i++) {
            kept[i] /= sum;
        }
        return kept;
    }

    private static double[] softmax(float[] logits, double temperature, int topK) {
        float[] sorted = logits.clone();
        java.util.Arrays.sort(sorted);
        double kth = topK == 0 ? Double.NEGATIVE_INFINITY : sorted[sorted.length - topK];
        double max = sorted[sorted.length - 1];
        double[] p = new double[logits.length];
        double sum = 0;
        for (int i = 0; i < logits.length; i++) {
            p[i] = logits[i] < kth ? 0 : Math.exp((logits[i] - max) / temperature);
            sum += p[i];
        }
        for (int i = 0; i < p.length; i++) {
            p[i] /= sum;
        }
        return p;
    }
}
