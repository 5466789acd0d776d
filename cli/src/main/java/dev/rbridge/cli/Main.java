package dev.rbridge.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** The {@code rbridge} executable: one command with a subcommand per role. */
@Command(name = "rbridge",
        mixinStandardHelpOptions = true,
        versionProvider = Main.Version.class,
        description = {
                "Serves block devices over NBD (kernel nbd-client, qemu, libnbd, fio) out of RAM.",
                "",
                "Connect with, for example:",
                "  nbdinfo nbd://127.0.0.1:10809/disk",
                "  qemu-img info nbd://127.0.0.1:10809/disk",
                "  nbd-client -N disk 127.0.0.1 10809 /dev/nbd0 -b 4096",
                "  nbdinfo 'nbd+unix:///disk?socket=/run/rbridge.sock'   (with --unix)"},
        subcommands = {DemoCommand.class, ServeCommand.class, MemServerCommand.class, PingCommand.class, BenchCommand.class,
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
        return cl;
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }

    /** slf4j-simple reads its settings once, so they are set before the first logger exists. */
    private static void configureLogging(String[] args) {
        String level = "info";
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--log-level") && i + 1 < args.length) {
                level = args[i + 1];
            } else if (args[i].startsWith("--log-level=")) {
                level = args[i].substring("--log-level=".length());
            }
        }
        setIfAbsent("org.slf4j.simpleLogger.defaultLogLevel", level);
        setIfAbsent("org.slf4j.simpleLogger.showDateTime", "true");
        setIfAbsent("org.slf4j.simpleLogger.dateTimeFormat", "yyyy-MM-dd'T'HH:mm:ss.SSSXXX");
        setIfAbsent("org.slf4j.simpleLogger.showThreadName", "false");
        setIfAbsent("org.slf4j.simpleLogger.showShortLogName", "true");
        setIfAbsent("org.slf4j.simpleLogger.levelInBrackets", "true");
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
