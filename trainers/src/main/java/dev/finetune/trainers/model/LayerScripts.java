package dev.finetune.trainers.model;

import ai.djl.ndarray.NDArray;
import ai.djl.ndarray.NDList;
import ai.djl.ndarray.NDManager;
import dev.finetune.adapters.ScriptArguments;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The compiled decoder-layer modules of one model, one per distinct source. Every layer of a model writes the
 * same source (only the tensors it passes differ), so a model compiles one module, plus one per adapter state it
 * meets (dropout on or off, adapter disabled or referencing).
 */
final class LayerScripts {
    private final NDManager owner;
    private final Map<String, TorchScript> compiled = new HashMap<>();
    private volatile boolean enabled = !"false".equals(System.getProperty("finetune.scripted-layers"));
    private volatile boolean bfloat16;

    LayerScripts(NDManager owner) {
        this.owner = owner;
    }

    boolean enabled() {
        return enabled;
    }

    void setEnabled(boolean enabled) {
        this.enabled = enabled;
    }

    /** Whether training's matrix multiplies run in bfloat16 ({@link LlamaModel#setBfloat16Compute}). */
    boolean bfloat16() {
        return bfloat16;
    }

    void setBfloat16(boolean bfloat16) {
        this.bfloat16 = bfloat16;
    }

    /** Runs {@code source}'s {@code forward} on the collected arguments, compiling the source on first use. */
    NDArray run(String source, Arguments arguments) {
        TorchScript script;
        synchronized (compiled) {
            script = compiled.computeIfAbsent(source, s -> TorchScript.compile("Layer", s, owner));
        }
        return script.forward(new NDList(arguments.tensors.toArray(new NDArray[0]))).singletonOrThrow();
    }

    /** The tensors of one call, in argument order, named {@code t0, t1, ...} after the fixed leading ones. */
    static final class Arguments implements ScriptArguments {
        /** TorchScript's code for {@code torch.bfloat16} and {@code torch.float32} (its serialized source has no names). */
        static final int BFLOAT16 = 15;
        static final int FLOAT32 = 6;

        private final NDManager manager;
        private final boolean bfloat16;
        private final List<NDArray> tensors = new ArrayList<>();
        private final List<String> names = new ArrayList<>();
        private final Map<NDArray, String> named = new IdentityHashMap<>();

        Arguments(NDManager manager) {
            this(manager, false);
        }

        /** @param bfloat16 matrix-multiply operands are cast to bfloat16 inside the module */
        Arguments(NDManager manager, boolean bfloat16) {
            this.manager = manager;
            this.bfloat16 = bfloat16;
        }

        boolean bfloat16() {
            return bfloat16;
        }

        @Override
        public String operand(NDArray weight) {
            return bfloat16 ? toBfloat16(tensor(weight)) : tensor(weight);
        }

        static String toBfloat16(String expression) {
            return "torch.to(" + expression + ", " + BFLOAT16 + ")";
        }

        static String toFloat32(String expression) {
            return "torch.to(" + expression + ", " + FLOAT32 + ")";
        }

        /** A leading argument under a name of its own ({@code hidden}, {@code mask}). */
        void named(String name, NDArray tensor) {
            tensors.add(tensor);
            names.add(name);
            named.put(tensor, name);
        }

        @Override
        public String tensor(NDArray tensor) {
            return named.computeIfAbsent(tensor, t -> {
                String name = "t" + tensors.size();
                tensors.add(t);
                names.add(name);
                return name;
            });
        }

        @Override
        public NDManager manager() {
            return manager;
        }

        /** The module's source: a {@code forward} over every collected tensor, running {@code body} (indented lines). */
        String module(CharSequence body) {
            return "class Layer(Module):\n  __parameters__ = []\n  __buffers__ = []\n  training : bool\n"
                    + "  def forward(self: __torch__.Layer" + signature() + ") -> Tensor:\n" + body;
        }

        /** {@code name: Tensor, ...} for the signature. */
        private String signature() {
            StringBuilder s = new StringBuilder();
            for (String name : names) {
                s.append(", ").append(name).append(": Tensor");
            }
            return s.toString();
        }
    }
}
