package dev.rbridge.cli.adversarial;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;

/** Reads samples from a Prometheus endpoint of a process under attack (its direct memory, its counters). */
public final class Scrape {
    private static final HttpClient HTTP = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private Scrape() {}

    /** The text of {@code http://ADDRESS/metrics}. */
    public static String metrics(String address) throws IOException, InterruptedException {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create("http://" + address + "/metrics"))
                .timeout(Duration.ofSeconds(10)).GET().build(), HttpResponse.BodyHandlers.ofString());
        if (r.statusCode() != 200) {
            throw new IOException("GET /metrics on " + address + ": HTTP " + r.statusCode());
        }
        return r.body();
    }

    /**
     * The sum of the samples of {@code name} whose label set contains every one of {@code labels} (each written as
     * in the exposition, {@code id="direct"}); 0 when none matches.
     */
    public static double sum(String text, String name, String... labels) {
        double total = 0;
        for (String line : text.split("\n")) {
            if (line.startsWith("#") || !(line.startsWith(name + "{") || line.startsWith(name + " "))) {
                continue;
            }
            int space = line.lastIndexOf(' ');
            String series = line.substring(0, space);
            boolean all = true;
            for (String l : labels) {
                all &= series.contains(l);
            }
            if (all) {
                total += Double.parseDouble(line.substring(space + 1));
            }
        }
        return total;
    }

    /** Direct (NIO) buffer memory in use by the process behind {@code address}, from the JVM's own gauge. */
    public static long directMemory(String address) throws IOException, InterruptedException {
        return (long) sum(metrics(address), "jvm_buffer_memory_used_bytes", "id=\"direct\"");
    }
}
