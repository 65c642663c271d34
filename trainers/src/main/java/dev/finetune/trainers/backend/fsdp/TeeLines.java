package dev.finetune.trainers.backend.fsdp;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One of torchrun's {@code --tee} streams (its stdout or its stderr: a rank's two streams share one header, so they
 * are read apart) put back into whole lines per rank. torchrun tails each rank's log file and
 * prints what {@code readline} returned with a {@code [defaultN]:} header; when it reads while the rank is still
 * writing a line, the first half is printed without a newline and the rest later under a second header, so one
 * line we read can hold the start of one rank's line and then another's (a lost {@code start} event once meant a
 * run with an empty {@code metrics.jsonl}). Every segment but the last of a line we read is such an unfinished half.
 */
final class TeeLines {
    private static final Pattern HEADER = Pattern.compile("\\[default(\\d+)\\]:");

    /** One complete line: {@code localRank} is −1 for torchrun's own lines. */
    record Line(int localRank, String text) {}

    private final Map<Integer, StringBuilder> unfinished = new HashMap<>();

    /** The complete lines {@code raw} finishes, in order. */
    List<Line> accept(String raw) {
        List<Integer> ranks = new ArrayList<>();
        List<String> texts = new ArrayList<>();
        Matcher header = HEADER.matcher(raw);
        int rank = -1;
        int from = 0;
        while (header.find()) {
            if (header.start() > from || rank != -1) {
                ranks.add(rank);
                texts.add(raw.substring(from, header.start()));
            }
            rank = Integer.parseInt(header.group(1));
            from = header.end();
        }
        ranks.add(rank);
        texts.add(raw.substring(from));
        List<Line> complete = new ArrayList<>();
        for (int i = 0; i < texts.size(); i++) {
            StringBuilder pending = unfinished.computeIfAbsent(ranks.get(i), r -> new StringBuilder());
            pending.append(texts.get(i));
            if (i == texts.size() - 1) {
                complete.add(new Line(ranks.get(i), pending.toString()));
                unfinished.remove(ranks.get(i));
            }
        }
        return complete;
    }

    /** What is left unfinished when the output ends: printed as it is rather than lost. */
    List<Line> rest() {
        List<Line> rest = new ArrayList<>();
        unfinished.forEach((rank, text) -> {
            if (!text.isEmpty()) {
                rest.add(new Line(rank, text.toString()));
            }
        });
        unfinished.clear();
        return rest;
    }
}
