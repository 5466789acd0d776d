package dev.rbridge.ops.http;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Paths to handlers, each of one {@link Kind}, which fixes its methods and the {@link AdminRules} it is held to; so a
 * server cannot offer an operation that changes state over GET, or forget the token on one. Patterns are paths whose
 * {@code {name}} segments match any one segment ({@code /clients/{id}/disconnect}); the first match wins.
 */
public final class Routes implements Handler {
    /** What a route does, which decides how it may be called. */
    public enum Kind {
        /** Metrics and probes: GET and HEAD, no rules (exporters are read by scrapers that carry no token). */
        OPEN(Set.of("GET", "HEAD")),
        /** Admin reads: GET and HEAD, browser rules, the token when one is configured. */
        READ(Set.of("GET", "HEAD")),
        /** Admin operations that change state: POST only, browser rules, the token always. */
        MUTATE(Set.of("POST"));

        private final Set<String> methods;

        Kind(Set<String> methods) {
            this.methods = methods;
        }
    }

    private record Route(Kind kind, String pattern, String[] segments, Handler handler) {
        /** The captured parameters, or null when the path does not match. */
        Map<String, String> match(List<String> path) {
            if (path.size() != segments.length) {
                return null;
            }
            Map<String, String> params = new LinkedHashMap<>();
            for (int i = 0; i < segments.length; i++) {
                String s = segments[i];
                if (s.startsWith("{") && s.endsWith("}")) {
                    params.put(s.substring(1, s.length() - 1), path.get(i));
                } else if (!s.equals(path.get(i))) {
                    return null;
                }
            }
            return params;
        }
    }

    private final AdminRules rules;
    private final List<Route> routes;
    private final boolean allOpen;

    private Routes(AdminRules rules, List<Route> routes) {
        this.rules = rules;
        this.routes = List.copyOf(routes);
        this.allOpen = routes.stream().allMatch(r -> r.kind == Kind.OPEN);
    }

    /** @param rules the admin rules for READ and MUTATE routes (null when there are only OPEN ones) */
    public static Builder builder(AdminRules rules) {
        return new Builder(rules);
    }

    @Override
    public HttpResponse handle(HttpRequest request) throws Exception {
        List<String> path = request.segments();
        Route found = null;
        Map<String, String> params = null;
        Set<String> allowed = new TreeSet<>();
        boolean admin = !allOpen;
        for (Route r : routes) {
            Map<String, String> p = r.match(path);
            if (p == null) {
                continue;
            }
            admin = r.kind != Kind.OPEN;
            if (r.kind.methods.contains(request.method())) {
                found = r;
                params = p;
                break;
            }
            allowed.addAll(r.kind.methods);
        }
        if (admin) {
            rules.checkBrowser(request);
        }
        if (found == null) {
            if (allowed.isEmpty()) {
                throw new HttpError(404, Refusal.NOT_FOUND, "no such path: " + AdminRules.printable(request.path())
                        + " (" + String.join(", ", patterns()) + ")");
            }
            String allow = String.join(", ", allowed);
            throw new HttpError(405, Refusal.METHOD, AdminRules.printable(request.method()) + " "
                    + AdminRules.printable(request.path()) + " is not answered; use " + allow
                    + (allowed.contains("POST") ? " (it changes state, so it takes POST and the token)" : ""),
                    new HttpResponse.Header("Allow", allow));
        }
        switch (found.kind) {
            case READ -> rules.checkRead(request);
            case MUTATE -> rules.checkMutate(request);
            case OPEN -> {
            }
        }
        return found.handler.handle(request.withParams(params));
    }

    private List<String> patterns() {
        List<String> out = new ArrayList<>();
        for (Route r : routes) {
            out.add(String.join("|", new TreeSet<>(r.kind.methods)) + " " + r.pattern);
        }
        return out;
    }

    public static final class Builder {
        private final AdminRules rules;
        private final List<Route> routes = new ArrayList<>();

        private Builder(AdminRules rules) {
            this.rules = rules;
        }

        public Builder open(String pattern, Handler handler) {
            return add(Kind.OPEN, pattern, handler);
        }

        public Builder read(String pattern, Handler handler) {
            return add(Kind.READ, pattern, handler);
        }

        public Builder mutate(String pattern, Handler handler) {
            return add(Kind.MUTATE, pattern, handler);
        }

        private Builder add(Kind kind, String pattern, Handler handler) {
            if (kind != Kind.OPEN && rules == null) {
                throw new IllegalStateException("admin routes need AdminRules: " + pattern);
            }
            if (!pattern.startsWith("/")) {
                throw new IllegalArgumentException("a route pattern starts with /: " + pattern);
            }
            String[] segments = Arrays.stream(pattern.split("/")).filter(s -> !s.isEmpty())
                    .toArray(String[]::new);
            routes.add(new Route(kind, pattern, segments, handler));
            return this;
        }

        public Routes build() {
            return new Routes(rules, routes);
        }
    }
}
