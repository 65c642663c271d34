package dev.finetune.trainers.data;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.Recipe;
import dev.finetune.recipes.ValidatedRecipe;
import dev.finetune.trainers.text.Tokenizer;
import dev.finetune.trainers.train.DataOrder;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.stream.IntStream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * One test per key that decides which examples are trained and in what order: each recipe is read as a user writes
 * it, its rows tokenized by the trainer's data code, and the effect shown on the examples kept, the held-out ones and
 * the order the trainer visits them in.
 */
class DataSelectionKeysTest {
    static Tokenizer tokenizer;

    @TempDir
    Path dir;

    @BeforeAll
    static void load() {
        tokenizer = Tokenizer.load(DataPipelineTest.STORIES);
    }

    @AfterAll
    static void close() {
        tokenizer.close();
    }

    static final List<String> TEN = IntStream.range(0, 10).mapToObj(i -> "Story number " + i + " is here.").toList();

    /** The recipe with {@code keys}, over one completion dataset per list of texts. */
    Recipe recipe(String keys, List<List<String>> datasets) throws IOException {
        StringBuilder yaml = new StringBuilder("base_model: " + DataPipelineTest.STORIES.toAbsolutePath().normalize()
                + "\nlearning_rate: 1e-3\nmicro_batch_size: 1\ngradient_accumulation_steps: 1\nsequence_len: 64\nseed: 7\n"
                + keys + "\ndatasets:\n");
        for (int d = 0; d < datasets.size(); d++) {
            List<String> lines = datasets.get(d).stream().map(t -> "{\"text\": \"" + t + "\"}").toList();
            Files.write(dir.resolve("d" + d + ".jsonl"), lines);
            yaml.append("  - path: d").append(d).append(".jsonl\n    type: completion\n");
        }
        Path file = dir.resolve("recipe.yaml");
        Files.writeString(file, yaml.toString());
        return ValidatedRecipe.load(file, List.of()).recipe();
    }

    PreparedData prepare(String keys, List<List<String>> datasets) throws IOException {
        Recipe r = recipe(keys, datasets);
        return DataPipeline.prepare(r.data().datasets(), DataOptions.of(r), tokenizer);
    }

    static List<String> texts(List<Example> examples) {
        return examples.stream().map(e -> tokenizer.decode(e.inputIds(), true).strip()).toList();
    }

    @Test
    void minSampleLenDropsShortExamples() throws IOException {
        List<String> rows = List.of("Hi.", "Once upon a time there was a girl.", "Yes.");
        assertEquals(3, prepare("", List.of(rows)).train().size());
        PreparedData longOnly = prepare("min_sample_len: 8", List.of(rows));
        assertEquals(List.of("Once upon a time there was a girl."), texts(longOnly.train()));
        assertTrue(longOnly.report().describe().contains("2 examples shorter than min_sample_len 8 dropped"),
                longOnly.report().describe());
    }

    @Test
    void datasetShardsPartitionTheRows() throws IOException {
        Set<String> union = new HashSet<>();
        List<Integer> sizes = new ArrayList<>();
        for (int shard = 0; shard < 3; shard++) {
            List<String> kept = texts(prepare("dataset_shard_num: 3\ndataset_shard_idx: " + shard, List.of(TEN)).train());
            sizes.add(kept.size());
            for (String text : kept) {
                assertTrue(union.add(text), text + " is in two shards");
            }
        }
        // datasets.Dataset.shard's sizes: the first 10 mod 3 shards take one more
        assertEquals(List.of(4, 3, 3), sizes);
        assertEquals(new HashSet<>(TEN), union);
        assertEquals(10, prepare("", List.of(TEN)).train().size());
    }

    @Test
    void exactDeduplicationDropsRepeatedRows() throws IOException {
        List<String> rows = List.of("A cat sat.", "A dog ran.", "A cat sat.", "A cat sat.");
        assertEquals(4, prepare("", List.of(rows)).train().size());
        PreparedData unique = prepare("dataset_exact_deduplication: true", List.of(rows));
        assertEquals(List.of("A cat sat.", "A dog ran."), texts(unique.train()));
        assertTrue(unique.report().describe().contains("2 rows dropped as exact duplicates"), unique.report().describe());
    }

    @Test
    void unshuffledMergedRowsHoldOutTheLastRows() throws IOException {
        PreparedData shuffled = prepare("val_set_size: 2", List.of(TEN));
        PreparedData kept = prepare("val_set_size: 2\nshuffle_merged_datasets: false", List.of(TEN));
        // Axolotl's train_test_split(shuffle=False): the evaluation rows are the last ones of the merged data
        assertEquals(TEN.subList(8, 10), texts(kept.eval()));
        assertNotEquals(texts(kept.eval()), texts(shuffled.eval()), "a seeded draw otherwise");
    }

    @Test
    void curriculumSamplingVisitsTheRowsInTheirOrder() throws IOException {
        Recipe curriculum = recipe("curriculum_sampling: true", List.of(TEN));
        PreparedData data = DataPipeline.prepare(curriculum.data().datasets(), DataOptions.of(curriculum), tokenizer);
        for (int epoch = 0; epoch < 2; epoch++) {
            List<String> visited = data.trainBatches(epoch, 1).stream()
                    .map(b -> tokenizer.decode(java.util.Arrays.stream(b.inputIds()[0]).mapToInt(v -> (int) v).toArray(), true).strip())
                    .toList();
            assertEquals(TEN, visited);
        }
        DataOrder order = new DataOrder(10, 7, !curriculum.data().selection().curriculum());
        assertEquals(IntStream.range(0, 20).map(p -> p % 10).boxed().toList(),
                IntStream.range(0, 20).map(order::at).boxed().toList(), "every epoch in order");
        Recipe plain = recipe("", List.of(TEN));
        PreparedData shuffled = DataPipeline.prepare(plain.data().datasets(), DataOptions.of(plain), tokenizer);
        assertNotEquals(TEN, shuffled.trainBatches(0, 1).stream()
                .map(b -> tokenizer.decode(java.util.Arrays.stream(b.inputIds()[0]).mapToInt(v -> (int) v).toArray(), true).strip())
                .toList());
    }

    @Test
    void shuffleBeforeMergingShufflesEachDatasetInPlace() throws IOException {
        List<String> first = TEN.subList(0, 5);
        List<String> second = TEN.subList(5, 10);
        String inOrder = "curriculum_sampling: true\nshuffle_merged_datasets: false";
        assertEquals(TEN, texts(prepare(inOrder, List.of(first, second)).train()));
        List<String> each = texts(prepare(inOrder + "\nshuffle_before_merging_datasets: true", List.of(first, second)).train());
        assertEquals(new HashSet<>(first), new HashSet<>(each.subList(0, 5)), "the first dataset's rows stay first");
        assertNotEquals(TEN, each);
    }

    @Test
    void samplePackingSequentiallyFillsEachSequenceInTheRowsOrder() throws IOException {
        // lengths 14, 4, 12, 6 (with BOS and EOS) in sequences of 20, visited in order (curriculum): next fit packs
        // [14, 4] [12, 6]; best fit by length packs [14, 6] [12, 4]
        List<String> rows = List.of("Once upon a time there was a little girl.", "Hi",
                "Once upon a time there was a cat.", "Go.");
        List<Integer> lengths = rows.stream().map(t -> tokenizer.encode(t, true).length + 1).toList();
        List<List<Integer>> inOrder = packedLengths("sample_packing_sequentially: true\ncurriculum_sampling: true", rows);
        List<Integer> first = List.of(lengths.get(0), lengths.get(1));
        List<Integer> second = List.of(lengths.get(2), lengths.get(3));
        assertEquals(List.of(first, second), inOrder, lengths + " packed in order");
        List<List<Integer>> bestFit = packedLengths("", rows);
        assertNotEquals(new HashSet<>(inOrder), new HashSet<>(bestFit), "best fit packs " + bestFit);
    }

    /** The lengths of the examples in each packed sequence (sequence_len 20). */
    List<List<Integer>> packedLengths(String keys, List<String> rows) throws IOException {
        Recipe r = recipe("sample_packing: true\n" + keys, List.of(rows));
        PreparedData data = DataPipeline.prepare(r.data().datasets(), DataOptions.of(r).withSequenceLen(20), tokenizer);
        List<List<Integer>> sequences = new ArrayList<>();
        for (TokenBatch batch : data.trainBatches(0, 1)) {
            List<Integer> lengths = new ArrayList<>();
            long[] segments = batch.segmentIds()[0];
            for (int t = 0; t < segments.length; t++) {
                if (segments[t] > lengths.size()) {
                    lengths.add(0);
                }
                if (segments[t] > 0) {
                    lengths.set((int) segments[t] - 1, lengths.get((int) segments[t] - 1) + 1);
                }
            }
            sequences.add(lengths);
        }
        return sequences;
    }
}
