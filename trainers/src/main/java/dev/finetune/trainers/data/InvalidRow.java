package dev.finetune.trainers.data;

/** A dataset row that cannot become an example; the pipeline adds the file and line. */
final class InvalidRow extends RuntimeException {
    private final String hint;

    InvalidRow(String message, String hint) {
        super(message);
        this.hint = hint;
    }

    String hint() {
        return hint;
    }
}
