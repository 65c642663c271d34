package dev.finetune.recipes;

import java.util.Locale;

/**
 * The data-file formats a dataset may be stored in: Axolotl's {@code ds_type} values (the builders of
 * {@code datasets.load_dataset}), inferred from the file name when {@code ds_type} is absent.
 */
public enum DataFormat {
    JSON("json", ".jsonl", ".json", ".jsonl.gz", ".json.gz"),
    CSV("csv", ".csv", ".tsv", ".csv.gz", ".tsv.gz"),
    PARQUET("parquet", ".parquet"),
    ARROW("arrow", ".arrow"),
    TEXT("text", ".txt", ".txt.gz");

    private final String key;
    private final String[] suffixes;

    DataFormat(String key, String... suffixes) {
        this.key = key;
        this.suffixes = suffixes;
    }

    /** The {@code ds_type} value. */
    public String key() {
        return key;
    }

    /** The format a file name says, or {@code null} when it names none of these. */
    public static DataFormat ofFile(String name) {
        String lower = name.toLowerCase(Locale.ROOT);
        for (DataFormat f : values()) {
            for (String s : f.suffixes) {
                if (lower.endsWith(s)) {
                    return f;
                }
            }
        }
        return null;
    }
}
