package dev.finetune.trainers.hub;

import dev.finetune.recipes.DataFormat;
import dev.finetune.recipes.DatasetSpec;
import dev.finetune.recipes.UserError;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Pattern;
import org.yaml.snakeyaml.LoaderOptions;
import org.yaml.snakeyaml.Yaml;
import org.yaml.snakeyaml.constructor.SafeConstructor;

/**
 * Which files of a dataset repo (or local folder) hold a split, by the conventions {@code datasets.load_dataset}
 * follows for repos of data files: the README's {@code configs:} block when it has one ({@code name} picks the
 * entry), else the hub's {@code data/<split>-NNNNN-of-NNNNN} shards, else split keywords in folder names, else in
 * file names ({@code train}/{@code training}, {@code validation}/{@code valid}/{@code dev}/{@code val},
 * {@code test}/{@code testing}/{@code eval}/{@code evaluation}), else every data file is {@code train}.
 * {@code data_files} in the recipe overrides all of that (its files form the {@code train} split).
 */
final class DataLayout {
    private static final String SEP = "[-._ 0-9]";
    private static final Map<String, List<String>> KEYWORDS = new LinkedHashMap<>();
    private static final Set<String> IGNORED = Set.of("README.md", "config.json", "dataset_info.json",
            "dataset_infos.json", "dataset_dict.json", "state.json");

    static {
        KEYWORDS.put("train", List.of("train", "training"));
        KEYWORDS.put("validation", List.of("validation", "valid", "dev", "val"));
        KEYWORDS.put("test", List.of("test", "testing", "eval", "evaluation"));
    }

    /** The files of one split, and the configuration they came from ({@code null}: the repo has none). */
    record Chosen(List<String> files, String config) {}

    private DataLayout() {}

    /**
     * @param paths every file of the repo or folder, relative and {@code /}-separated
     * @param readme the README's text, or {@code null}
     * @return the files of the spec's split; empty when the repo holds no data file at all (a script dataset:
     *     the caller may try the hub's parquet conversion)
     */
    static Chosen choose(List<String> paths, String readme, DatasetSpec spec, String label) {
        List<String> data = paths.stream().filter(DataLayout::isData).sorted().toList();
        String split = spec.split() == null ? "train" : spec.split();
        List<String> patterns = spec.source().dataFiles();
        if (!patterns.isEmpty()) {
            // named files are read whatever their suffix says (ds_type then gives the format)
            List<String> files = matching(paths.stream().filter(p -> !hidden(p)).toList(), patterns);
            if (files.isEmpty()) {
                throw new UserError(spec.where(), "data_files " + patterns + " match no file of " + label,
                        "name files as the repo holds them, e.g. data/train-00000-of-00001.parquet (globs allowed)");
            }
            requireSplit(Map.of("train", files), split, spec, label);
            return new Chosen(files, null);
        }
        Map<String, Map<String, List<String>>> configs = configs(readme, label, spec);
        if (!configs.isEmpty()) {
            String name = spec.source().name();
            String config = name != null ? name : defaultConfig(configs, readme);
            Map<String, List<String>> splits = configs.get(config);
            if (splits == null) {
                throw new UserError(spec.where(), (name == null ? "no default configuration" : "no configuration '" + name + "'")
                        + " in " + label + "; it has " + String.join(", ", configs.keySet()),
                        "set name: to one of them");
            }
            Map<String, List<String>> files = new LinkedHashMap<>();
            splits.forEach((s, globs) -> files.put(s, matching(data, globs)));
            requireSplit(files, split, spec, label);
            return new Chosen(files.get(split), config);
        }
        if (data.isEmpty()) {
            return new Chosen(List.of(), null);
        }
        List<String> scope = data;
        String name = spec.source().name();
        if (name != null && !name.equals("default")) {
            scope = data.stream().filter(p -> p.startsWith(name + "/")).toList();
            if (scope.isEmpty()) {
                throw new UserError(spec.where(), "no configuration '" + name + "' in " + label + ": it has no README "
                        + "configs: block and no folder of that name", "remove name:, or set data_files:");
            }
        }
        Map<String, List<String>> splits = splits(scope);
        requireSplit(splits, split, spec, label);
        return new Chosen(splits.get(split), name);
    }

    /** The split → files map of the naming conventions (no README configs). */
    static Map<String, List<String>> splits(List<String> files) {
        Map<String, List<String>> out = new LinkedHashMap<>();
        Pattern sharded = Pattern.compile("data/([A-Za-z0-9_]+)-[0-9]{5}-of-[0-9]{5}[^/]*\\.[^/]+");
        for (String f : files) {
            var m = sharded.matcher(f);
            if (m.matches()) {
                out.computeIfAbsent(m.group(1), s -> new ArrayList<>()).add(f);
            }
        }
        if (!out.isEmpty()) {
            return order(out);
        }
        for (boolean inDir : new boolean[] {true, false}) {
            for (var e : KEYWORDS.entrySet()) {
                List<String> patterns = new ArrayList<>();
                for (String k : e.getValue()) {
                    if (inDir) {
                        patterns.addAll(List.of("**/" + k + "/**", "**/" + k + SEP + "*/**", "**/*" + SEP + k + "/**",
                                "**/*" + SEP + k + SEP + "*/**"));
                    } else {
                        patterns.addAll(List.of("**/" + k + SEP + "*", "**/*" + SEP + k + SEP + "*"));
                    }
                }
                List<String> matched = matching(files, patterns);
                if (!matched.isEmpty()) {
                    out.put(e.getKey(), matched);
                }
            }
            if (!out.isEmpty()) {
                return out;
            }
        }
        out.put("train", files);
        return out;
    }

    private static Map<String, List<String>> order(Map<String, List<String>> splits) {
        Map<String, List<String>> out = new LinkedHashMap<>();
        for (String s : KEYWORDS.keySet()) {
            if (splits.containsKey(s)) {
                out.put(s, splits.get(s));
            }
        }
        splits.keySet().stream().sorted().filter(s -> !out.containsKey(s)).forEach(s -> out.put(s, splits.get(s)));
        return out;
    }

    private static void requireSplit(Map<String, List<String>> splits, String split, DatasetSpec spec, String label) {
        List<String> files = splits.get(split);
        if (files == null || files.isEmpty()) {
            List<String> have = splits.entrySet().stream().filter(e -> !e.getValue().isEmpty()).map(Map.Entry::getKey).toList();
            throw new UserError(spec.where(), "no split '" + split + "' in " + label + "; it has "
                    + (have.isEmpty() ? "no data file" : String.join(", ", have)), have.isEmpty()
                    ? "check the files and data_files:" : "set split: to one of them");
        }
    }

    /**
     * The README's {@code configs:} block: configuration name → split → file globs ({@code data_dir} applied).
     * Empty when there is no README, no front matter or no such block.
     */
    @SuppressWarnings("unchecked")
    static Map<String, Map<String, List<String>>> configs(String readme, String label, DatasetSpec spec) {
        Map<String, Map<String, List<String>>> out = new LinkedHashMap<>();
        Object block = frontMatter(readme).get("configs");
        if (!(block instanceof List<?> entries)) {
            return out;
        }
        for (Object entry : entries) {
            if (!(entry instanceof Map<?, ?> c) || !(c.get("config_name") instanceof String name)) {
                continue;
            }
            String dir = c.get("data_dir") instanceof String d ? d.replaceAll("/+$", "") + "/" : "";
            Map<String, List<String>> splits = new LinkedHashMap<>();
            Object files = c.get("data_files");
            if (files instanceof String s) {
                splits.put("train", List.of(dir + s));
            } else if (files instanceof List<?> list) {
                for (Object item : list) {
                    if (item instanceof String s) {
                        splits.computeIfAbsent("train", k -> new ArrayList<>()).add(dir + s);
                    } else if (item instanceof Map<?, ?> m && m.get("split") != null) {
                        Object path = m.get("path");
                        List<String> globs = splits.computeIfAbsent(String.valueOf(m.get("split")), k -> new ArrayList<>());
                        if (path instanceof String p) {
                            globs.add(dir + p);
                        } else if (path instanceof List<?> ps) {
                            ps.forEach(p -> globs.add(dir + p));
                        }
                    }
                }
            } else if (files instanceof Map<?, ?> m) {
                m.forEach((split, path) -> {
                    List<String> globs = splits.computeIfAbsent(String.valueOf(split), k -> new ArrayList<>());
                    if (path instanceof List<?> ps) {
                        ps.forEach(p -> globs.add(dir + p));
                    } else {
                        globs.add(dir + path);
                    }
                });
            } else {
                splits.put("train", List.of(dir.isEmpty() ? "**" : dir + "**"));
            }
            out.put(name, splits);
        }
        return out;
    }

    @SuppressWarnings("unchecked")
    private static String defaultConfig(Map<String, Map<String, List<String>>> configs, String readme) {
        Object block = frontMatter(readme).get("configs");
        for (Object entry : (List<Object>) block) {
            if (entry instanceof Map<?, ?> c && Boolean.TRUE.equals(c.get("default")) && c.get("config_name") instanceof String n) {
                return n;
            }
        }
        if (configs.containsKey("default")) {
            return "default";
        }
        return configs.size() == 1 ? configs.keySet().iterator().next() : null;
    }

    /** The YAML between the README's leading {@code ---} lines, read safely; empty when absent or unreadable. */
    private static Map<String, Object> frontMatter(String readme) {
        if (readme == null || !readme.startsWith("---")) {
            return Map.of();
        }
        int end = readme.indexOf("\n---", 3);
        if (end < 0) {
            return Map.of();
        }
        try {
            Object yaml = new Yaml(new SafeConstructor(new LoaderOptions())).load(readme.substring(3, end));
            if (yaml instanceof Map<?, ?> m) {
                @SuppressWarnings("unchecked")
                Map<String, Object> typed = (Map<String, Object>) m;
                return typed;
            }
        } catch (RuntimeException e) {
            return Map.of(); // a README whose card is not YAML has no configs: the conventions apply
        }
        return Map.of();
    }

    /** Files matching any of the globs (fsspec's: {@code *} within a folder, {@code **} across folders). */
    static List<String> matching(List<String> files, List<String> globs) {
        List<Pattern> patterns = globs.stream().map(DataLayout::glob).toList();
        return files.stream().filter(f -> patterns.stream().anyMatch(p -> p.matcher(f).matches())).sorted().toList();
    }

    static Pattern glob(String glob) {
        String g = glob.startsWith("./") ? glob.substring(2) : glob;
        StringBuilder re = new StringBuilder();
        for (int i = 0; i < g.length(); i++) {
            char c = g.charAt(i);
            if (c == '*' && i + 1 < g.length() && g.charAt(i + 1) == '*') {
                boolean slashAfter = i + 2 < g.length() && g.charAt(i + 2) == '/';
                re.append(slashAfter ? "(?:.*/)?" : ".*");
                i += slashAfter ? 2 : 1;
            } else if (c == '*') {
                re.append("[^/]*");
            } else if (c == '?') {
                re.append("[^/]");
            } else if (c == '[') {
                int close = g.indexOf(']', i + 1);
                if (close < 0) {
                    re.append("\\[");
                } else {
                    String cls = g.substring(i + 1, close);
                    re.append('[').append(cls.startsWith("!") ? "^" + cls.substring(1) : cls).append(']');
                    i = close;
                }
            } else if (c == '/' && g.startsWith("/**", i)) {
                re.append("(?:/.*)?");
                i += 2;
            } else {
                re.append(Pattern.quote(String.valueOf(c)));
            }
        }
        return Pattern.compile(re.toString());
    }

    private static boolean hidden(String path) {
        for (String part : path.split("/")) {
            if (part.startsWith(".") || part.startsWith("__")) {
                return true;
            }
        }
        return false;
    }

    /** A file the layout may pick: not hidden, not metadata, of a format we read. */
    private static boolean isData(String path) {
        String name = path.substring(path.lastIndexOf('/') + 1);
        if (hidden(path) || IGNORED.contains(name) || name.endsWith(".md") || name.endsWith(".py")) {
            return false;
        }
        return DataFormat.ofFile(name) != null;
    }
}
