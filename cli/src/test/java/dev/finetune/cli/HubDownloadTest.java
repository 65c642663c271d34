package dev.finetune.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.finetune.recipes.hub.RepoType;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A download is resumable, checked and shared: killed with SIGKILL midway it resumes from its .incomplete file with
 * a Range request; a byte flipped in transit fails the SHA-256 check and leaves nothing behind; two processes
 * fetching the same repo at once transfer each file once; a listing paged by Link headers is read whole.
 */
class HubDownloadTest {
    static final String REPO = "test-org/big-model";
    static final int SHARD = 24 * 1024 * 1024;
    static TestHub hub;
    static String shardSha256;

    @TempDir
    static Path shared;

    @BeforeAll
    static void publish() throws IOException {
        hub = TestHub.start();
        Path repo = HubModelTest.modelRepo(shared.resolve("repo"));
        Files.delete(repo.resolve("model.safetensors"));
        // two shards named by an index, as large checkpoints are published (the bytes need not be a real model)
        byte[] bytes = new byte[SHARD];
        new Random(7).nextBytes(bytes);
        Files.write(repo.resolve("model-00001-of-00002.safetensors"), bytes);
        Files.write(repo.resolve("model-00002-of-00002.safetensors"), java.util.Arrays.copyOf(bytes, 1024));
        Files.writeString(repo.resolve("model.safetensors.index.json"), "{\"metadata\": {}, \"weight_map\": {"
                + "\"a\": \"model-00001-of-00002.safetensors\", \"b\": \"model-00002-of-00002.safetensors\"}}");
        shardSha256 = sha256(repo.resolve("model-00001-of-00002.safetensors"));
        hub.publish(RepoType.MODEL, REPO, "main", repo);
    }

    @AfterAll
    static void stop() {
        hub.close();
    }

    @Test
    void aKilledDownloadResumesWhereItStopped(@TempDir Path dir) throws Exception {
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());
        Path blobs = dir.resolve("hf/hub/models--test-org--big-model/blobs");
        Path partial = blobs.resolve(shardSha256 + ".incomplete");
        hub.throttle(4L * 1024 * 1024);
        long before;
        try {
            Process p = HubProcess.finetuneBuilder(dir, env, "download", REPO).redirectErrorStream(true)
                    .redirectOutput(dir.resolve("first.log").toFile()).start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
            while ((!Files.exists(partial) || Files.size(partial) < SHARD / 4) && System.nanoTime() < deadline && p.isAlive()) {
                Thread.sleep(50);
            }
            assertTrue(Files.exists(partial), "no .incomplete file appeared: " + Files.readString(dir.resolve("first.log")));
            Runtime.getRuntime().exec(new String[] {"kill", "-9", Long.toString(p.pid())}).waitFor();
            assertTrue(p.waitFor(30, TimeUnit.SECONDS));
            before = Files.size(partial);
            assertTrue(before > 0 && before < SHARD, "killed at " + before + " bytes");
            assertFalse(Files.exists(blobs.resolve(shardSha256)), "a half file was published as the blob");
        } finally {
            hub.throttle(0);
        }
        int requestsBefore = hub.requests.size();
        HubProcess.Run again = HubProcess.finetune(dir, env, "download", REPO);
        assertEquals(0, again.exit(), again.all());
        List<String> resumed = hub.requests.subList(requestsBefore, hub.requests.size()).stream()
                .filter(r -> r.startsWith("storage GET /lfs/" + shardSha256)).toList();
        assertEquals(1, resumed.size(), hub.log());
        long from = Long.parseLong(resumed.get(0).replaceAll(".*bytes=(\\d+)-.*", "$1"));
        assertTrue(from > 0 && from <= before, "resumed from " + from + " after " + before + " bytes: " + resumed);
        assertEquals(shardSha256, sha256(blobs.resolve(shardSha256)));
        assertFalse(Files.exists(partial));
    }

    @Test
    void aFlippedByteFailsTheChecksumAndLeavesNothing(@TempDir Path dir) throws Exception {
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());
        hub.flipByteIn("model-00001-of-00002.safetensors");
        try {
            HubProcess.Run run = HubProcess.finetune(dir, env, "download", REPO);
            HubProcess.assertOneLineError(run, "model-00001-of-00002.safetensors", "arrived damaged", shardSha256,
                    "run it again");
        } finally {
            hub.flipByteIn(null);
        }
        Path repo = dir.resolve("hf/hub/models--test-org--big-model");
        try (Stream<Path> files = Files.walk(repo)) {
            assertTrue(files.noneMatch(p -> p.getFileName().toString().startsWith(shardSha256)), "a damaged blob was kept");
        }
        HubProcess.Run fixed = HubProcess.finetune(dir, env, "download", REPO);
        assertEquals(0, fixed.exit(), fixed.all());
    }

    @Test
    void twoProcessesFetchingAtOnceTransferEachFileOnce(@TempDir Path dir) throws Exception {
        Map<String, String> env = HubProcess.env(dir.resolve("hf"), hub.endpoint());
        int before = hub.requests.size();
        hub.throttle(16L * 1024 * 1024);
        try {
            Process a = HubProcess.finetuneBuilder(dir, env, "download", REPO).redirectErrorStream(true)
                    .redirectOutput(dir.resolve("a.log").toFile()).start();
            Process b = HubProcess.finetuneBuilder(dir, env, "download", REPO).redirectErrorStream(true)
                    .redirectOutput(dir.resolve("b.log").toFile()).start();
            assertTrue(a.waitFor(300, TimeUnit.SECONDS) && b.waitFor(300, TimeUnit.SECONDS));
            assertEquals(0, a.exitValue(), Files.readString(dir.resolve("a.log")));
            assertEquals(0, b.exitValue(), Files.readString(dir.resolve("b.log")));
        } finally {
            hub.throttle(0);
        }
        long transfers = hub.requests.subList(before, hub.requests.size()).stream()
                .filter(r -> r.startsWith("storage GET /lfs/" + shardSha256)).count();
        assertEquals(1, transfers, hub.log());
    }

    @Test
    void aListingPagedByLinkHeadersIsReadWhole(@TempDir Path dir) throws Exception {
        hub.treePage(2);
        try {
            HubProcess.Run run = HubProcess.finetune(dir, HubProcess.env(dir.resolve("hf"), hub.endpoint()), "download", REPO);
            assertEquals(0, run.exit(), run.all());
        } finally {
            hub.treePage(1000);
        }
        Path snapshot;
        try (Stream<Path> s = Files.list(dir.resolve("hf/hub/models--test-org--big-model/snapshots"))) {
            snapshot = s.findFirst().orElseThrow();
        }
        assertEquals(List.of("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                "model.safetensors.index.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"),
                HubModelTest.list(snapshot));
    }

    static String sha256(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            MessageDigest d = MessageDigest.getInstance("SHA-256");
            byte[] buffer = new byte[1 << 20];
            int n;
            while ((n = in.read(buffer)) > 0) {
                d.update(buffer, 0, n);
            }
            return HexFormat.of().formatHex(d.digest());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
