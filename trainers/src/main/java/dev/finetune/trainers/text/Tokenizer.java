package dev.finetune.trainers.text;

import ai.djl.huggingface.tokenizers.Encoding;
import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import ai.djl.huggingface.tokenizers.jni.CharSpan;
import com.google.gson.JsonArray;
import com.google.gson.JsonElement;
import com.google.gson.JsonObject;
import com.google.gson.JsonParseException;
import com.google.gson.JsonParser;
import dev.finetune.recipes.BoundedFiles;
import dev.finetune.recipes.UserError;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

/**
 * A model's tokenizer: {@code tokenizer.json} through DJL's HuggingFaceTokenizer, special tokens and chat
 * template from {@code tokenizer_config.json} / {@code special_tokens_map.json} / {@code chat_template.jinja}.
 *
 * <p>DJL's defaults truncate to 512 tokens and pad, silently; both are switched off here, and the
 * post-processor never runs: a BOS is added only when a caller asks for it, so what the ids contain is always
 * visible at the call site.
 */
public final class Tokenizer implements AutoCloseable {
    /** The largest tokenizer.json read (the largest real ones, with 256k-token vocabularies, are about 35 MB). */
    static final long TOKENIZER_JSON_BYTES = 256L << 20;
    private final HuggingFaceTokenizer hf;
    private final Path directory;
    private final SpecialTokens special;
    private final String chatTemplate;

    /** The special tokens named by the model's config, each {@code null}/-1 when the model has none. */
    public record SpecialTokens(String bos, int bosId, String eos, int eosId, String pad, int padId, String unk, int unkId) {}

    private Tokenizer(HuggingFaceTokenizer hf, Path directory, SpecialTokens special, String chatTemplate) {
        this.hf = hf;
        this.directory = directory;
        this.special = special;
        this.chatTemplate = chatTemplate;
    }

    /** Loads the tokenizer files of a Hugging Face model directory. */
    public static Tokenizer load(Path modelDir) {
        Path tokenizerJson = modelDir.resolve("tokenizer.json");
        if (!Files.isRegularFile(tokenizerJson)) {
            throw new UserError(modelDir.toString(), "no tokenizer.json in the model directory",
                    "only fast (tokenizer.json) tokenizers are supported; save the tokenizer with a recent transformers");
        }
        // the native loader reads the whole file: refused unread when it is no regular file or far too large
        BoundedFiles.requireRegular(tokenizerJson, "tokenizer.json");
        try {
            if (Files.size(tokenizerJson) > TOKENIZER_JSON_BYTES) {
                throw new UserError(tokenizerJson.toString(), "tokenizer.json is over "
                        + BoundedFiles.size(TOKENIZER_JSON_BYTES) + ", far more than any tokenizer's",
                        "check that the model folder holds the model's own tokenizer.json");
            }
        } catch (IOException e) {
            throw new UserError(tokenizerJson.toString(), "cannot read: " + e.getMessage(), "check the file's permissions");
        }
        HuggingFaceTokenizer hf;
        try {
            hf = HuggingFaceTokenizer.newInstance(tokenizerJson,
                    Map.of("truncation", "false", "padding", "false", "addSpecialTokens", "false"));
        } catch (IOException | RuntimeException e) {
            throw new UserError(tokenizerJson.toString(), "cannot load the tokenizer: " + e.getMessage(),
                    "check that the file is a complete Hugging Face tokenizer.json", e);
        }
        JsonObject config = readJsonObject(modelDir.resolve("tokenizer_config.json"));
        JsonObject map = readJsonObject(modelDir.resolve("special_tokens_map.json"));
        String bos = tokenText(config, map, "bos_token");
        String eos = tokenText(config, map, "eos_token");
        String pad = tokenText(config, map, "pad_token");
        String unk = tokenText(config, map, "unk_token");
        Tokenizer partial = new Tokenizer(hf, modelDir, null, null);
        SpecialTokens special = new SpecialTokens(bos, partial.singleTokenId(bos), eos, partial.singleTokenId(eos),
                pad, partial.singleTokenId(pad), unk, partial.singleTokenId(unk));
        return new Tokenizer(hf, modelDir, special, chatTemplate(modelDir, config));
    }

    /** The model's vocabulary size once a model is paired with this tokenizer ({@link #limitTo}), else 0. */
    private volatile int modelVocabulary;
    private volatile String modelLabel;

    /**
     * Every id this tokenizer produces from now on must be below {@code vocabSize} (the model's {@code config.json}):
     * a tokenizer that does not belong to the model is refused where the first such text is tokenized, while the
     * data are prepared, never as an index error inside the engine after output_dir was claimed.
     */
    public void limitTo(int vocabSize, String modelLabel) {
        this.modelLabel = modelLabel;
        this.modelVocabulary = vocabSize;
    }

    private void requireInVocabulary(long id, String text) {
        int vocabulary = modelVocabulary;
        if (vocabulary > 0 && (id < 0 || id >= vocabulary)) {
            String piece = hf.decode(new long[] {id}, false);
            throw new Untokenizable(modelLabel, "the tokenizer gives token id " + id + " ('" + piece.replace("\n", "\\n")
                    + "', in \"" + (text.length() > 40 ? text.substring(0, 40) + "…" : text).replace("\n", "\\n")
                    + "\"), beyond the model's vocabulary of " + vocabulary + " (vocab_size in config.json)",
                    "the tokenizer and the weights must come from the same model: check tokenizer_config, or the "
                            + "model folder's tokenizer.json and config.json");
        }
    }

    /**
     * Refuses a NUL character: the text crosses JNI as modified UTF-8, where U+0000 is two bytes the native
     * tokenizer reads as two U+FFFD, so it would silently train on tokens that Hugging Face's tokenizer never makes
     * from this text (there, {@code <0x00>}).
     */
    private static void requireNoNul(String text) {
        int at = text.indexOf('\u0000');
        if (at >= 0) {
            throw new NulCharacter(at);
        }
    }

    /** A text this tokenizer cannot turn into the model's ids; the data pipeline adds the row's file and line. */
    public static class Untokenizable extends UserError {
        Untokenizable(String where, String message, String hint) {
            super(where, message, hint);
        }
    }

    /** A text holding U+0000, which cannot reach the native tokenizer intact. */
    public static final class NulCharacter extends Untokenizable {
        NulCharacter(int at) {
            super("text", "holds a NUL character (\\u0000) at character " + at + ", which cannot reach the tokenizer "
                    + "intact (it would become two U+FFFD replacement characters, not Hugging Face's <0x00>)",
                    "remove the NUL characters from the data (e.g. tr -d '\\000')");
        }
    }

    /** Token ids of {@code text}; special tokens written in the text (e.g. {@code <|im_start|>}) map to their ids. */
    public int[] encode(String text, boolean addBos) {
        requireNoNul(text);
        long[] ids = hf.encode(text, false, false).getIds();
        for (long id : ids) {
            requireInVocabulary(id, text);
        }
        int offset = addBos && special.bosId() >= 0 ? 1 : 0;
        int[] out = new int[ids.length + offset];
        if (offset == 1) {
            out[0] = special.bosId();
        }
        for (int i = 0; i < ids.length; i++) {
            out[i + offset] = Math.toIntExact(ids[i]);
        }
        return out;
    }

    /**
     * Ids and, per token, the range of {@code text} (Java char indices, end exclusive) it was made from; used to
     * tell which tokens belong to which chat message.
     */
    public Encoded encodeWithSpans(String text) {
        requireNoNul(text);
        Encoding encoding = hf.encode(text, false, false);
        long[] ids = encoding.getIds();
        for (long id : ids) {
            requireInVocabulary(id, text);
        }
        CharSpan[] spans = encoding.getCharTokenSpans();
        // The native side counts Unicode code points; Java strings count UTF-16 units.
        int[] charIndexOfCodePoint = charIndexOfCodePoint(text);
        int[] out = new int[ids.length];
        int[] starts = new int[ids.length];
        int[] ends = new int[ids.length];
        for (int i = 0; i < ids.length; i++) {
            out[i] = Math.toIntExact(ids[i]);
            CharSpan span = spans[i];
            if (span == null) {
                starts[i] = -1;
                ends[i] = -1;
            } else {
                starts[i] = charIndexOfCodePoint[Math.min(span.getStart(), charIndexOfCodePoint.length - 1)];
                ends[i] = charIndexOfCodePoint[Math.min(span.getEnd(), charIndexOfCodePoint.length - 1)];
            }
        }
        return new Encoded(out, starts, ends);
    }

    /** Token ids with the source range of each token; {@code start[i] == -1} for tokens with no source text. */
    public record Encoded(int[] ids, int[] start, int[] end) {}

    public String decode(int[] ids, boolean skipSpecial) {
        long[] wide = new long[ids.length];
        for (int i = 0; i < ids.length; i++) {
            wide[i] = ids[i];
        }
        return hf.decode(wide, skipSpecial);
    }

    /** The id {@code token} encodes to when it is exactly one token, else -1. */
    public int singleTokenId(String token) {
        if (token == null || token.isEmpty()) {
            return -1;
        }
        long[] ids = hf.encode(token, false, false).getIds();
        return ids.length == 1 ? Math.toIntExact(ids[0]) : -1;
    }

    public SpecialTokens special() {
        return special;
    }

    /** The model's own chat template ({@code tokenizer_config.json} or {@code chat_template.jinja}), or null. */
    public String chatTemplate() {
        return chatTemplate;
    }

    public Path directory() {
        return directory;
    }

    @Override
    public void close() {
        hf.close();
    }

    private static int[] charIndexOfCodePoint(String text) {
        int codePoints = text.codePointCount(0, text.length());
        int[] index = new int[codePoints + 1];
        int charIndex = 0;
        for (int cp = 0; cp < codePoints; cp++) {
            index[cp] = charIndex;
            charIndex += Character.charCount(text.codePointAt(charIndex));
        }
        index[codePoints] = text.length();
        return index;
    }

    private static JsonObject readJsonObject(Path file) {
        if (!Files.isRegularFile(file)) {
            return new JsonObject();
        }
        try {
            JsonElement element = JsonParser.parseString(BoundedFiles.readText(file, BoundedFiles.CONFIG_BYTES,
                    "the tokenizer's " + file.getFileName()));
            if (!element.isJsonObject()) {
                throw new UserError(file.toString(), "expected a JSON object", "restore the file from the model's source");
            }
            return element.getAsJsonObject();
        } catch (JsonParseException e) {
            throw new UserError(file.toString(), "not valid JSON (" + dev.finetune.recipes.model.ModelConfig.jsonProblem(e)
                    + ")", "restore the file from the model's source", e);
        }
    }

    /** A special token is written either as a string or as an AddedToken object with a {@code content} field. */
    private static String tokenText(JsonObject config, JsonObject map, String key) {
        for (JsonObject source : new JsonObject[] {config, map}) {
            JsonElement value = source.get(key);
            if (value == null || value.isJsonNull()) {
                continue;
            }
            if (value.isJsonPrimitive()) {
                return value.getAsString();
            }
            if (value.isJsonObject() && value.getAsJsonObject().has("content")) {
                return value.getAsJsonObject().get("content").getAsString();
            }
        }
        return null;
    }

    /**
     * Transformers keeps the template in tokenizer_config.json (a string, or a list of named templates of which
     * "default" is the one apply_chat_template uses) or, since 4.43, in a separate chat_template.jinja.
     */
    private static String chatTemplate(Path modelDir, JsonObject config) {
        JsonElement value = config.get("chat_template");
        if (value != null && value.isJsonPrimitive()) {
            return value.getAsString();
        }
        if (value != null && value.isJsonArray()) {
            for (JsonElement named : (JsonArray) value) {
                JsonObject entry = named.getAsJsonObject();
                if ("default".equals(entry.get("name").getAsString())) {
                    return entry.get("template").getAsString();
                }
            }
        }
        Path separate = modelDir.resolve("chat_template.jinja");
        if (Files.isRegularFile(separate)) {
            return BoundedFiles.readText(separate, BoundedFiles.CONFIG_BYTES, "the chat template");
        }
        return null;
    }
}
