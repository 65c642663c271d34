package dev.finetune.cli.reliability;

import dev.finetune.cli.Main;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * Runs one {@link Case}: builds it, runs {@code finetune} in a child JVM while sampling its peak resident memory
 * and its descendants, then checks the rules every case shares: the expected exit code, one clear error line with
 * a hint (or the expected output), no stack trace, nothing outside the writable paths changed, no process left.
 */
final class Runner {
    private Runner() {}

    static Path repoRoot() {
        for (Path p = Path.of(System.getProperty("user.dir")).toAbsolutePath(); p != null; p = p.getParent()) {
            if (Files.isRegularFile(p.resolve("configs/quickstart.yaml"))) {
                return p;
            }
        }
        throw new IllegalStateException("repository root not found");
    }

    static List<String> javaCommand(List<String> args) {
        List<String> command = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss1m", "-Dai.djl.offline=true",
                "-Dai.djl.pytorch.num_threads=1", "-Dai.djl.pytorch.num_interop_threads=1",
                "-Dfinetune.home=" + repoRoot(), "-cp", System.getProperty("java.class.path"), Main.class.getName()));
        command.addAll(args);
        return command;
    }

    /** Whether this process ignores SIGINT, from the SigIgn mask in /proc/self/status (bit 1 is SIGINT). */
    static boolean interruptIgnored() {
        try (Stream<String> lines = Files.lines(Path.of("/proc/self/status"))) {
            return lines.filter(l -> l.startsWith("SigIgn:")).findFirst()
                    .map(l -> (Long.parseUnsignedLong(l.substring("SigIgn:".length()).strip(), 16) & 0x2) != 0)
                    .orElse(false);
        } catch (IOException e) {
            return false;
        }
    }

    static Process start(Path workDir, List<String> args, Path log) throws IOException {
        return start(workDir, args, log, 0);
    }

    static Process start(Path workDir, List<String> args, Path log, long fileSizeLimitKb) throws IOException {
        return start(workDir, args, log, fileSizeLimitKb, false);
    }

    static Process start(Path workDir, List<String> args, Path log, long fileSizeLimitKb, boolean ownSession)
            throws IOException {
        return start(workDir, args, log, fileSizeLimitKb, ownSession, Map.of());
    }

    static Process start(Path workDir, List<String> args, Path log, long fileSizeLimitKb, boolean ownSession,
            Map<String, String> env) throws IOException {
        List<String> command = javaCommand(args);
        if (interruptIgnored()) {
            // A suite started in the background by a non-interactive shell inherits SIGINT ignored, and the JVM
            // then installs no handler for it: the Ctrl-C case would train to the end. Its child gets the default.
            List<String> restored = new ArrayList<>(List.of("env", "--default-signal=INT"));
            restored.addAll(command);
            command = restored;
        }
        if (fileSizeLimitKb > 0) {
            List<String> limited = new ArrayList<>(List.of("bash", "-c", "ulimit -f " + fileSizeLimitKb + " && exec \"$0\" \"$@\""));
            limited.addAll(command);
            command = limited;
        }
        if (ownSession) {
            // setsid execs in place (this JVM's child leads no group yet), so the pid stays the java's
            List<String> session = new ArrayList<>(List.of("setsid"));
            session.addAll(command);
            command = session;
        }
        ProcessBuilder builder = new ProcessBuilder(command).directory(workDir.toFile());
        builder.environment().put("OMP_WAIT_POLICY", "PASSIVE");
        builder.environment().remove("FINETUNE_JAVA_OPTS");
        builder.environment().putAll(env);
        return builder.redirectOutput(log.resolveSibling(log.getFileName() + ".out").toFile())
                .redirectError(log.resolveSibling(log.getFileName() + ".err").toFile()).start();
    }

    static Case.Outcome run(Case c, Path dir) throws Exception {
        Path work = Files.createDirectories(dir.resolve("work"));
        Case.Invocation invocation = c.setup().prepare(dir);
        Map<String, String> before = snapshot(dir, Set.of());
        Path log = dir.resolveSibling(dir.getFileName() + ".log");
        List<String> problems = new ArrayList<>();
        long started = System.nanoTime();
        Process child = start(work, invocation.args(), log, invocation.fileSizeLimitKb(), invocation.ownSession(),
                invocation.env());
        Set<ProcessHandle> descendants = new LinkedHashSet<>();
        long peakKb = 0;
        double seconds;
        try {
            if (invocation.stdin() != null) {
                try (OutputStream in = child.getOutputStream()) {
                    in.write(invocation.stdin().getBytes(StandardCharsets.UTF_8));
                } catch (IOException e) {
                    // the child may stop reading early; what it does then is what the case checks
                }
            } else {
                child.getOutputStream().close();
            }
            Thread during = null;
            if (invocation.during() != null) {
                during = new Thread(() -> {
                    try {
                        invocation.during().act(child);
                    } catch (Exception e) {
                        problems.add("the case's action failed: " + e);
                    }
                });
                during.setDaemon(true);
                during.start();
            }
            long deadline = started + TimeUnit.SECONDS.toNanos(c.seconds());
            while (child.isAlive() && System.nanoTime() < deadline) {
                peakKb = Math.max(peakKb, peakKb(child.pid()));
                child.descendants().forEach(descendants::add);
                child.waitFor(20, TimeUnit.MILLISECONDS);
            }
            seconds = (System.nanoTime() - started) / 1e9;
            if (child.isAlive()) {
                problems.add("still running after the bound of " + c.seconds() + " s (hung): killed");
                child.descendants().forEach(descendants::add);
                child.destroyForcibly();
                child.waitFor(10, TimeUnit.SECONDS);
            }
            if (during != null) {
                during.join(10_000);
            }
        } finally {
            if (invocation.cleanup() != null) {
                invocation.cleanup().run();
            }
        }
        // A child's children die with it or are reaped by it; any still alive were left behind.
        for (ProcessHandle handle : descendants) {
            try {
                // a process killed a moment ago is gone once its parent (or init) has reaped it
                handle.onExit().get(3, TimeUnit.SECONDS);
            } catch (java.util.concurrent.TimeoutException | java.util.concurrent.ExecutionException e) {
                // still running: reported below
            }
            if (handle.isAlive()) {
                problems.add("left process " + handle.pid() + " " + handle.info().command().orElse("?") + " running");
                handle.destroyForcibly();
            }
        }
        String out = Files.readString(log.resolveSibling(log.getFileName() + ".out"), StandardCharsets.UTF_8);
        String err = Files.readString(log.resolveSibling(log.getFileName() + ".err"), StandardCharsets.UTF_8);
        int exit = child.isAlive() ? -1 : child.exitValue();
        long peakMb = (peakKb + 1023) / 1024;
        judge(c, exit, out, err, peakMb, problems);
        Set<Path> writable = new LinkedHashSet<>();
        for (Path p : invocation.writable()) {
            writable.add(p.toAbsolutePath().normalize());
        }
        Map<String, String> after = snapshot(dir, writable);
        before.keySet().removeIf(k -> writable.stream().anyMatch(w -> Path.of(k).startsWith(w)));
        if (!after.equals(before)) {
            problems.add("changed what the user owns: " + difference(before, after));
        }
        Case.Outcome outcome = new Case.Outcome(exit, out, err, seconds, peakMb, problems);
        if (c.check() != null && problems.isEmpty()) {
            try {
                c.check().verify(dir, outcome);
            } catch (AssertionError | Exception e) {
                problems.add("check: " + e.getMessage());
            }
        }
        return outcome;
    }

    private static void judge(Case c, int exit, String out, String err, long peakMb, List<String> problems) {
        if (exit != c.exit()) {
            problems.add("exit " + exit + ", expected " + c.exit() + ": " + firstLines(err, 3));
        }
        if (err.contains("\tat ") || err.contains("Exception") || out.contains("\tat ")) {
            problems.add("printed a stack trace or exception name: " + firstLines(err, 3));
        }
        if (peakMb > c.megabytes()) {
            problems.add("peak memory " + peakMb + " MB over the bound of " + c.megabytes() + " MB");
        }
        if (c.exit() == 2) {
            // text reports say "error: ", --format github annotations "::error "
            List<String> errors = (err + out).lines().filter(l -> l.startsWith("error: ") || l.startsWith("::error "))
                    .toList();
            if (errors.size() != 1) {
                problems.add(errors.size() + " error lines, expected one: " + firstLines(err, 4));
            } else if (!errors.get(0).contains("(hint: ")) {
                problems.add("no hint: " + errors.get(0));
            } else if (!errors.get(0).contains(c.expect())) {
                problems.add("error does not say '" + c.expect() + "': " + errors.get(0));
            }
        } else if (c.exit() == 0 && !(out + err).contains(c.expect())) {
            problems.add("output does not say '" + c.expect() + "': " + firstLines(err, 3));
        }
    }

    private static String firstLines(String text, int n) {
        return String.join(" | ", text.lines().limit(n).toList());
    }

    /** Peak resident memory of a live process so far (Linux's high-water mark), 0 when unknown. */
    private static long peakKb(long pid) {
        try {
            for (String line : Files.readAllLines(Path.of("/proc", Long.toString(pid), "status"))) {
                if (line.startsWith("VmHWM:")) {
                    return Long.parseLong(line.replaceAll("\\D", ""));
                }
            }
        } catch (IOException | RuntimeException e) {
            // the process ended between two samples
        }
        return 0;
    }

    /** Every path under {@code root} with its content hash (files), "dir" or the link target, minus {@code skip}. */
    static Map<String, String> snapshot(Path root, Set<Path> skip) throws IOException {
        Map<String, String> entries = new LinkedHashMap<>();
        try (Stream<Path> walk = Files.walk(root)) {
            for (Path path : walk.sorted().toList()) {
                Path absolute = path.toAbsolutePath().normalize();
                if (skip.stream().anyMatch(absolute::startsWith) || path.getFileName().toString().endsWith(".log")) {
                    continue;
                }
                if (Files.isSymbolicLink(path)) {
                    entries.put(absolute.toString(), "-> " + Files.readSymbolicLink(path));
                } else if (Files.isDirectory(path, LinkOption.NOFOLLOW_LINKS)) {
                    entries.put(absolute.toString(), "dir");
                } else if (Files.isRegularFile(path, LinkOption.NOFOLLOW_LINKS)) {
                    entries.put(absolute.toString(), hash(path));
                } else {
                    entries.put(absolute.toString(), "special");
                }
            }
        }
        return entries;
    }

    private static String hash(Path file) throws IOException {
        try (InputStream in = Files.newInputStream(file)) {
            MessageDigest digest = MessageDigest.getInstance("SHA-256");
            byte[] buffer = new byte[1 << 16];
            for (int n; (n = in.read(buffer)) > 0; ) {
                digest.update(buffer, 0, n);
            }
            return HexFormat.of().formatHex(digest.digest());
        } catch (java.security.NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String difference(Map<String, String> before, Map<String, String> after) {
        List<String> changes = new ArrayList<>();
        for (String key : before.keySet()) {
            if (!after.containsKey(key)) {
                changes.add("removed " + key);
            } else if (!after.get(key).equals(before.get(key))) {
                changes.add("changed " + key);
            }
        }
        for (String key : after.keySet()) {
            if (!before.containsKey(key)) {
                changes.add("added " + key);
            }
        }
        return String.join(", ", changes.subList(0, Math.min(4, changes.size())))
                + (changes.size() > 4 ? " … (" + changes.size() + ")" : "");
    }
}
