package dev.rbridge.cli;

import picocli.CommandLine;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

/**
 * {@code --config FILE}: {@code option = value} lines (option names without dashes; repeated for repeatable options;
 * {@code #} comments). The file is parsed like a command line placed before the real one, so the command line adds
 * to repeatable options and wins for single-valued ones.
 */
final class ConfigFile {
    private ConfigFile() {}

    static void apply(Path file, CommandLine.Model.CommandSpec spec) {
        List<String> lines;
        try {
            lines = Files.readAllLines(file);
        } catch (IOException e) {
            throw new IllegalArgumentException("cannot read --config " + file + ": " + e.getMessage());
        }
        List<String> args = new ArrayList<>();
        int n = 0;
        for (String raw : lines) {
            n++;
            String line = raw.strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int eq = line.indexOf('=');
            String key = (eq < 0 ? line : line.substring(0, eq)).strip();
            if (key.equals("config")) {
                throw new IllegalArgumentException(file + ":" + n + ": a config file cannot include another");
            }
            CommandLine.Model.OptionSpec o = spec.findOption("--" + key);
            if (o == null) {
                throw new IllegalArgumentException(file + ":" + n + ": unknown option '" + key + "'");
            }
            args.add("--" + key);
            if (eq >= 0) {
                args.add(line.substring(eq + 1).strip());
            }
        }
        // Parse the file into a fresh instance, then merge: repeatable options accumulate, others keep the command line's.
        CommandLine fresh = new CommandLine(spec.userObject().getClass());
        try {
            fresh.parseArgs(args.toArray(String[]::new));
        } catch (CommandLine.ParameterException e) {
            throw new IllegalArgumentException(file + ": " + e.getMessage());
        }
        CommandLine.ParseResult given = spec.commandLine().getParseResult();
        for (CommandLine.Model.OptionSpec fileOpt : fresh.getCommandSpec().options()) {
            if (!fresh.getParseResult().hasMatchedOption(fileOpt)) {
                continue;
            }
            CommandLine.Model.OptionSpec target = spec.findOption(fileOpt.longestName());
            Object fromFile = fileOpt.getValue();
            if (fromFile instanceof List<?> list) {
                @SuppressWarnings("unchecked")
                List<Object> mine = (List<Object>) target.getValue();
                List<Object> merged = new ArrayList<>(list);
                merged.addAll(mine);
                target.setValue(merged);
            } else if (given == null || !given.hasMatchedOption(target)) {
                target.setValue(fromFile);
            }
        }
    }

}
