package dev.rbridge.arch;

import com.tngtech.archunit.base.DescribedPredicate;
import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/**
 * Every module's compiled classes, main and test, read from the module's own class folders ({@code target/classes},
 * {@code target/test-classes}), so that each class is known by where it was compiled, not by its package: the fuzz
 * module's tests live in the packages of the modules they fuzz. The build must have compiled them (this module comes
 * last in the reactor); a module with sources and no classes is an error, not an empty pass.
 */
final class ReactorClasses {
    /** Where a class comes from: a module's folder name, and whether it is test code. */
    record Origin(String module, boolean test) {
    }

    private record Folder(Path path, Origin origin) {
    }

    private final JavaClasses classes;
    private final Map<String, Origin> origins;

    private ReactorClasses(List<Folder> folders, JavaClasses classes) {
        this.classes = classes;
        this.origins = new HashMap<>();
        for (JavaClass c : classes) {
            Path path = Path.of(c.getSource().orElseThrow().getUri());
            Folder folder = folders.stream().filter(f -> path.startsWith(f.path())).findFirst().orElseThrow();
            origins.put(c.getName(), folder.origin());
        }
    }

    /** The modules the root {@code pom.xml} under {@code root} lists, in its order. */
    static List<String> modules(Path root) throws IOException {
        Matcher m = Pattern.compile("<module>([^<]+)</module>").matcher(Files.readString(root.resolve("pom.xml")));
        List<String> modules = new ArrayList<>();
        while (m.find()) {
            modules.add(m.group(1).strip());
        }
        if (modules.isEmpty()) {
            throw new IllegalStateException(root.resolve("pom.xml") + " lists no module");
        }
        return modules;
    }

    static ReactorClasses load(Path root, List<String> modules) throws IOException {
        List<Folder> folders = new ArrayList<>();
        for (String module : modules) {
            for (boolean test : new boolean[]{false, true}) {
                Path sources = root.resolve(module).resolve(test ? "src/test/java" : "src/main/java");
                Path output = root.resolve(module).resolve(test ? "target/test-classes" : "target/classes");
                boolean hasSources = hasFiles(sources, ".java");
                if (hasSources && !hasFiles(output, ".class")) {
                    throw new IllegalStateException(output + " holds no classes: build " + module + " first (./test"
                            + " --fast builds every module; -pl arch needs -am)");
                }
                if (hasSources) {
                    folders.add(new Folder(output.toAbsolutePath().normalize(), new Origin(module, test)));
                }
            }
        }
        JavaClasses classes = new ClassFileImporter().importPaths(folders.stream().map(Folder::path).toList());
        return new ReactorClasses(folders, classes);
    }

    private static boolean hasFiles(Path dir, String suffix) throws IOException {
        if (!Files.isDirectory(dir)) {
            return false;
        }
        try (Stream<Path> files = Files.walk(dir)) {
            return files.anyMatch(f -> f.getFileName().toString().endsWith(suffix));
        }
    }

    /** Every class of every module. */
    JavaClasses all() {
        return classes;
    }

    /** The main classes of every module: the code that ships. */
    JavaClasses main() {
        return classes.that(DescribedPredicate.describe("are main code",
                c -> originOf(c).filter(o -> !o.test()).isPresent()));
    }

    /** The module and kind of {@code c} (an array: of its component type); empty for a class of no module. */
    Optional<Origin> originOf(JavaClass c) {
        return Optional.ofNullable(origins.get(c.getBaseComponentType().getName()));
    }
}
