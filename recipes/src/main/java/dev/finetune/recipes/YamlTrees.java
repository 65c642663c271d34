package dev.finetune.recipes;

import dev.finetune.recipes.YamlNode.Entry;
import dev.finetune.recipes.YamlNode.Mapping;
import dev.finetune.recipes.YamlNode.Scalar;
import dev.finetune.recipes.YamlNode.Sequence;
import dev.finetune.recipes.YamlNode.Where;
import java.io.IOException;
import java.io.Reader;
import java.io.StringReader;
import java.math.BigInteger;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;
import org.yaml.snakeyaml.error.Mark;
import org.yaml.snakeyaml.error.MarkedYAMLException;
import org.yaml.snakeyaml.error.YAMLException;
import org.yaml.snakeyaml.nodes.MappingNode;
import org.yaml.snakeyaml.nodes.Node;
import org.yaml.snakeyaml.nodes.NodeTuple;
import org.yaml.snakeyaml.nodes.ScalarNode;
import org.yaml.snakeyaml.nodes.SequenceNode;
import org.yaml.snakeyaml.nodes.Tag;

/**
 * One recipe file as a {@link YamlNode} tree: safe YAML only, bounded in size, depth and alias expansion, every
 * node located ({@code file:line:col}) for messages.
 *
 * <p>SnakeYAML's compose API is used instead of {@code load} so nothing is ever instantiated from a tag, and
 * every node keeps its start mark for messages.
 */
final class YamlTrees {
    private static final Set<Tag> PLAIN_TAGS =
            Set.of(Tag.STR, Tag.INT, Tag.FLOAT, Tag.BOOL, Tag.NULL, Tag.MAP, Tag.SEQ, Tag.TIMESTAMP);
    private static final int MAX_DEPTH = 64;
    private static final int MAX_NODES = 200_000;
    private static final long MAX_FILE_BYTES = 4L << 20;

    private YamlTrees() {}

    /** Parses one file on its own (no {@code base:} processing). */
    static Mapping parseFile(Path file, String label) {
        String text = readText(file, label);
        Where top = new Where(label + ":1:1", dirOf(file));
        YamlNode node = parse(text, label, dirOf(file), top);
        if (node == null) {
            throw new UserError(label + ":1:1", "the recipe file is empty",
                    "start from a shipped recipe: finetune configs cp quickstart my-recipe.yaml");
        }
        if (!(node instanceof Mapping mapping)) {
            throw new UserError(node.where().label(),
                    "a recipe must be a mapping of keys to values, but this file holds " + YamlNode.describe(node),
                    "write one 'key: value' per line, e.g. 'base_model: NousResearch/Llama-3.2-1B'");
        }
        return mapping;
    }


    /** Whether a file name is a YAML file's. */
    static boolean yamlName(Path file) {
        String name = file.getFileName() == null ? "" : file.getFileName().toString().toLowerCase(java.util.Locale.ROOT);
        return name.endsWith(".yaml") || name.endsWith(".yml");
    }

    /**
     * Refuses, without opening it, a path that reaches through a symbolic link a file whose own name is not a YAML
     * file's: a link is judged by its target ({@code common.yaml -> /etc/shadow} would otherwise be read and quoted in
     * messages).
     */
    static void requireYamlTarget(Path file, String label) {
        Path target;
        try {
            target = file.toRealPath();
        } catch (IOException e) {
            return; // missing: reported where it is read
        }
        // a name given plainly (a recipe without extension, reached through a linked folder) stays the user's call
        if (!yamlName(target) && !target.getFileName().equals(file.toAbsolutePath().normalize().getFileName())
                && !Files.isDirectory(target)) {
            throw new UserError(label, "is a link to " + target + ", which is not a .yaml or .yml file (it was not "
                    + "opened)", "link to a recipe file, or name the recipe itself");
        }
    }

    private static String readText(Path file, String label) {
        try {
            requireYamlTarget(file, label);
            if (Files.isDirectory(file)) {
                throw new UserError(label, "is a directory, not a recipe file", "name the .yaml file inside it");
            }
            if (Files.exists(file) && !Files.isRegularFile(file)) {
                // a device or a pipe (/dev/zero, /dev/stdin) has no size to check and may never end
                throw new UserError(label, "is not a regular file (a device or a pipe), so it cannot be a recipe",
                        "save the recipe to a .yaml file and pass that");
            }
            byte[] bytes;
            try (java.io.InputStream in = Files.newInputStream(file)) {
                // bounded even if the file grows while it is read
                bytes = in.readNBytes((int) MAX_FILE_BYTES + 1);
            }
            if (bytes.length > MAX_FILE_BYTES) {
                throw new UserError(label, "is more than " + MAX_FILE_BYTES + " bytes, far too large for a recipe",
                        "a recipe is a short YAML file; check the path");
            }
            return StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(java.nio.ByteBuffer.wrap(bytes))
                    .toString();
        } catch (NoSuchFileException e) {
            throw new UserError(label, "no such file", "check the path; 'finetune configs ls' lists the shipped recipes");
        } catch (CharacterCodingException e) {
            throw new UserError(label, "is not a text file (not valid UTF-8), so it cannot be a YAML recipe",
                    "pass the recipe's .yaml file");
        } catch (IOException e) {
            throw new UserError(label, "cannot be read: " + e.getMessage(), "check the file's permissions");
        }
    }

    static YamlNode parse(String text, String label, Path dir, Where fallback) {
        LoaderOptions options = new LoaderOptions();
        options.setMaxAliasesForCollections(100);
        options.setNestingDepthLimit(MAX_DEPTH);
        options.setCodePointLimit((int) MAX_FILE_BYTES);
        Yaml yaml = new Yaml(new SafeConstructor(options));
        Node root;
        try (Reader reader = new StringReader(text)) {
            root = yaml.compose(reader);
        } catch (MarkedYAMLException e) {
            Mark mark = e.getProblemMark() != null ? e.getProblemMark() : e.getContextMark();
            String where = mark == null ? fallback.label() : at(label, mark);
            String problem = e.getProblem() == null ? e.getContext() : e.getProblem();
            Mark context = e.getContextMark();
            if (e.getProblem() != null && context != null && mark != null && context.getLine() != mark.getLine()) {
                problem += " (" + oneLine(e.getContext()) + " at line " + (context.getLine() + 1) + ")";
            }
            throw new UserError(where, "not valid YAML: " + oneLine(problem),
                    "fix the YAML syntax at that position (indentation, an unclosed quote or bracket, a tab)");
        } catch (YAMLException e) {
            throw new UserError(fallback.label(), "not valid YAML: " + oneLine(e.getMessage()),
                    "a recipe is a YAML mapping of 'key: value' lines");
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
        if (root == null) {
            return null;
        }
        return convert(root, label, dir, 0, new IdentityHashMap<>(), new int[] {0});
    }

    /** @param budget nodes created so far: aliases can make a short file expand into millions of values */
    private static YamlNode convert(Node node, String label, Path dir, int depth, IdentityHashMap<Node, Boolean> open,
                                    int[] budget) {
        Where where = new Where(at(label, node.getStartMark()), dir);
        if (++budget[0] > MAX_NODES) {
            throw new TooLarge();
        }
        if (depth > MAX_DEPTH || open.containsKey(node)) {
            throw new UserError(where.label(), "the YAML nests too deeply or refers to itself through an alias",
                    "write the value out instead of using a recursive alias");
        }
        Tag tag = node.getTag();
        if (!PLAIN_TAGS.contains(tag)) {
            throw new UserError(where.label(), "the YAML tag '" + shortTag(tag) + "' is not allowed: recipes hold "
                    + "plain values only, and tags that name classes are never instantiated",
                    "remove the tag '" + shortTag(tag) + "' and write the plain value");
        }
        open.put(node, Boolean.TRUE);
        try {
            if (node instanceof MappingNode m) {
                return convertMapping(m, label, dir, depth, open, where, budget);
            }
            if (node instanceof SequenceNode s) {
                List<YamlNode> items = new ArrayList<>();
                for (Node item : s.getValue()) {
                    items.add(convert(item, label, dir, depth + 1, open, budget));
                }
                return new Sequence(items, where);
            }
            ScalarNode s = (ScalarNode) node;
            return new Scalar(scalarValue(s), s.getValue(), where);
        } finally {
            open.remove(node);
        }
    }

    private static Mapping convertMapping(MappingNode m, String label, Path dir, int depth,
                                          IdentityHashMap<Node, Boolean> open, Where where, int[] budget) {
        Map<String, Entry> own = new LinkedHashMap<>();
        List<Mapping> merged = new ArrayList<>();
        for (NodeTuple tuple : m.getValue()) {
            Node keyNode = tuple.getKeyNode();
            Where keyWhere = new Where(at(label, keyNode.getStartMark()), dir);
            if (keyNode.getTag().equals(Tag.MERGE)) {
                YamlNode source = convert(tuple.getValueNode(), label, dir, depth + 1, open, budget);
                List<YamlNode> sources = source instanceof Sequence seq ? seq.items() : List.of(source);
                for (YamlNode one : sources) {
                    if (!(one instanceof Mapping mm)) {
                        throw new UserError(one.where().label(), "a '<<' merge key needs a mapping (an alias such as *defaults)",
                                "write '<<: *name' where '&name' marks a mapping");
                    }
                    merged.add(mm);
                }
                continue;
            }
            if (!(keyNode instanceof ScalarNode keyScalar)) {
                throw new UserError(keyWhere.label(), "a key must be a plain name, not a list or mapping",
                        "write 'name: value'");
            }
            if (!PLAIN_TAGS.contains(keyNode.getTag())) {
                throw new UserError(keyWhere.label(), "the YAML tag '" + shortTag(keyNode.getTag())
                        + "' is not allowed on a key", "remove the tag");
            }
            String key = keyScalar.getValue();
            if (own.containsKey(key)) {
                throw new UserError(keyWhere.label(), "the key '" + key + "' appears twice in this mapping (first at "
                        + own.get(key).keyWhere() + ")", "keep only one of them");
            }
            YamlNode value;
            try {
                value = convert(tuple.getValueNode(), label, dir, depth + 1, open, budget);
            } catch (TooLarge e) {
                if (depth > 0) {
                    throw e;
                }
                // Blame the top-level key whose value explodes; the node deep inside where counting stopped means nothing.
                throw new UserError(keyWhere.label(), "'" + key + "' expands to more than " + MAX_NODES
                        + " values through aliases", "a recipe is a short list of settings; write the values out instead of nesting aliases");
            }
            own.put(key, new Entry(key, keyWhere, value));
        }
        if (merged.isEmpty()) {
            return new Mapping(own, where);
        }
        Map<String, Entry> result = new LinkedHashMap<>();
        for (Mapping mm : merged) {
            for (Entry e : mm.entries().values()) {
                result.putIfAbsent(e.key(), e);
            }
        }
        result.keySet().removeAll(own.keySet());
        Map<String, Entry> ordered = new LinkedHashMap<>(own);
        ordered.putAll(result);
        return new Mapping(ordered, where);
    }

    /** Thrown while converting when aliases multiply the tree; turned into a located error at the top-level key. */
    private static final class TooLarge extends RuntimeException {
        TooLarge() {
            super(null, null, false, false);
        }
    }

    /** YAML 1.1 scalar meanings, as PyYAML (and so Axolotl) applies them. */
    private static Object scalarValue(ScalarNode s) {
        String v = s.getValue();
        Tag tag = s.getTag();
        if (tag.equals(Tag.NULL)) {
            return null;
        }
        if (tag.equals(Tag.BOOL)) {
            return switch (v.toLowerCase(java.util.Locale.ROOT)) {
                case "true", "yes", "on", "y" -> Boolean.TRUE;
                default -> Boolean.FALSE;
            };
        }
        if (tag.equals(Tag.INT)) {
            return parseInteger(v);
        }
        if (tag.equals(Tag.FLOAT)) {
            String t = v.replace("_", "").toLowerCase(java.util.Locale.ROOT);
            if (t.endsWith(".inf")) {
                return t.startsWith("-") ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
            }
            if (t.equals(".nan")) {
                return Double.NaN;
            }
            try {
                return Double.parseDouble(t);
            } catch (NumberFormatException e) {
                return v;
            }
        }
        return v;
    }

    private static Object parseInteger(String text) {
        String t = text.replace("_", "");
        int sign = 1;
        if (t.startsWith("-") || t.startsWith("+")) {
            sign = t.startsWith("-") ? -1 : 1;
            t = t.substring(1);
        }
        try {
            BigInteger n;
            if (t.startsWith("0x")) {
                n = new BigInteger(t.substring(2), 16);
            } else if (t.startsWith("0b")) {
                n = new BigInteger(t.substring(2), 2);
            } else if (t.length() > 1 && t.startsWith("0") && t.chars().allMatch(Character::isDigit)) {
                n = new BigInteger(t, 8);
            } else if (t.contains(":")) {
                n = BigInteger.ZERO;
                for (String part : t.split(":")) {
                    n = n.multiply(BigInteger.valueOf(60)).add(new BigInteger(part));
                }
            } else {
                n = new BigInteger(t);
            }
            n = sign < 0 ? n.negate() : n;
            return n.bitLength() < 64 ? (Object) n.longValue() : n;
        } catch (NumberFormatException e) {
            return text;
        }
    }

    private static String at(String label, Mark mark) {
        return label + ":" + (mark.getLine() + 1) + ":" + (mark.getColumn() + 1);
    }

    private static String shortTag(Tag tag) {
        String v = tag.getValue();
        return v.startsWith(Tag.PREFIX) ? "!!" + v.substring(Tag.PREFIX.length()) : v;
    }

    private static String oneLine(String s) {
        return s == null ? "" : s.replaceAll("\\s+", " ").trim();
    }

    static Path dirOf(Path file) {
        Path parent = file.toAbsolutePath().normalize().getParent();
        return parent == null ? Path.of("/") : parent;
    }

}
