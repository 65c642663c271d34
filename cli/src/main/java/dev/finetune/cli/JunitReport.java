package dev.finetune.cli;

import dev.finetune.cli.RecipeCheck.Located;
import dev.finetune.cli.RecipeCheck.Severity;
import dev.finetune.cli.RecipeCheck.Verdict;
import java.io.PrintWriter;
import java.util.List;
import java.util.stream.Collectors;
import javax.xml.stream.XMLOutputFactory;
import javax.xml.stream.XMLStreamException;
import javax.xml.stream.XMLStreamWriter;

/**
 * For CI dashboards: JUnit XML, the one test report format every CI system displays. One test case per recipe
 * (named by its path): a failure listing every error when invalid, skipped for a fragment, warnings and the memory
 * verdict in its output.
 */
final class JunitReport {
    private JunitReport() {}

    static void write(List<Verdict> verdicts, PrintWriter out) {
        ReportFormat.Summary s = ReportFormat.Summary.of(verdicts);
        try {
            XMLStreamWriter xml = XMLOutputFactory.newFactory().createXMLStreamWriter(out);
            xml.writeStartDocument("UTF-8", "1.0");
            xml.writeCharacters("\n");
            xml.writeStartElement("testsuites");
            xml.writeAttribute("name", "finetune validate");
            counts(xml, s);
            xml.writeCharacters("\n  ");
            xml.writeStartElement("testsuite");
            xml.writeAttribute("name", "finetune validate");
            counts(xml, s);
            for (Verdict v : verdicts) {
                xml.writeCharacters("\n    ");
                testCase(xml, v);
            }
            xml.writeCharacters("\n  ");
            xml.writeEndElement();
            xml.writeCharacters("\n");
            xml.writeEndElement();
            xml.writeCharacters("\n");
            xml.writeEndDocument();
            xml.flush();
        } catch (XMLStreamException e) {
            throw new IllegalStateException("cannot write the JUnit report", e);
        }
    }

    private static void counts(XMLStreamWriter xml, ReportFormat.Summary s) throws XMLStreamException {
        xml.writeAttribute("tests", String.valueOf(s.files() + s.fragments()));
        xml.writeAttribute("failures", String.valueOf(s.invalid()));
        xml.writeAttribute("errors", "0");
        xml.writeAttribute("skipped", String.valueOf(s.fragments()));
    }

    private static void testCase(XMLStreamWriter xml, Verdict v) throws XMLStreamException {
        xml.writeStartElement("testcase");
        xml.writeAttribute("classname", "finetune.validate");
        xml.writeAttribute("name", v.recipe().toString());
        xml.writeAttribute("file", v.recipe().toString());
        if (v.fragment()) {
            xml.writeEmptyElement("skipped");
            xml.writeAttribute("message", "fragment: " + RecipeFiles.FRAGMENT_MARKER);
        } else if (!v.valid()) {
            List<Located> errors = v.findings().stream().filter(f -> f.severity() == Severity.ERROR).toList();
            xml.writeStartElement("failure");
            xml.writeAttribute("type", "invalid recipe");
            xml.writeAttribute("message", errors.size() + " error" + (errors.size() == 1 ? "" : "s") + ": "
                    + errors.get(0).oneLine());
            xml.writeCharacters(errors.stream().map(f -> "error: " + f.oneLine()).collect(Collectors.joining("\n")));
            xml.writeEndElement();
        }
        StringBuilder output = new StringBuilder();
        v.findings().stream().filter(f -> f.severity() == Severity.WARNING)
                .forEach(f -> output.append("warning: ").append(f.oneLine()).append('\n'));
        if (v.memory() != null) {
            output.append(v.memory().describe()).append('\n');
        }
        if (!output.isEmpty()) {
            xml.writeStartElement("system-out");
            xml.writeCharacters(output.toString());
            xml.writeEndElement();
        }
        xml.writeEndElement();
    }
}
