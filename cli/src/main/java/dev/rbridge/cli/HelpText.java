package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Model.UsageMessageSpec;

import java.util.ArrayList;
import java.util.List;

/**
 * Description and footer sections wrapped once, to the help's width: the commands write their prose as lines of a
 * paragraph (an empty line between paragraphs), which are joined and wrapped here, rather than wrapped at one width by
 * hand and again by picocli at another (ragged lines). A line that starts with two spaces is an example or a table
 * row and is printed as it is, never broken mid-command.
 */
final class HelpText {
    private HelpText() {}

    /** Installs the renderers on {@code cl} and every subcommand under it. */
    static void install(CommandLine cl) {
        cl.getHelpSectionMap().put(UsageMessageSpec.SECTION_KEY_DESCRIPTION,
                help -> render(help.commandSpec().usageMessage().description(), width(help)));
        cl.getHelpSectionMap().put(UsageMessageSpec.SECTION_KEY_FOOTER,
                help -> render(help.commandSpec().usageMessage().footer(), width(help)));
        cl.getSubcommands().values().forEach(HelpText::install);
    }

    private static int width(CommandLine.Help help) {
        return help.commandSpec().usageMessage().width();
    }

    /** Paragraphs joined and wrapped to {@code width}; verbatim lines kept; one newline at the end. */
    static String render(String[] lines, int width) {
        if (lines == null || lines.length == 0) {
            return "";
        }
        StringBuilder out = new StringBuilder();
        List<String> paragraph = new ArrayList<>();
        for (String line : lines) {
            if (line.isEmpty() || line.startsWith("  ")) {
                flush(paragraph, width, out);
                out.append(line).append('\n');
            } else {
                paragraph.add(line.strip());
            }
        }
        flush(paragraph, width, out);
        return out.toString();
    }

    private static void flush(List<String> paragraph, int width, StringBuilder out) {
        if (paragraph.isEmpty()) {
            return;
        }
        StringBuilder line = new StringBuilder();
        for (String word : String.join(" ", paragraph).split(" +")) {
            if (!line.isEmpty() && line.length() + 1 + word.length() > width) {
                out.append(line).append('\n');
                line.setLength(0);
            }
            line.append(line.isEmpty() ? "" : " ").append(word);
        }
        if (!line.isEmpty()) {
            out.append(line).append('\n');
        }
        paragraph.clear();
    }
}
