package dev.rbridge.arch;

import com.tngtech.archunit.core.domain.Dependency;
import com.tngtech.archunit.core.domain.JavaClass;
import com.tngtech.archunit.lang.ArchCondition;
import com.tngtech.archunit.lang.ConditionEvents;
import com.tngtech.archunit.lang.SimpleConditionEvent;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

/**
 * The shape of the build, checked on the compiled classes of every module: each module uses only the modules its
 * README.md says it may import (the line "May import: ...", and "Its tests may also import: ..." for its tests), and
 * no two packages of the code that ships depend on each other, however indirectly.
 */
class ArchitectureTest {
    private static Map<String, ModuleReadme> readmes;
    private static ReactorClasses classes;

    @BeforeAll
    static void readTheBuild() throws Exception {
        Path root = Path.of(System.getProperty("rbridge.root", "..")).toAbsolutePath().normalize();
        List<String> modules = ReactorClasses.modules(root);
        readmes = new LinkedHashMap<>();
        for (String module : modules) {
            readmes.put(module, ModuleReadme.read(root, module, modules));
        }
        classes = ReactorClasses.load(root, modules);
    }

    @Test
    void eachModuleImportsOnlyWhatItsReadmeAllows() {
        classes().should(importOnlyWhatTheirReadmeAllows()).check(classes.all());
    }

    @Test
    void packagesHaveNoCycles() {
        slices().matching("dev.rbridge.(**)").should().beFreeOfCycles()
                .check(classes.main());
    }

    private static ArchCondition<JavaClass> importOnlyWhatTheirReadmeAllows() {
        return new ArchCondition<>("import only the modules their module's README.md allows") {
            @Override
            public void check(JavaClass c, ConditionEvents events) {
                ReactorClasses.Origin from = classes.originOf(c).orElseThrow();
                ModuleReadme readme = readmes.get(from.module());
                for (Dependency d : c.getDirectDependenciesFromSelf()) {
                    Optional<ReactorClasses.Origin> to = classes.originOf(d.getTargetClass());
                    if (to.isEmpty() || to.get().module().equals(from.module())
                            || readme.allows(to.get().module(), from.test())) {
                        continue;
                    }
                    events.add(SimpleConditionEvent.violated(d, d.getDescription() + ": " + from.module()
                            + (from.test() ? " (test)" : "") + " may not import " + to.get().module() + " ("
                            + from.module() + "/README.md: \"" + readme.says(from.test()) + "\")"));
                }
            }
        };
    }
}
