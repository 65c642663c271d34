package dev.finetune.trainers.model;

import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import ai.djl.pytorch.engine.PtNDManager;
import ai.djl.pytorch.engine.PtSymbolBlock;
import ai.djl.pytorch.jni.IValue;
import ai.djl.pytorch.jni.IValueUtils;
import ai.djl.pytorch.jni.JniUtils;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.zip.CRC32;
import java.util.zip.ZipEntry;
import java.util.zip.ZipOutputStream;

/**
 * A TorchScript module compiled by the engine's own libtorch from source kept in this jar.
 *
 * <p>A chain of ops called one by one from Java costs a JNI call, a Java wrapper and a native allocation per op;
 * the same chain inside one module is one call, and it can use aten ops DJL has no binding for (fused
 * multi-tensor AdamW, SiLU, SDPA). The archive libtorch loads is written here, at load time: a TorchScript
 * archive is a zip of the module's source ({@code code/__torch__.py}, which libtorch compiles when it loads it)
 * plus a few tiny pickles, and a module without parameters needs only the one naming its class. So no Python is
 * needed to build or run it, and the source is compiled by exactly the libtorch that runs it, never by a newer
 * torch whose archive this one might refuse.
 *
 * <p>The graph executor's optimizer is switched off for the whole process before the first module loads: it would
 * profile the first calls and replace autograd's gradient formulas with its own for subgraphs. Without it the
 * module's ops record the same autograd graph as the same ops called one by one from Java.
 */
public final class TorchScript implements AutoCloseable {
    private static boolean executorConfigured;
    private static final java.util.concurrent.atomic.AtomicLong COMPILE_NANOS = new java.util.concurrent.atomic.AtomicLong();

    private final PtSymbolBlock block;

    private TorchScript(PtSymbolBlock block) {
        this.block = block;
    }

    /**
     * Compiles the class-path resource {@code resource} (absolute, {@code /dev/...}), which defines
     * {@code class <className>(Module)}.
     */
    public static TorchScript load(String resource, String className, NDManager manager) {
        try (InputStream in = TorchScript.class.getResourceAsStream(resource)) {
            if (in == null) {
                throw new IllegalStateException("TorchScript source " + resource + " is missing from the jar");
            }
            return compile(className, new String(in.readAllBytes(), StandardCharsets.UTF_8), manager);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** Compiles {@code source}, TorchScript defining {@code class <className>(Module)} with no parameters. */
    public static TorchScript compile(String className, String source, NDManager manager) {
        configureExecutor();
        long started = System.nanoTime();
        try {
            return new TorchScript(JniUtils.loadModule((PtNDManager) manager,
                    new ByteArrayInputStream(archive(className, source)), false, false));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            COMPILE_NANOS.addAndGet(System.nanoTime() - started);
        }
    }

    /** Seconds this process has spent compiling modules so far: part of the wait before the first step. */
    public static double compileSeconds() {
        return COMPILE_NANOS.get() / 1e9;
    }

    private static synchronized void configureExecutor() {
        if (!executorConfigured) {
            JniUtils.setGraphExecutorOptimize(false);
            executorConfigured = true;
        }
    }

    /**
     * Runs {@code forward} on tensors, recording autograd when grad mode is on; the outputs belong to the first
     * input's manager.
     */
    public NDList forward(NDList inputs) {
        return IValueUtils.forward(block, inputs, true);
    }

    /** Runs {@code method} without recording gradients; the caller closes the result. */
    public IValue call(String method, IValue... arguments) {
        return IValueUtils.runMethod(block, method, arguments);
    }

    @Override
    public void close() {
        block.close();
    }

    /**
     * The archive {@code torch.jit.save} would write for a parameterless module of this source, minus the debug
     * tables: {@code data.pkl} is the pickled module object (its class and {@code training = True}),
     * {@code constants.pkl} an empty tuple, {@code version} the format version 2.7.1 reads without complaint.
     */
    static byte[] archive(String className, String source) throws IOException {
        ByteArrayOutputStream module = new ByteArrayOutputStream();
        // pickle protocol 2: GLOBAL '__torch__ <class>', EMPTY_TUPLE, NEWOBJ, EMPTY_DICT, MARK,
        // BINUNICODE 'training', NEWTRUE, SETITEMS, BUILD, STOP
        module.write(new byte[] {(byte) 0x80, 2, 'c'});
        module.write(("__torch__\n" + className + "\n").getBytes(StandardCharsets.US_ASCII));
        module.write(new byte[] {')', (byte) 0x81, '}', '(', 'X'});
        byte[] training = "training".getBytes(StandardCharsets.US_ASCII);
        module.write(new byte[] {(byte) training.length, 0, 0, 0});
        module.write(training);
        module.write(new byte[] {(byte) 0x88, 'u', 'b', '.'});
        ByteArrayOutputStream zip = new ByteArrayOutputStream();
        try (ZipOutputStream out = new ZipOutputStream(zip)) {
            stored(out, "module/data.pkl", module.toByteArray());
            stored(out, "module/code/__torch__.py", source.getBytes(StandardCharsets.UTF_8));
            stored(out, "module/constants.pkl", new byte[] {(byte) 0x80, 2, ')', '.'});
            stored(out, "module/version", "3\n".getBytes(StandardCharsets.US_ASCII));
        }
        return zip.toByteArray();
    }

    /** Uncompressed, as torch writes its archives. */
    private static void stored(ZipOutputStream out, String name, byte[] data) throws IOException {
        ZipEntry entry = new ZipEntry(name);
        entry.setMethod(ZipEntry.STORED);
        entry.setSize(data.length);
        entry.setCompressedSize(data.length);
        CRC32 crc = new CRC32();
        crc.update(data);
        entry.setCrc(crc.getValue());
        out.putNextEntry(entry);
        out.write(data);
        out.closeEntry();
    }
}
