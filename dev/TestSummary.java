import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import javax.xml.parsers.DocumentBuilderFactory;
import org.w3c.dom.Element;

/**
 * The closing line of ./test: "tests: N passed, N failed, N skipped" over every module's Surefire reports of this run.
 * Run as a source file by the JDK that ran the build (java dev/TestSummary.java ROOT), so ./test needs nothing but a
 * JDK. Exits 1 when a test failed, a report cannot be read, or no test ran.
 */
public class TestSummary {
    public static void main(String[] args) throws Exception {
        Path root = Path.of(args[0]);
        long tests = 0, failed = 0, skipped = 0;
        var factory = DocumentBuilderFactory.newInstance();
        factory.setFeature("http://apache.org/xml/features/disallow-doctype-decl", true);
        try (DirectoryStream<Path> modules = Files.newDirectoryStream(root)) {
            for (Path module : modules) {
                Path reports = module.resolve("target/surefire-reports");
                if (!Files.isDirectory(reports)) {
                    continue;
                }
                try (DirectoryStream<Path> files = Files.newDirectoryStream(reports, "TEST-*.xml")) {
                    for (Path report : files) {
                        try {
                            var builder = factory.newDocumentBuilder();
                            builder.setErrorHandler(new org.xml.sax.helpers.DefaultHandler()); // errors throw, quietly
                            Element suite = builder.parse(report.toFile()).getDocumentElement();
                            tests += count(suite, "tests");
                            failed += count(suite, "failures") + count(suite, "errors");
                            skipped += count(suite, "skipped");
                        } catch (IOException | org.xml.sax.SAXException e) {
                            System.err.println("test: unreadable report " + report + ": " + e.getMessage());
                            tests++; // counted as a test that failed
                            failed++;
                        }
                    }
                }
            }
        }
        System.out.printf("tests: %d passed, %d failed, %d skipped%n", tests - failed - skipped, failed, skipped);
        System.exit(failed > 0 || tests == 0 ? 1 : 0);
    }

    private static long count(Element suite, String attribute) {
        String v = suite.getAttribute(attribute);
        return v.isEmpty() ? 0 : Long.parseLong(v);
    }
}
