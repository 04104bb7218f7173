package io.ds4j.cli;

import picocli.CommandLine;
import picocli.CommandLine.Command;

import java.util.List;

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
                    ? givenTwice(opt, args) : ex instanceof CommandLine.UnmatchedArgumentException u ? unknownCommand(u, args)
                    : ex instanceof CommandLine.MissingParameterException m ? noValue(m, args)
                    : badNumber(ex, args);
            if (msg == null) msg = unknownHelpTopic(ex, args);
            if (msg == null) msg = String.valueOf(ex.getMessage()).replaceFirst("^Error: ", "");
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
        List<Use> uses = uses(opt, args);
        java.util.Set<String> written = new java.util.LinkedHashSet<>();
        for (Use u : uses) written.add(u.name());
        boolean takesValue = opt.arity().max() > 0;
        String names = written.isEmpty() ? String.join(" / ", opt.names()) : String.join(" / ", written);
        String once = takesValue ? "it takes one value: give it once" : "give it once";
        if (uses.size() < 2) return "option " + names + " is given more than once; " + once;
        return "option " + names + " is given " + (uses.size() == 2 ? "twice" : uses.size() + " times") + " ("
                + String.join(", ", uses.stream().map(Use::text).toList()) + "); " + once;
    }

    /**
     * The refusal of a word where a command was expected ("unknown command 'nosuch'", with a close name where there is
     * one and the list of commands; picocli said "Unmatched argument at index 0: 'nosuch'"), or of a word given to a
     * command that takes options only ("'extra' is not an option: ds4j serve takes options only"). Null for any other
     * unmatched argument: an unknown option, or an extra word after the positional parameters of a command that has some.
     */
    static String unknownCommand(CommandLine.UnmatchedArgumentException ex, String[] args) {
        CommandLine cmd = ex.getCommandLine();
        List<String> unmatched = ex.getUnmatched();
        // a word that is no option (an unknown option keeps picocli's "Unknown option")
        if (unmatched.isEmpty() || unmatched.get(0).startsWith("-")) return null;
        String word = unmatched.get(0);
        // a command that takes no words beside its options (picocli: "Unmatched argument at index 1: 'extra'")
        if (cmd.getSubcommands().isEmpty())
            return cmd.getCommandSpec().positionalParameters().isEmpty()
                    ? "'" + word + "' is not an option: " + cmd.getCommandSpec().qualifiedName() + " takes options only"
                    + " (each value after its option's name)" : null;
        return unknownCommandWord(cmd, word, args);
    }

    /**
     * The refusal of help for a command that does not exist ({@code ds4j help nosuch}; picocli: "Unknown subcommand
     * 'nosuch'."), in unknownCommandWord's words. Null for any other refusal.
     */
    static String unknownHelpTopic(CommandLine.ParameterException ex, String[] args) {
        // picocli's help command refuses it on the command line it was asked about, in these words
        String m = String.valueOf(ex.getMessage()), head = "Unknown subcommand '";
        if (!m.startsWith(head) || !m.endsWith("'.") || ex.getCommandLine().getSubcommands().isEmpty()) return null;
        return unknownCommandWord(ex.getCommandLine(), m.substring(head.length(), m.length() - 2), args);
    }

    /** A word where one of cmd's commands was expected, named with a close command and the list of commands. */
    private static String unknownCommandWord(CommandLine cmd, String word, String[] args) {
        String commands = "; the commands: " + String.join(", ", cmd.getSubcommands().keySet());
        // after "--" a command's name is a plain word: suggesting the very name would not help
        int end = java.util.Arrays.asList(args).indexOf("--");
        if (end >= 0 && java.util.Arrays.asList(args).subList(end + 1, args.length).contains(word))
            return "'--' ends the options: nothing after it is read as a command, so '" + word + "' is not one"
                    + (cmd.getSubcommands().containsKey(word) ? " (leave the '--' out: ds4j " + word + ")" : "") + commands;
        // the project's one rule for a "did you mean" (picocli's own suggestions offer names that share a letter or two)
        String close = io.ds4j.server.config.ServerConfig.closest(word, cmd.getSubcommands().keySet());
        // a command written with spaces around it looks like the command itself in the message: say what differs
        String hint = close == null || close.equals(word) ? ""
                : close.equals(word.strip()) ? " (it has spaces around the name: did you mean " + close + "?)"
                : " (did you mean " + close + "?)";
        return "unknown command '" + word + "'" + hint + commands;
    }

    /**
     * The refusal of an option given without its value, naming it as it was written: last ("option -n needs a value"),
     * or followed by another option ("option -n needs a value, got the option --temperature"). picocli named it by its
     * longest name, "Missing required parameter for option '--max-tokens' (<maxTokens>)" or "Expected parameter for
     * option '--max-tokens' but found '--temperature'". Null for any other missing parameter, such as a required option
     * not given at all.
     */
    static String noValue(CommandLine.MissingParameterException ex, String[] args) {
        CommandLine.Model.CommandSpec spec = ex.getCommandLine().getCommandSpec();
        for (CommandLine.Model.ArgSpec a : ex.getMissing()) {
            if (!(a instanceof CommandLine.Model.OptionSpec opt) || opt.arity().max() == 0) continue;
            for (Use u : uses(opt, args)) {
                if (u.value() == null) return "option " + u.name() + " needs a value";
                // picocli takes no option's name as a value: the word after it was read as the next option
                String next = optionNamed(spec, u.value());
                if (u.text().equals(u.name() + " " + u.value()) && next != null)
                    return "option " + u.name() + " needs a value, got the option " + next;
            }
        }
        return null;
    }

    /** The option name a word starts as, as written ({@code --temperature} of {@code --temperature=1}), or null. */
    private static String optionNamed(CommandLine.Model.CommandSpec spec, String word) {
        String name = word.contains("=") ? word.substring(0, word.indexOf('=')) : word;
        return spec.findOption(name) != null ? name : null;
    }

    /**
     * One use of an option on the command line.
     * @param name  the option's name as written
     * @param value its value (null for a flag, or one given last without a value)
     * @param text  the use as written: {@code -n 3}, {@code --max-tokens=20}, {@code -n20}
     */
    record Use(String name, String value, String text) {}

    /** The uses of an option on the command line, in order (up to a {@code --}). */
    static List<Use> uses(CommandLine.Model.OptionSpec opt, String[] args) {
        List<Use> uses = new java.util.ArrayList<>();
        boolean takesValue = opt.arity().max() > 0;
        for (int i = 0; i < args.length && !args[i].equals("--"); i++) {
            String a = args[i];
            for (String name : opt.names()) {
                boolean shortName = name.length() == 2 && name.charAt(0) == '-' && name.charAt(1) != '-';
                if (a.equals(name)) {
                    if (takesValue && i + 1 < args.length) uses.add(new Use(name, args[++i], a + " " + args[i]));
                    else uses.add(new Use(name, null, a));
                } else if (a.startsWith(name + "=")) {
                    uses.add(new Use(name, a.substring(name.length() + 1), a));  // --max-tokens=20
                } else if (shortName && takesValue && a.startsWith(name) && a.length() > 2) {
                    uses.add(new Use(name, a.substring(2), a));  // -n20: a short name with its value attached
                } else continue;
                break;
            }
        }
        return uses;
    }

    /**
     * The refusal of a value that is not a number where an option takes one, naming the option as it was written and
     * the value in plain words ("option -n takes an integer, got 'abc'"): picocli named the option by its longest name
     * and the type as Java's ("'abc' is not an int"), and called an integer too large for its type no int at all.
     * Null for any other refusal.
     */
    static String badNumber(CommandLine.ParameterException ex, String[] args) {
        if (!(ex.getCause() instanceof CommandLine.TypeConversionException) || !(ex.getArgSpec() instanceof CommandLine.Model.OptionSpec opt)
                || ex.getValue() == null) return null;
        boolean list = opt.typeInfo().isMultiValue();
        Class<?> t = list ? opt.typeInfo().getAuxiliaryTypes()[0] : opt.type();
        long lo, hi;
        if (t == int.class || t == Integer.class) {
            lo = Integer.MIN_VALUE;
            hi = Integer.MAX_VALUE;
        } else if (t == long.class || t == Long.class) {
            lo = Long.MIN_VALUE;
            hi = Long.MAX_VALUE;
        } else if (t == double.class || t == Double.class || t == float.class || t == Float.class) {
            lo = hi = 0;
        } else {
            return null;
        }
        String bad = ex.getValue();
        Use use = uses(opt, args).stream().filter(u -> u.value() != null && (u.value().equals(bad)
                || list && java.util.Arrays.asList(u.value().split(opt.splitRegex())).contains(bad))).findFirst().orElse(null);
        String name = use != null ? use.name() : opt.longestName();
        String in = use != null && !use.value().equals(bad) ? " (in '" + use.value() + "')" : "";
        String what = lo == hi ? "a number" : "an integer";
        if (list) what = (lo == hi ? "numbers" : "integers") + " separated by '" + opt.splitRegex() + "'";
        if (lo != hi) {
            java.math.BigInteger v;
            try {
                v = new java.math.BigInteger(bad);  // not stripped: " 5" is no integer here, not one too large
            } catch (NumberFormatException e) {
                v = null;
            }
            // an integer all the same, past the type's range
            if (v != null) what += v.signum() < 0 ? " of at least " + lo : " of at most " + hi;
        }
        return "option " + name + " takes " + what + ", got '" + bad + "'" + in;
    }

    /** No command given: the usage on stderr, and a failing exit code (--help prints it on stdout and exits 0). */
    @Override
    public Integer call() {
        spec.commandLine().getErr().println("error: no command given");
        spec.commandLine().usage(spec.commandLine().getErr());
        return 2;
    }

    /**
     * The refusal of a flag that sets one configuration key, where its value is outside that key's range (the server
     * would refuse the key only after the model is made, naming the key and not the flag), or null.
     * @param flag  the flag as written in the help, e.g. {@code --prefill-chunk}
     * @param key   the key it sets, e.g. {@code limits.prefillChunk}
     * @param value its value
     * @param shown the value as the message shows it
     */
    static String outOfKeyRange(String flag, String key, double value, String shown) {
        io.ds4j.server.config.ConfigKey k = io.ds4j.server.config.ServerConfig.keyOf(key);
        return k.range().accepts(value) ? null : flag + ": " + k.mustBe() + " (" + k.name() + "), got " + shown;
    }

    /**
     * The preset-variant options ({@code --preset}, {@code --layers}, {@code --experts}, {@code --dtype}) given beside
     * {@code --model DIR}, where they would be silently unused (the folder is the model): a refusal naming them, or null.
     * @param pr the command's parse result (null: nothing to check)
     */
    static String variantOptionsBesideModel(CommandLine.ParseResult pr) {
        if (pr == null || !pr.hasMatchedOption("--model")) return null;
        List<String> given = java.util.stream.Stream.of("--preset", "--layers", "--experts", "--dtype").filter(pr::hasMatchedOption).toList();
        if (given.isEmpty()) return null;
        return String.join(", ", given) + (given.size() == 1 ? " makes a preset variant as the model and does"
                : " make a preset variant as the model and do") + " not apply beside --model DIR: give one or the other";
    }

    /**
     * The model folder a flag names, checked as a load would check it but without reading a weight (see
     * {@link io.ds4j.app.DefaultModelProvider#checkModelFolder}): every command words a missing or unusable one alike.
     * @throws IllegalArgumentException naming the flag, the folder and what is wrong
     */
    static java.nio.file.Path modelFolder(String flag, java.nio.file.Path dir) {
        io.ds4j.app.DefaultModelProvider.checkModelFolder(flag, dir);
        return dir;
    }

    /** Why a file-system call failed, in lower-case words ("no such file or directory", "not a directory"). */
    static String reason(java.nio.file.FileSystemException f) {
        String why = switch (f) {
            case java.nio.file.NoSuchFileException x -> "no such file or directory";
            case java.nio.file.AccessDeniedException x -> "permission denied";
            case java.nio.file.FileAlreadyExistsException x -> "it already exists";
            case java.nio.file.DirectoryNotEmptyException x -> "the directory is not empty";
            case java.nio.file.NotDirectoryException x -> "not a directory";
            default -> f.getReason() != null ? f.getReason() : f.getClass().getSimpleName();
        };
        return why.isEmpty() ? "" : Character.toLowerCase(why.charAt(0)) + why.substring(1);
    }

    /**
     * An error in one line. File-system errors say what failed and why: their own message is often only the path
     * ("/proc/nope"), which reads as no explanation at all.
     */
    static String describe(Throwable ex) {
        if (ex instanceof java.nio.file.FileSystemException f) {
            String what = f.getFile() != null ? f.getFile() : "a file";
            return "cannot access " + what + (f.getOtherFile() != null ? " (-> " + f.getOtherFile() + ")" : "") + ": " + reason(f);
        }
        if (ex instanceof java.io.UncheckedIOException u && u.getCause() != null) return describe(u.getCause());
        return ex.getMessage() != null ? ex.getMessage() : ex.toString();
    }
}
