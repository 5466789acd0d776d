package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

import java.util.Set;

/** The {@code rbridge} executable: one command with a subcommand per role. */
@Command(name = "rbridge",
        mixinStandardHelpOptions = true,
        versionProvider = Main.Version.class,
        description = {
                "Serves block devices over NBD (kernel nbd-client, qemu, libnbd, fio) out of RAM.",
                "",
                "Connect with, for example:",
                "  nbdinfo nbd://" + Defaults.NBD_LISTEN + "/" + Defaults.EXPORT,
                "  qemu-img info nbd://" + Defaults.NBD_LISTEN + "/" + Defaults.EXPORT,
                "  nbd-client -N " + Defaults.EXPORT + " " + Defaults.LOOPBACK + " " + Defaults.NBD_PORT
                        + " /dev/nbd0 -b 4096",
                "  nbdinfo 'nbd+unix:///disk?socket=/run/rbridge.sock'   (with --unix)"},
        subcommands = {DemoCommand.class, ServeCommand.class, MemserverCommand.class, PingCommand.class,
                BenchCommand.class,
                AdminCommand.class, MemCommand.class, AttachCommand.class, DetachCommand.class, StatusCommand.class,
                CommandLine.HelpCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    public static void main(String[] args) {
        configureLogging(args);
        System.exit(commandLine().execute(args));
    }

    static CommandLine commandLine() {
        CommandLine cl = new CommandLine(new Main());
        cl.setCaseInsensitiveEnumValuesAllowed(true);
        cl.setUsageHelpAutoWidth(true);
        cl.setParameterExceptionHandler(Main::usageError);
        cl.setExecutionExceptionHandler(Main::failed);
        HelpText.install(cl);
        return cl;
    }

    /**
     * A mistake on the command line: its one line, picocli's suggestions for a misspelt option, and where the help
     * is, not 50 lines of usage after the line that matters. Exit 2.
     */
    private static int usageError(CommandLine.ParameterException e, String[] args) {
        CommandLine c = e.getCommandLine();
        java.io.PrintWriter err = c.getErr();
        err.println(e.getMessage());
        CommandLine.UnmatchedArgumentException.printSuggestions(e, err);
        err.println("Try '" + c.getCommandSpec().qualifiedName() + " --help' for more information.");
        err.flush();
        return c.getCommandSpec().exitCodeOnInvalidInput();
    }

    /**
     * A command that failed with an exception it did not turn into a sentence itself: one line, "COMMAND: what
     * happened" (the causes' messages joined), exit 1; the stack trace only at --log-level debug or trace.
     */
    private static int failed(Exception e, CommandLine c, CommandLine.ParseResult parsed) {
        java.io.PrintWriter err = c.getErr();
        err.println(c.getCommandName() + ": " + dev.rbridge.common.Failures.reason(e));
        String level = System.getProperty("org.slf4j.simpleLogger.defaultLogLevel", "info");
        if (level.equalsIgnoreCase("debug") || level.equalsIgnoreCase("trace")) {
            e.printStackTrace(err);
        }
        err.flush();
        return 1;
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    /**
     * slf4j-simple reads its settings once, so they are set from the raw arguments before the first logger exists,
     * and so before picocli knows the command: {@link #logLevel} finds the command's default itself.
     */
    private static void configureLogging(String[] args) {
        setIfAbsent("org.slf4j.simpleLogger.defaultLogLevel", logLevel(args));
        setIfAbsent("org.slf4j.simpleLogger.showDateTime", "true");
        setIfAbsent("org.slf4j.simpleLogger.dateTimeFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX");
        setIfAbsent("org.slf4j.simpleLogger.showThreadName", "false");
        setIfAbsent("org.slf4j.simpleLogger.showShortLogName", "true");
        setIfAbsent("org.slf4j.simpleLogger.levelInBrackets", "true");
    }

    /**
     * The commands that mix in {@link LogLevelOption.Tool}: they log at its level unless told otherwise. Named here
     * because the level is needed before picocli may build the commands (building them loads classes whose loggers
     * would fix slf4j-simple's settings too early); {@code LogLevelDefaultTest} checks it against the commands.
     */
    static final Set<String> TOOLS = Set.of("ping", "bench", "mem", "admin");

    /** The level the command line asks for: {@code --log-level}, else the default of the command it runs. */
    static String logLevel(String[] args) {
        String level = null;
        String command = null;
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--log-level") && i + 1 < args.length) {
                level = args[++i];
            } else if (args[i].startsWith("--log-level=")) {
                level = args[i].substring("--log-level=".length());
            } else if (command == null && !args[i].startsWith("-")) {
                command = args[i];
            }
        }
        if (level != null) {
            return level;
        }
        return command != null && TOOLS.contains(command) ? Defaults.TOOL_LOG_LEVEL : Defaults.SERVER_LOG_LEVEL;
    }

    private static void setIfAbsent(String key, String value) {
        if (System.getProperty(key) == null) {
            System.setProperty(key, value);
        }
    }

    static final class Version implements CommandLine.IVersionProvider {
        @Override
        public String[] getVersion() {
            String v = Main.class.getPackage().getImplementationVersion();
            return new String[]{"rbridge " + (v == null ? "(development build)" : v) + ", Java "
                    + Runtime.version()};
        }
    }
}
