package dev.finetune.trainers.train.output;

import com.google.gson.JsonObject;
import dev.finetune.adapters.io.AtomicFiles;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.knowm.xchart.BitmapEncoder;
import org.knowm.xchart.XYChart;
import org.knowm.xchart.XYChartBuilder;
import org.knowm.xchart.XYSeries;
import org.knowm.xchart.style.markers.SeriesMarkers;

/** {@code loss.png}: training loss per step and evaluation loss per evaluation, drawn from {@code metrics.jsonl}. */
public final class LossCurve {
    public static final String FILE = "loss.png";

    private LossCurve() {}

    /** Redraws the picture from the metrics so far; replaces the previous one atomically. */
    public static Path draw(Path metricsFile, Path outputDir) {
        System.setProperty("java.awt.headless", "true");
        List<JsonObject> lines = MetricsLog.read(metricsFile);
        XYChart chart = new XYChartBuilder().width(800).height(480).title("Loss").xAxisTitle("step")
                .yAxisTitle("loss").build();
        chart.getStyler().setLegendPosition(org.knowm.xchart.style.Styler.LegendPosition.InsideNE);
        addSeries(chart, lines, "loss", false);
        addSeries(chart, lines, "eval_loss", true);
        Path target = outputDir.resolve(FILE);
        try {
            if (!chart.getSeriesMap().isEmpty()) {
                AtomicFiles.write(target, temporary -> {
                    try (OutputStream out = Files.newOutputStream(temporary)) {
                        BitmapEncoder.saveBitmap(chart, out, BitmapEncoder.BitmapFormat.PNG);
                    }
                });
            }
        } catch (IOException e) {
            throw new UncheckedIOException("could not draw " + target, e);
        }
        return target;
    }

    private static void addSeries(XYChart chart, List<JsonObject> lines, String name, boolean markers) {
        List<Double> steps = new ArrayList<>();
        List<Double> values = new ArrayList<>();
        for (JsonObject line : lines) {
            if (line.has(name) && line.has("step") && !line.get(name).isJsonNull()
                    && Double.isFinite(line.get(name).getAsDouble())) {
                steps.add(line.get("step").getAsDouble());
                values.add(line.get(name).getAsDouble());
            }
        }
        if (steps.isEmpty()) {
            return;
        }
        XYSeries series = chart.addSeries(name, steps, values);
        series.setMarker(markers ? SeriesMarkers.CIRCLE : SeriesMarkers.NONE);
    }
}
