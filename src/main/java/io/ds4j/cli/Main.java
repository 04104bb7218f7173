package io.ds4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

/** Entry point of the {@code ds4j} command line. */
@Command(name = "ds4j", mixinStandardHelpOptions = true, version = "ds4j 0.1.0",
        description = "DeepSeek-V4 inference engine and server for the JVM.",
        subcommands = {CommandLine.HelpCommand.class, MakeModelCommand.class, GenerateCommand.class,
                BenchEngineCommand.class, BenchSpecCommand.class, BenchCommand.class, ServeCommand.class, BenchServerCommand.class,
                BenchPrefixCommand.class, BenchHostCommand.class})
public final class Main implements java.util.concurrent.Callable<Integer> {
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
        // a bad flag gets one line and a pointer to --help, not the whole usage text
        cl.setParameterExceptionHandler((ex, args) -> {
            CommandLine cmd = ex.getCommandLine();
            // picocli starts some messages with its own "Error: "; one prefix is enough
            String msg = ex instanceof CommandLine.OverwrittenOptionException o && o.getOverwritten() instanceof CommandLine.Model.OptionSpec opt
                    ? givenTwice(opt, args) : String.valueOf(ex.getMessage()).replaceFirst("^Error: ", "");
            cmd.getErr().println(cmd.getColorScheme().errorText("error: " + msg));
            cmd.getErr().println("run '" + cmd.getCommandSpec().qualifiedName() + " --help' for the options");
            return 2;
        });
        cl.setExecutionExceptionHandler((ex, cmd, parse) -> {
            cmd.getErr().println(cmd.getColorScheme().errorText("error: " + describe(ex)));
            if (System.getenv("DS4J_DEBUG") != null) ex.printStackTrace(cmd.getErr());
            return 2;
        });
        return cl;
    }

    /**
     * The refusal of an option of one value given more than once, naming it as it was written with each value (picocli
     * named it by its longest name, "option '--max-tokens' (<maxTokens>) should be specified only once", for
     * {@code -n 3 -n 20}). It stays a refusal rather than the last value winning: which of two values was meant cannot
     * be known, as for a key given twice in the configuration.
     */
    static String givenTwice(CommandLine.Model.OptionSpec opt, String[] args) {
        java.util.List<String> uses = new java.util.ArrayList<>();
        java.util.Set<String> written = new java.util.LinkedHashSet<>();
        boolean takesValue = opt.arity().max() > 0;
        for (int i = 0; i < args.length && !args[i].equals("--"); i++) {
            String a = args[i];
            for (String name : opt.names()) {
                boolean shortName = name.length() == 2 && name.charAt(0) == '-' && name.charAt(1) != '-';
                if (a.equals(name)) {
                    uses.add(takesValue && i + 1 < args.length ? a + " " + args[++i] : a);
                } else if (a.startsWith(name + "=") || (shortName && takesValue && a.startsWith(name) && a.length() > 2)) {
                    uses.add(a);  // --max-tokens=20, or -n20 (a short name with its value attached)
                } else continue;
                written.add(name);
                break;
            }
        }
        String names = written.isEmpty() ? String.join(" / ", opt.names()) : String.join(" / ", written);
        String once = takesValue ? "it takes one value: give it once" : "give it once";
        if (uses.size() < 2) return "option " + names + " is given more than once; " + once;
        return "option " + names + " is given " + (uses.size() == 2 ? "twice" : uses.size() + " times") + " ("
                + String.join(", ", uses) + "); " + once;
    }

    /** No command given: the usage on stderr, and a failing exit code (--help prints it on stdout and exits 0). */
    @Override
    public Integer call() {
        spec.commandLine().getErr().println("error: no command given");
        spec.commandLine().usage(spec.commandLine().getErr());
        return 2;
    }

    /**
     * An error in one line. File-system errors say what failed and why: their own message is often only the path
     * ("/proc/nope"), which reads as no explanation at all.
     */
    static String describe(Throwable ex) {
        if (ex instanceof java.nio.file.FileSystemException f) {
            String why = switch (f) {
                case java.nio.file.NoSuchFileException x -> "no such file or directory";
                case java.nio.file.AccessDeniedException x -> "permission denied";
                case java.nio.file.FileAlreadyExistsException x -> "it already exists";
                case java.nio.file.DirectoryNotEmptyException x -> "the directory is not empty";
                case java.nio.file.NotDirectoryException x -> "not a directory";
                default -> f.getReason() != null ? f.getReason() : f.getClass().getSimpleName();
            };
            String what = f.getFile() != null ? f.getFile() : "a file";
            return "cannot access " + what + (f.getOtherFile() != null ? " (-> " + f.getOtherFile() + ")" : "") + ": "
                    + (why.isEmpty() ? "" : Character.toLowerCase(why.charAt(0)) + why.substring(1));
        }
        if (ex instanceof java.io.UncheckedIOException u && u.getCause() != null) return describe(u.getCause());
        return ex.getMessage() != null ? ex.getMessage() : ex.toString();
    }
}
