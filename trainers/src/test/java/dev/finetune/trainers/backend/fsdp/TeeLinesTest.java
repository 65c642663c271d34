package dev.finetune.trainers.backend.fsdp;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** torchrun's tee output split mid-line, as its tail threads print it when they read a half-written line. */
class TeeLinesTest {

    @Test
    void wholeLinesKeepTheirRankAndTorchrunsOwnLinesHaveNone() {
        TeeLines tee = new TeeLines();
        assertEquals(List.of(new TeeLines.Line(1, "{\"event\": \"done\"}")), tee.accept("[default1]:{\"event\": \"done\"}"));
        assertEquals(List.of(new TeeLines.Line(-1, "W1201 torchrun says")), tee.accept("W1201 torchrun says"));
        assertEquals(List.of(new TeeLines.Line(0, "")), tee.accept("[default0]:"));
    }

    @Test
    void aLineCutInHalfIsJoinedAcrossOtherRanksLines() {
        TeeLines tee = new TeeLines();
        List<TeeLines.Line> lines = new ArrayList<>();
        lines.addAll(tee.accept("[default0]:{\"event\": \"sta[default1]:{\"event\": \"rank\", \"pid\": 7}"));
        lines.addAll(tee.accept("[default1]:warning: slow[default1]: disk"));
        lines.addAll(tee.accept("[default0]:rt\", \"step\": 0}"));
        assertEquals(List.of(new TeeLines.Line(1, "{\"event\": \"rank\", \"pid\": 7}"),
                new TeeLines.Line(1, "warning: slow disk"),
                new TeeLines.Line(0, "{\"event\": \"start\", \"step\": 0}")), lines);
    }

    @Test
    void whatIsStillUnfinishedWhenTheOutputEndsIsKept() {
        TeeLines tee = new TeeLines();
        assertEquals(List.of(new TeeLines.Line(1, "x")), tee.accept("[default0]:Traceback (most[default1]:x"));
        assertEquals(List.of(new TeeLines.Line(0, "Traceback (most")), tee.rest());
        assertEquals(List.of(), tee.rest());
    }
}
