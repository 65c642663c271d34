package dev.finetune.cli;

import dev.finetune.recipes.hub.HubEnvironment;
import dev.finetune.recipes.hub.RepoType;
import dev.finetune.trainers.hub.DatasetFiles;
import dev.finetune.trainers.hub.Fetcher;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Random;
import java.util.stream.Stream;

/**
 * Download throughput of one large LFS file from the stand-in hub on 127.0.0.1: finetune's fetcher against
 * huggingface_hub's hf_hub_download (the venv's), each into a fresh cache, alternating, median of the runs. Both
 * time the download call only (no process start, no import). Run it alone: on shared cores it measures the load.
 *
 * <pre>
 * ./finetune --version &gt;/dev/null &amp;&amp; mvn -B -q -pl cli -am test-compile &amp;&amp;
 *   java -cp "cli/target/test-classes:cli/target/finetune.jar" dev.finetune.cli.HubDownloadBench 1024 3
 * </pre>
 * ({@code ./finetune} builds the jar the test classes run against; {@link BenchHarnessTest} keeps this runnable.)
 */
public final class HubDownloadBench {
    private HubDownloadBench() {}

    public static void main(String[] args) throws Exception {
        int megabytes = args.length > 0 ? Integer.parseInt(args[0]) : 1024;
        int runs = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        Path dir = Files.createTempDirectory("hub-bench");
        try (TestHub hub = TestHub.start()) {
            Path repo = Files.createDirectories(dir.resolve("repo/data"));
            byte[] block = new byte[1 << 20];
            new Random(1).nextBytes(block);
            try (OutputStream out = Files.newOutputStream(repo.resolve("train.parquet"))) {
                for (int i = 0; i < megabytes; i++) {
                    block[0] = (byte) i; // no two blocks alike
                    out.write(block);
                }
            }
            hub.publish(RepoType.DATASET, "bench/big", "main", dir.resolve("repo"));
            // one small fetch first: the JVM's HTTP client and the fetcher's classes load and compile outside the
            // timed runs, as the Python side's imports happen before its timer starts
            Path warm = Files.createDirectories(dir.resolve("warm/data"));
            Files.write(warm.resolve("train.parquet"), block);
            hub.publish(RepoType.DATASET, "bench/warm", "main", dir.resolve("warm"));
            new Fetcher(HubEnvironment.of(HubProcess.env(dir.resolve("warm-home"), hub.endpoint())))
                    .pinned(RepoType.DATASET, "bench/warm", "main", DatasetFiles.WHOLE_REPO, "bench");
            Path python = MainProcessTest.repoRoot().resolve(".venv/bin/python");
            List<Double> ours = new ArrayList<>();
            List<Double> theirs = new ArrayList<>();
            for (int r = 0; r < runs; r++) {
                Path home = dir.resolve("ours-" + r);
                HubEnvironment env = HubEnvironment.of(HubProcess.env(home, hub.endpoint()));
                long start = System.nanoTime();
                new Fetcher(env).pinned(RepoType.DATASET, "bench/big", "main", DatasetFiles.WHOLE_REPO, "bench");
                ours.add(megabytes * 1.048576 / ((System.nanoTime() - start) / 1e9));
                delete(home);

                Path theirHome = dir.resolve("theirs-" + r);
                ProcessBuilder b = new ProcessBuilder(python.toString(), "-c", "import time\n"
                        + "from huggingface_hub import hf_hub_download\n"
                        + "t = time.perf_counter()\n"
                        + "hf_hub_download('bench/big', 'data/train.parquet', repo_type='dataset')\n"
                        + "print(time.perf_counter() - t)\n").redirectErrorStream(true);
                b.environment().remove("HF_HUB_OFFLINE");
                b.environment().putAll(HubProcess.env(theirHome, hub.endpoint()));
                Process p = b.start();
                String out = new String(p.getInputStream().readAllBytes()).strip();
                if (p.waitFor() != 0) {
                    throw new IllegalStateException(out);
                }
                String[] lines = out.split("\n");
                theirs.add(megabytes * 1.048576 / Double.parseDouble(lines[lines.length - 1]));
                delete(theirHome);
            }
            System.out.printf(Locale.ROOT, "%d MB LFS file from 127.0.0.1 (load average %s):%n", megabytes,
                    Files.readString(Path.of("/proc/loadavg")).strip());
            System.out.printf(Locale.ROOT, "  finetune        median %7.1f MB/s  runs %s%n", median(ours), fmt(ours));
            System.out.printf(Locale.ROOT, "  huggingface_hub median %7.1f MB/s  runs %s%n", median(theirs), fmt(theirs));
        } finally {
            delete(dir);
        }
    }

    private static double median(List<Double> xs) {
        return xs.stream().sorted().toList().get(xs.size() / 2);
    }

    private static List<String> fmt(List<Double> xs) {
        return xs.stream().map(x -> String.format(Locale.ROOT, "%.1f", x)).toList();
    }

    private static void delete(Path dir) throws IOException {
        if (!Files.exists(dir)) {
            return;
        }
        try (Stream<Path> walk = Files.walk(dir)) {
            for (Path p : walk.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }
}
