package dev.finetune.cli.reliability;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The reliability suite: every class of hostile or unlucky input from issue 10, each through the real CLI in a
 * child JVM. Each case must exit 0 with the correct result or 2 with one error line that names the file, line or
 * key and gives a hint; print no stack trace; change nothing the user owns; leave no process behind; finish
 * within its bound (a hang detector) and stay under its memory bound. Prints a table of what each case measured
 * (also written to {@code target/reliability-table.md}).
 */
class ReliabilitySuiteTest {

    static List<Case> cases() {
        List<Case> all = new ArrayList<>();
        all.addAll(DataLossCases.all());
        all.addAll(CorruptionCases.all());
        all.addAll(UntrustedCases.all());
        all.addAll(BoundsCases.all());
        all.addAll(DataFileCases.all());
        all.addAll(FaultCases.all());
        all.addAll(WorkerCases.all());
        return all;
    }

    @Test
    @Timeout(1200)
    void everyCaseExitsCleanlyAndChangesNothingTheUserOwns(@TempDir Path root) throws Exception {
        String only = System.getProperty("reliability.only", "");
        // -Dreliability.only=a|b runs the cases whose names contain a or b
        List<String> wanted = List.of(only.split("\\|"));
        List<Case> cases = cases().stream().filter(c -> wanted.stream().anyMatch(c.name()::contains)).toList();
        Set<String> names = new HashSet<>();
        for (Case c : cases) {
            assertTrue(names.add(c.name()), "duplicate case name " + c.name());
        }
        Path repoConfigs = Runner.repoRoot().resolve("configs");
        Map<String, String> configsBefore = Runner.snapshot(repoConfigs, Set.of());
        int threads = Integer.getInteger("reliability.threads", 2);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        List<Future<Case.Outcome>> futures = new ArrayList<>();
        for (int i = 0; i < cases.size(); i++) {
            Case c = cases.get(i);
            Path dir = Files.createDirectories(root.resolve(String.format(Locale.ROOT, "case-%02d", i)));
            futures.add(pool.submit(() -> {
                try {
                    return Runner.run(c, dir);
                } catch (Exception | AssertionError e) {
                    return new Case.Outcome(-1, "", "", 0, 0, List.of("setup failed: " + e));
                }
            }));
        }
        pool.shutdown();
        StringBuilder table = new StringBuilder();
        table.append("| # | class | case | exit (expected) | seconds (bound) | peak MB (bound) | result |\n");
        table.append("|---|---|---|---|---|---|---|\n");
        List<String> failures = new ArrayList<>();
        for (int i = 0; i < cases.size(); i++) {
            Case c = cases.get(i);
            Case.Outcome o = futures.get(i).get();
            boolean ok = o.problems().isEmpty();
            table.append(String.format(Locale.ROOT, "| %d | %s | %s | %d (%d) | %.1f (%d) | %d (%d) | %s |%n", i + 1,
                    c.kind().name().toLowerCase(Locale.ROOT), c.name(), o.exit(), c.exit(), o.seconds(), c.seconds(),
                    o.peakMb(), c.megabytes(), ok ? "ok" : "FAIL: " + String.join("; ", o.problems())));
            if (!ok) {
                failures.add(c.name() + ": " + String.join("; ", o.problems()));
            }
        }
        System.out.print(table);
        Path target = Path.of(System.getProperty("user.dir"), "target");
        if (Files.isDirectory(target)) {
            Files.writeString(target.resolve("reliability-table.md"), table, StandardCharsets.UTF_8);
        }
        assertTrue(Runner.snapshot(repoConfigs, Set.of()).equals(configsBefore), "the shipped configs changed");
        assertTrue(failures.isEmpty(), failures.size() + " of " + cases.size() + " cases failed:\n"
                + String.join("\n", failures));
    }
}
