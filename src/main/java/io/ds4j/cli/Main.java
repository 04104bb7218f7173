package io.ds4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** Entry point of the {@code ds4j} command line. */
@Command(name = "ds4j", mixinStandardHelpOptions = true, version = "ds4j 0.1.0",
        description = "DeepSeek-V4 inference engine and server for the JVM.",
        subcommands = {CommandLine.HelpCommand.class, MakeModelCommand.class, GenerateCommand.class,
                BenchEngineCommand.class, BenchSpecCommand.class, ServeCommand.class, BenchServerCommand.class})
public final class Main implements Runnable {
    @CommandLine.Spec
    CommandLine.Model.CommandSpec spec;

    public static void main(String[] args) {
        // DJL must never reach the network (java-stack.md, item 4); set before any DJL class loads.
        System.setProperty("ai.djl.offline", "true");
        System.setProperty("OPT_OUT_TRACKING", "true");
        System.exit(commandLine().execute(args));
    }

    /** The configured picocli command line (also used by tests). */
    public static CommandLine commandLine() {
        CommandLine cl = new CommandLine(new Main());
        cl.setExecutionExceptionHandler((ex, cmd, parse) -> {
            cmd.getErr().println(cmd.getColorScheme().errorText("error: " + (ex.getMessage() != null ? ex.getMessage() : ex.toString())));
            if (System.getenv("DS4J_DEBUG") != null) ex.printStackTrace(cmd.getErr());
            return 2;
        });
        return cl;
    }

    @Override
    public void run() {
        spec.commandLine().usage(System.out);
    }
}
