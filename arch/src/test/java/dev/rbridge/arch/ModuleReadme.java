package dev.rbridge.arch;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * What a module's README.md lets it import of the other modules: the line {@code May import: a, b} (or
 * {@code May import: nothing}) for all its code, and optionally {@code Its tests may also import: c} for its tests.
 * Each name is a module's folder, as the root pom's {@code <modules>} lists it.
 */
record ModuleReadme(String module, Set<String> mayImport, Set<String> testsMayAlsoImport) {
    static final String MAY_IMPORT = "May import:";
    static final String TESTS_MAY_ALSO_IMPORT = "Its tests may also import:";

    /** {@code module}'s README.md under {@code root}; IllegalStateException without the line, or naming no module. */
    static ModuleReadme read(Path root, String module, List<String> modules) throws IOException {
        Path readme = root.resolve(module).resolve("README.md");
        if (!Files.isRegularFile(readme)) {
            throw new IllegalStateException(module + " has no README.md saying what it may import");
        }
        List<String> lines = Files.readAllLines(readme);
        Set<String> mayImport = names(module, lines, MAY_IMPORT, modules);
        if (mayImport == null) {
            throw new IllegalStateException(module + "/README.md has no line starting \"" + MAY_IMPORT
                    + "\" (the modules it may import, or \"nothing\")");
        }
        Set<String> testsMayAlsoImport = names(module, lines, TESTS_MAY_ALSO_IMPORT, modules);
        return new ModuleReadme(module, mayImport, testsMayAlsoImport == null ? Set.of() : testsMayAlsoImport);
    }

    /** The names on the one line starting with {@code prefix}, or null when there is none. */
    private static Set<String> names(String module, List<String> lines, String prefix, List<String> modules) {
        List<String> found = lines.stream().filter(l -> l.startsWith(prefix)).toList();
        if (found.size() > 1) {
            throw new IllegalStateException(module + "/README.md has " + found.size() + " lines starting \"" + prefix
                    + "\"; one says it");
        }
        if (found.isEmpty()) {
            return null;
        }
        String list = found.getFirst().substring(prefix.length()).strip();
        if (list.equals("nothing")) {
            return Set.of();
        }
        LinkedHashSet<String> names = new LinkedHashSet<>();
        for (String name : Arrays.stream(list.split(",")).map(String::strip).toList()) {
            if (!modules.contains(name) || name.equals(module)) {
                throw new IllegalStateException(module + "/README.md: \"" + found.getFirst() + "\": '" + name
                        + "' is not another module of the root pom.xml " + modules);
            }
            names.add(name);
        }
        return Collections.unmodifiableSequencedSet(names);
    }

    /** Whether code of this module (its tests if {@code fromTest}) may use classes of {@code other}. */
    boolean allows(String other, boolean fromTest) {
        return mayImport.contains(other) || fromTest && testsMayAlsoImport.contains(other);
    }

    /** The README's rule for main code, or for tests, as it reads there. */
    String says(boolean fromTest) {
        String main = MAY_IMPORT + " " + (mayImport.isEmpty() ? "nothing" : String.join(", ", mayImport));
        return fromTest && !testsMayAlsoImport.isEmpty()
                ? main + "; " + TESTS_MAY_ALSO_IMPORT + " " + String.join(", ", testsMayAlsoImport)
                : main;
    }
}
