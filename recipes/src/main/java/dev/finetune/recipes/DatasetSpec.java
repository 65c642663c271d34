package dev.finetune.recipes;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;

/**
 * One entry of {@code datasets:} (or {@code test_datasets:}), with Axolotl's meanings.
 *
 * @param path the local data file or folder, resolved against the directory of the recipe file that named it;
 *     {@code null} when the dataset is a hub dataset (see {@code remote})
 * @param type how the rows read; {@code null} for pre-tokenized rows ({@code input_ids}, {@code labels})
 * @param field {@code completion}: the text field (never null: the key table's default when not written)
 * @param fieldMessages the message list field, or {@code null}: {@code chat_template} reads {@code messages}, preference
 *     and prompt rows look for theirs in each row
 * @param messagePropertyMappings {@code chat_template}: our name → dataset name, e.g. {@code role → from}
 * @param rolesToTrain {@code chat_template}: roles whose tokens carry loss (the key table's default when not written)
 * @param trainOnEos {@code chat_template}: which end-of-turn tokens carry loss (the key table's default when not written)
 * @param chatTemplate per-dataset template name overriding the recipe's {@code chat_template}, or {@code null}
 * @param where the recipe location of this entry ({@code recipe.yaml:12:5}) for error messages
 * @param remote a hub dataset id or URL as written, or {@code null} when {@code path} is local
 * @param split the split to read ({@code train} when not written)
 * @param fieldChosen preference types: the chosen-answer field, or {@code null} for the type's own default
 * @param fieldRejected preference types: the rejected-answer field, or {@code null} for the type's own default
 * @param chat how conversation rows become turns and labels (roles, system and reasoning fields, per-turn flags)
 * @param source {@code name}, {@code data_files}, {@code ds_type}, {@code revision}, {@code shards}, {@code shards_idx}
 */
public record DatasetSpec(
        Path path,
        DatasetType type,
        String field,
        String fieldMessages,
        Map<String, String> messagePropertyMappings,
        List<String> rolesToTrain,
        TrainOnEos trainOnEos,
        String chatTemplate,
        String where,
        String remote,
        String split,
        String fieldChosen,
        String fieldRejected,
        ChatOptions chat,
        DatasetSource source) {

    /** A dataset with Axolotl's conversation defaults that names no source key beyond {@code path} and {@code split}. */
    public DatasetSpec(Path path, DatasetType type, String field, String fieldMessages,
            Map<String, String> messagePropertyMappings, List<String> rolesToTrain, TrainOnEos trainOnEos,
            String chatTemplate, String where, String remote, String split, String fieldChosen, String fieldRejected) {
        this(path, type, field, fieldMessages, messagePropertyMappings, rolesToTrain, trainOnEos, chatTemplate, where,
                remote, split, fieldChosen, fieldRejected, ChatOptions.DEFAULTS, DatasetSource.DEFAULT);
    }

    public boolean local() {
        return path != null;
    }
}
