package dev.finetune.trainers.backend.fsdp;

import dev.finetune.recipes.BoundedLineReader;
import dev.finetune.recipes.UserError;
import dev.finetune.trainers.train.StopRequest;
import dev.finetune.trainers.train.Trainer;
import dev.finetune.trainers.train.output.LossCurve;
import dev.finetune.trainers.train.output.MetricsLog;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Process supervision: torchrun and its ranks live exactly as long as the run, and none outlives a failure. */
final class Torchrun {
    private static final String SETSID = "/usr/bin/setsid";

    private Torchrun() {}

    /**
     * Starts torchrun, relays its ranks' lines until it ends, and stops every rank whatever happens: a failing rank,
     * an interrupt, or this JVM going down (Ctrl-C, kill) through a shutdown hook.
     */
    static FsdpBackend.Result run(List<String> command, Map<String, String> env, Path outputDir, Launch launch,
            FsdpBackend.Settings settings, Trainer.Run schedule) {
        // stdout and stderr apart: torchrun prints both of a rank's streams under one header, and a line it
        // printed half of (read while the rank was writing it) must be joined with its own stream's rest.
        // In a session of its own: Ctrl-C in the terminal reaches this JVM only, which asks the ranks to stop at
        // the next step boundary with a checkpoint (torchrun would kill them mid-step on SIGINT, SIGTERM or SIGHUP).
        List<String> detached = new ArrayList<>();
        if (java.nio.file.Files.isExecutable(Path.of(SETSID))) {
            detached.add(SETSID);
        }
        detached.addAll(command);
        ProcessBuilder builder = new ProcessBuilder(detached);
        builder.environment().putAll(env);
        builder.environment().putAll(settings.environment());
        Process process;
        try {
            process = builder.start();
        } catch (IOException e) {
            throw new UserError("python", "cannot start torchrun: " + e.getMessage(), "check --python");
        }
        RankRelay run = new RankRelay(outputDir, launch, settings, schedule);
        // The JVM stopping (Ctrl-C, kill) takes every rank with it.
        Thread reaper = new Thread(() -> stopAll(process, run.pids()));
        Runtime.getRuntime().addShutdownHook(reaper);
        StderrReader stderr = new StderrReader(process, run);
        stderr.start();
        try (AutoCloseable stopping = StopRequest.elsewhere(signal -> run.requestStop());
                BoundedLineReader lines = reader(process.getInputStream())) {
            String line;
            while ((line = lines.readLine()) != null) {
                run.stdout(line);
            }
            int exitCode = process.waitFor();
            stderr.join();
            if (stderr.lost != null) {
                throw stderr.lost;
            }
            run.finish(exitCode);
        } catch (IOException e) {
            stopAll(process, run.pids());
            throw new IllegalStateException("lost the workers' output: " + e.getMessage(), e);
        } catch (InterruptedException e) {
            stopAll(process, run.pids());
            Thread.currentThread().interrupt();
            throw new FsdpBackend.WorkerFailed("interrupted; the ranks were stopped");
        } catch (Exception e) {
            throw new IllegalStateException(e); // StopRequest's scope closes without throwing
        } finally {
            run.close();
            try {
                Runtime.getRuntime().removeShutdownHook(reaper);
            } catch (IllegalStateException ignored) {
                // already shutting down: the hook runs anyway
            }
        }
        // torchrun stops the other ranks when one fails; whatever survived it is stopped here.
        int leftovers = stopAll(process, run.pids());
        if (process.exitValue() != 0 || run.failed()) {
            String why = run.why(process.exitValue());
            throw new FsdpBackend.WorkerFailed(why + (leftovers > 0 ? " (" + leftovers + " leftover process(es) stopped)" : "")
                    + "; each rank's full output is in " + outputDir.resolve(WorkerPlan.FOLDER).resolve("logs"));
        }
        LossCurve.draw(outputDir.resolve(MetricsLog.FILE), outputDir);
        if (run.stoppedAt() != null) {
            throw new StopRequest.Stopped(StopRequest.requested(), run.stoppedAt().step(),
                    "saved " + run.stoppedAt().folder());
        }
        return run.result();
    }

    /** Stops torchrun and every rank still alive; returns how many ranks had to be stopped here. */
    static int stopAll(Process torchrun, List<Long> rankPids) {
        List<ProcessHandle> alive = new ArrayList<>(torchrun.descendants().toList());
        for (long pid : rankPids) {
            ProcessHandle.of(pid).filter(ProcessHandle::isAlive).ifPresent(h -> {
                if (!alive.contains(h)) {
                    alive.add(h);
                }
            });
        }
        int stopped = (int) alive.stream().filter(ProcessHandle::isAlive).count();
        alive.forEach(ProcessHandle::destroy);
        torchrun.destroy();
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        for (ProcessHandle h : alive) {
            try {
                h.onExit().get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (Exception e) {
                h.destroyForcibly();
            }
        }
        if (torchrun.isAlive()) {
            torchrun.destroyForcibly();
        }
        return torchrun.exitValue() == 0 && stopped == 0 ? 0 : stopped;
    }


    /** A rank's line is shown or parsed as an event: one that never ends is cut at 1 MiB, never all memory. */
    private static BoundedLineReader reader(java.io.InputStream stream) {
        return new BoundedLineReader(new InputStreamReader(stream, StandardCharsets.UTF_8), 1 << 20);
    }

    /** torchrun's stderr, relayed beside its stdout until torchrun closes it. */
    private static final class StderrReader extends Thread {
        private final Process process;
        private final RankRelay run;
        private volatile IOException lost;

        StderrReader(Process process, RankRelay run) {
            super("torchrun-stderr");
            setDaemon(true);
            this.process = process;
            this.run = run;
        }

        @Override
        public void run() {
            try (BoundedLineReader lines = reader(process.getErrorStream())) {
                String line;
                while ((line = lines.readLine()) != null) {
                    run.stderr(line);
                }
            } catch (IOException e) {
                lost = e;
            }
        }
    }
}
