package io.ds4j.cli;

import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.app.Backends;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.engine.FeatureGate;
import io.ds4j.engine.Generation;
import io.ds4j.engine.ReasoningBudget;
import io.ds4j.engine.StopStrings;
import io.ds4j.grammar.Grammar;
import io.ds4j.grammar.TokenConstraint;
import io.ds4j.grammar.TokenTrie;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.sampling.Sampler;
import io.ds4j.sampling.SamplingParams;
import io.ds4j.engine.Draft;
import io.ds4j.speculative.DraftSource;
import io.ds4j.speculative.ModelDraftSource;
import io.ds4j.speculative.NgramDraft;
import io.ds4j.engine.VerifyWidth;
import io.ds4j.text.StreamingDetokenizer;
import io.ds4j.text.Tokenizer;
import io.ds4j.text.Tokenizers;
import io.ds4j.text.chat.ChatEncoder;
import io.ds4j.text.chat.ChatMessage;
import io.ds4j.text.chat.ChatOptions;
import io.ds4j.text.chat.ReasoningEffort;
import io.ds4j.text.chat.OutputParser;
import io.ds4j.text.chat.V4Format;
import picocli.CommandLine.ArgGroup;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code ds4j generate}: one prompt (or one chat turn) in, text streamed to stdout as it is produced, a one-line
 * summary on stderr. With {@code --draft} it decodes speculatively and adds the acceptance figures to the summary.
 */
@Command(name = "generate", mixinStandardHelpOptions = true, sortOptions = false,
        description = "Generate text from a prompt, streaming it to stdout.")
public final class GenerateCommand implements Callable<Integer> {
    static final class Source {
        @Option(names = "--model", paramLabel = "DIR", description = "model directory") Path model;
        @Option(names = "--preset", paramLabel = "NAME", description = "preset model (tiny, small, flash-shaped), created on first use; without --model or --preset: tiny") String preset;
    }

    @ArgGroup(exclusive = true, multiplicity = "0..1") Source source = new Source();
    @Option(names = {"-p", "--prompt"}, required = true, description = "prompt text (with --chat: the user message)") String prompt;
    @Option(names = "--chat", description = "encode the prompt as a DeepSeek-V4 chat turn") boolean chat;
    @Option(names = "--system", description = "system message (with --chat)") String system;
    @Option(names = "--thinking", description = "thinking mode (with --chat); reasoning goes to stderr") boolean thinking;
    @Option(names = "--reasoning-effort", description = "as the API's reasoning_effort: none (no thinking), minimal, low, "
            + "medium or high (thinking), xhigh or max (thinking at its maximum); --thinking wins over none") String effort;
    @Option(names = "--reasoning-budget", description = "end the reasoning after at most N tokens (with --thinking; as the API's thinking_token_budget)")
    Integer reasoningBudget;
    @Option(names = {"-n", "--max-tokens"}, defaultValue = "128", description = "tokens to generate (default ${DEFAULT-VALUE})") int maxTokens;
    @Option(names = "--temperature", defaultValue = "0", description = "0 = greedy (default ${DEFAULT-VALUE})") double temperature;
    @Option(names = "--top-p", defaultValue = "1", description = "nucleus sampling: keep the most likely tokens up to this probability mass, (0, 1]; 1 = off (default ${DEFAULT-VALUE})") double topP;
    @Option(names = "--top-k", defaultValue = "0", description = "keep the k most likely tokens, up to the vocabulary size; 0 or -1 = off (default ${DEFAULT-VALUE})") int topK;
    @Option(names = "--min-p", defaultValue = "0", description = "drop tokens below this fraction of the most likely one's probability, [0, 1]; 0 = off (default ${DEFAULT-VALUE})") double minP;
    @Option(names = "--presence-penalty", defaultValue = "0", description = "subtracted from the logit of a token the output already has, [-2, 2] (default ${DEFAULT-VALUE})") double presence;
    @Option(names = "--frequency-penalty", defaultValue = "0", description = "subtracted from a token's logit per time the output has it, [-2, 2] (default ${DEFAULT-VALUE})") double frequency;
    @Option(names = "--repetition-penalty", defaultValue = "1", description = "divides a positive logit (multiplies a negative one) of a token in the prompt or the output, (0, 10]; 1 = off (default ${DEFAULT-VALUE})") double repetition;
    @Option(names = "--seed", description = "random seed (same seed + same request = same output)") Long seed;
    @Option(names = "--stop", description = "stop string (repeatable)") List<String> stop = new ArrayList<>();
    @Option(names = "--ignore-eos", description = "keep going after the end-of-sequence token") boolean ignoreEos;
    @Option(names = "--skip-special-tokens", arity = "1", defaultValue = "true", paramLabel = "true|false",
            description = "leave control tokens (<｜User｜>, <｜place▁holder▁no▁N｜>, ...) out of the printed text, as the API's skip_special_tokens (default ${DEFAULT-VALUE})") boolean skipSpecialTokens;
    @Option(names = "--backend", defaultValue = "cpu", description = "cpu or hip (default ${DEFAULT-VALUE})") String backend;
    @Option(names = "--gpu-devices", defaultValue = "1", paramLabel = "N", description = "GPUs of backend hip (it runs on one; default ${DEFAULT-VALUE})") int gpuDevices;
    @Option(names = "--expert-placement", defaultValue = "auto", paramLabel = "auto|monolithic|hybrid", description = "where routed experts live on backend hip (default ${DEFAULT-VALUE})") String expertPlacement;
    @Option(names = "--gpu-memory-budget-mib", defaultValue = "0", paramLabel = "MIB", description = "device memory the weights may use on backend hip, 0 = all free (default ${DEFAULT-VALUE})") long gpuMemoryBudgetMiB;
    @Option(names = "--fused-verify-f16-kv", description = "the F16-KV verifier: verify attention reads the F16 cache directly (backend hip on a single device only)") boolean fusedVerifyF16Kv;
    @Option(names = "--draft", paramLabel = "DIR|ngram|mtp", description = "speculative decoding draft: a draft model directory, 'ngram' for prompt lookup, or 'mtp' for the checkpoint's own MTP layer") String draft;
    @Option(names = "--spec-q", defaultValue = "4", paramLabel = "N|auto", description = "verify width 1..8, auto, or 0 for no speculation (as serve's speculative.q; default ${DEFAULT-VALUE})") String specQ;
    @Option(names = "--prefill-chunk", defaultValue = "512", description = "prefill chunk in tokens (default ${DEFAULT-VALUE})") int prefillChunk;
    @Option(names = "--max-context", description = "context limit in tokens (default 65536), capped by the model's max_position_embeddings") Integer maxContext;
    @Option(names = "--json-schema", paramLabel = "FILE", description = "constrain the output to JSON valid for this JSON Schema (constrained decoding); prints the mask's cost per step") Path jsonSchema;
    @Option(names = "--json-object", description = "constrain the output to a JSON object (constrained decoding); prints the mask's cost per step") boolean jsonObject;
    @Option(names = "--grammar", paramLabel = "FILE", description = "constrain the output to this EBNF grammar (rule root; constrained decoding); prints the mask's cost per step") Path grammarFile;

    /** Whether no generation has finished in this process yet (each {@code ds4j generate} is one). */
    static final java.util.concurrent.atomic.AtomicBoolean FIRST_IN_PROCESS = new java.util.concurrent.atomic.AtomicBoolean(true);

    @Override
    public Integer call() throws Exception {
        PrintStream err = System.err;
        // as /v1/completions refuses an empty prompt (a chat turn may be empty: the template still writes it)
        if (!chat && prompt.isEmpty())
            throw new IllegalArgumentException("--prompt must not be empty without --chat (as the API's prompt); with --chat it is"
                    + " the user message, which may be empty");
        // the API's rule for chat and plain completions: 0 means something only with echo, which generate has not
        if (maxTokens < 1)
            throw new IllegalArgumentException("-n / --max-tokens must be >= 1 (as the API's max_tokens), got " + maxTokens);
        // as the API takes top_k: -1 is off, as 0 is; the upper bound, the vocabulary, is checked once config.json is read
        if (topK < -1) throw new IllegalArgumentException("--top-k must be >= -1 (0 or -1 = off), got " + topK);
        SamplingParams sp = new SamplingParams(temperature, SamplingParams.topKGiven(topK), topP, minP, seed, presence, frequency,
                repetition, Map.of(), maxTokens, stop, false, 0, ignoreEos);
        // every range but top-k's upper bound (the vocabulary size, checked once config.json is read) is checked here,
        // before the model loads: a bad flag fails at once, not after a load that may take minutes
        try {
            sp.validate(Integer.MAX_VALUE);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(asFlag(e.getMessage()), e);
        }
        // serve's limits.maxContextTokens minimum: one definition, so that a limit generate takes serve takes too
        if (maxContext != null && maxContext < io.ds4j.model.ModelConfig.MIN_CONTEXT_TOKENS)
            throw new IllegalArgumentException("--max-context must be >= " + io.ds4j.model.ModelConfig.MIN_CONTEXT_TOKENS
                    + " (as serve's limits.maxContextTokens), got " + maxContext);
        VerifyWidth width = null;
        // 0 turns speculation off, as serve's speculative.q and the API's speculative_q: a draft given beside it is unused
        boolean specOff = specQ.trim().equals("0");
        if (!specOff) {
            try {
                width = VerifyWidth.parse(specQ); // checked even without --draft: a typo must not pass silently
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("--spec-q: must be 1..8, auto or 0 (no speculation), got '" + specQ + "'", e);
            }
        }
        if (specOff && draft != null) {
            err.println("draft: not used (--spec-q 0 turns speculation off)");
            draft = null;
        }
        if (draft == null) width = null;
        if (prefillChunk < 1) throw new IllegalArgumentException("--prefill-chunk must be >= 1");
        if ((system != null || thinking || effort != null || reasoningBudget != null) && !chat) {
            // the flags given, as the user wrote them (not every flag that would need it)
            List<String> given = java.util.stream.Stream.of(system != null ? "--system" : null, thinking ? "--thinking" : null,
                    effort != null ? "--reasoning-effort" : null, reasoningBudget != null ? "--reasoning-budget" : null)
                    .filter(java.util.Objects::nonNull).toList();
            String named = given.size() == 1 ? given.getFirst()
                    : String.join(", ", given.subList(0, given.size() - 1)) + " and " + given.getLast();
            throw new IllegalArgumentException(named + (given.size() == 1 ? " needs" : " need")
                    + " --chat (the chat template; without it the prompt is plain text)");
        }
        // read as the API reads reasoning_effort, before the model loads; --thinking, an explicit switch, wins over none
        ReasoningEffort effortMode = effort == null ? null : ReasoningEffort.parse(effort);
        if (effort != null && effortMode == null)
            throw new IllegalArgumentException("--reasoning-effort must be " + ReasoningEffort.ACCEPTED + " (as the API's reasoning_effort), got '"
                    + effort + "'");
        if (effortMode != null && effortMode.thinking()) thinking = true;
        if (reasoningBudget != null && !thinking)
            throw new IllegalArgumentException(effortMode != null
                    ? "--reasoning-budget needs thinking, which --reasoning-effort " + effort + " turns off (the API accepts such a"
                            + " budget and leaves it unused)"
                    : "--reasoning-budget needs thinking (--chat with --thinking or --reasoning-effort)");
        if (reasoningBudget != null && reasoningBudget < 0)
            throw new IllegalArgumentException("--reasoning-budget must be >= 0, got " + reasoningBudget);
        BackendOptions bo = backendOptions();
        // the output constraint and the draft are read from the flags and files alone: a bad one is refused before a
        // model is made or loaded
        Grammar grammar = grammar();
        checkDraft();
        Path dir = source.model != null ? source.model : ModelStore.ensure(source.preset != null ? source.preset : "tiny", 1, err::println);
        // config.json and the weight files' presence, not the weights: what --top-k needs is known before the load
        io.ds4j.model.ModelConfig mc = DefaultModelProvider.checkModelFolder("--model", dir);
        Tokenizer tok = Tokenizers.forModel(dir);
        // the sampler keeps only ids both the model and the tokenizer have
        int topKMax = SamplingParams.topKMax(mc.vocabSize, tok.vocabSize());
        if (topK > topKMax)
            throw new IllegalArgumentException("--top-k must be in [-1, " + topKMax + "]" + SamplingParams.topKNote(topKMax) + ", got " + topK);
        // said once the flags are known to hold: a refused --top-k is the only line, not after a model line
        if (source.model == null) err.println("model: preset " + (source.preset != null ? source.preset : "tiny") + " (" + dir
                + "; random weights: the text is meaningless)");
        try (Backend be = open("--model", dir, bo); DraftSource ds = openDraft(be, dir, tok, bo)) {
            // a requested feature the backend could not honour is said, never dropped silently
            if (be.status().diagnostic() != null) err.println("warning: " + be.status().diagnostic());
            int V = be.config().vocabSize;
            sp.validate(Math.min(V, tok.vocabSize()));
            // a constraint's masks cover every id of the tokenizer, which the model's logits must hold: without this the
            // first step failed with "batch entry 0: an argmax mask of 2013 words is longer than the vocabulary's 16"
            if (grammar != null && tok.vocabSize() > V)
                throw new IllegalArgumentException((grammarFile != null ? "--grammar" : jsonSchema != null ? "--json-schema" : "--json-object")
                        + ": constrained decoding needs the model's vocabulary to hold the tokenizer's ids, but the tokenizer has "
                        + tok.vocabSize() + " tokens, more than the model's vocabulary of " + V + " (serve refuses such a model at load)");
            // as serve does: the context never exceeds what the model was built for
            int context = Generation.contextLimit(maxContext != null ? maxContext : 65536, be.config().maxPositionEmbeddings);
            if (maxContext != null && context < maxContext)
                err.println("context: " + context + " tokens (the model's max_position_embeddings; --max-context " + maxContext + " is capped)");
            if (ds != null && ds.maxContext() < context)
                err.println("draft: its context limit (" + ds.maxContext() + " tokens) is below the context in use (" + context
                        + "): drafts only while the context plus the draft tokens fits in it, then plain decoding");
            int[] ids;
            if (chat) {
                List<ChatMessage> msgs = new ArrayList<>();
                if (system != null) msgs.add(ChatMessage.system(system));
                msgs.add(ChatMessage.user(prompt));
                ChatOptions o = ChatOptions.defaults().withThinking(thinking);
                if (thinking && effortMode != null && effortMode.v4Effort() != null) o = o.withReasoningEffort(effortMode.v4Effort());
                // the message is plain text, as the server's: only the template's markers are control tokens
                ids = tok.encode(ChatEncoder.render(msgs, o));
            } else {
                // a plain prompt is the model's input as written, control tokens included (as /v1/completions)
                ids = tok.encode(prompt);
            }
            if (!chat) { // a plain completion starts with BOS, as the model was trained
                int[] b = new int[ids.length + 1];
                b[0] = tok.bosId();
                System.arraycopy(ids, 0, b, 1, ids.length);
                ids = b;
            }
            Sampler sampler = new Sampler(sp, V, ids, Math.min(V, tok.vocabSize()));
            // said up front, as serve's log says a max_tokens it caps: the context ends the output before -n does
            if (ids.length < context && (long) ids.length + maxTokens > context)
                err.println("note: -n " + maxTokens + " is more than the context leaves after the " + ids.length + "-token prompt ("
                        + context + " tokens in all): at most " + Math.max(0, context - ids.length) + " tokens, then finish length");
            StreamingDetokenizer detok = tok.streamer();
            StopStrings stops = new StopStrings(stop);
            // the parser's warnings are printed after the streamed text ends with its newline, not glued onto it
            OutputParser parser = chat ? Grammar.parser(grammar, thinking).logWarnings(false) : null;
            PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
            Draft d = ds == null ? null : ds.open(ids, sp, seed != null ? seed : 0);
            int[] eos = Generation.endIds(tok.eosId(), be.config());
            TokenConstraint constraint = constraint(grammar, tok, err);
            // the prefill progress line is on the terminal: it is erased before any text, which would share its line
            boolean[] progressShown = {false};
            Generation g = new Generation(be, be.newSequence(io.ds4j.engine.RollbackWindow.DEFAULT), ids, sampler, d, width,
                    new Generation.Options(prefillChunk, context, eos, io.ds4j.engine.RollbackWindow.DEFAULT),
                    (t, lp) -> {
                        boolean isEos = !ignoreEos && java.util.Arrays.stream(eos).anyMatch(e -> e == t);
                        String piece = isEos || hidden(t, tok, parser) ? "" : detok.push(t);
                        if (progressShown[0]) {
                            err.print("\r\033[K");
                            err.flush();
                            progressShown[0] = false;
                        }
                        emit(stops.push(piece), parser, out, err);
                        return !stops.stopped();
                    }, constraint);
            if (reasoningBudget != null)
                g.limitReasoning(new ReasoningBudget(tok.id(V4Format.THINK_END).orElseThrow(() -> new IllegalArgumentException(
                        "--reasoning-budget: the tokenizer has no " + V4Format.THINK_END + " token")), reasoningBudget, tok::tokenBytes));
            // a line redrawn with carriage returns and an erase sequence: for a terminal, not for a file or a pipe
            boolean progress = ids.length > prefillChunk && stderrIsTerminal();
            // the masks' time and count once the prefill is done (the first token's mask is computed in its step), so
            // that the decode steps' share is of their own masks: with few steps the prefill's mask made it over 100 %
            long[] masksAtDecode = {-1, 0};
            while (g.step()) {
                if (constraint != null && masksAtDecode[0] < 0 && !g.prefilling()) {
                    masksAtDecode[0] = constraint.maskNanos();
                    masksAtDecode[1] = constraint.maskCalls();
                }
                if (progress && g.prefilling()) {
                    err.printf("\rprefill %d/%d tokens", g.prefilledTokens(), ids.length);
                    progressShown[0] = true;
                }
                if (progress && !g.prefilling()) {
                    if (progressShown[0]) err.print("\r\033[K");
                    progressShown[0] = false;
                    progress = false;
                }
            }
            // -n cuts the text where it ends: inside a character (its first bytes are no text) and inside markup (not content)
            boolean cut = g.finish() == Generation.Finish.LENGTH;
            if (!stops.stopped()) emit(stops.push(detok.flush(cut)) + stops.flush(), parser, out, err);
            if (parser != null) for (OutputParser.Event ev : parser.finish(cut)) show(ev, out, err);
            out.println();
            out.flush();
            // the reasoning streamed to stderr: end its line so the warnings and the summary start their own
            if (reasoningOpen[0]) err.println();
            if (parser != null) for (String w : parser.warnings()) err.println("warning: DeepSeek-V4 output: " + w);
            Generation.SpecStats st = g.specStats();
            String spec = d == null ? "" : String.format(", draft %s q=%s: offered %d, accepted %d, acceptance %s, %s tokens/step",
                    ds.name(), width, st.offered(), st.accepted(), fmt(st.acceptanceRate(), "%.3f"), fmt(st.committedPerStep(), "%.2f"));
            // the JIT compiles the kernels while the first prompt is prefilled, so that rate is below a warm one
            String warmUp = FIRST_IN_PROCESS.getAndSet(false) ? " (first generation of this process: includes JIT warm-up)" : "";
            err.printf("prompt %d tokens, prefill %.1f tokens/s%s; generated %d tokens, decode %s tokens/s; finish %s%s%n",
                    ids.length, g.prefillTokensPerSecond(), warmUp, g.generatedTokens(), fmt(g.decodeTokensPerSecond(), "%.2f"),
                    g.finish().name().toLowerCase(), spec);
            if (constraint != null) {
                long steps = Math.max(1, st.steps());
                double decodeMs = g.decodeSeconds() * 1e3;
                double maskMs = constraint.maskNanos() / 1e6;
                // a generation that ended in its prefill step has no decode masks
                if (masksAtDecode[0] < 0) masksAtDecode = new long[]{constraint.maskNanos(), constraint.maskCalls()};
                double decodeMaskMs = (constraint.maskNanos() - masksAtDecode[0]) / 1e6;
                long decodeMasks = constraint.maskCalls() - masksAtDecode[1];
                err.printf("constraint: %d masks, %.3f ms per mask (%d from the per-state cache); decode %.3f ms per step over %d steps, "
                                + "of which masks %.3f ms per step (%d mask%s; the first token's came with the prefill) = %.1f %% of the step%n",
                        constraint.maskCalls(), maskMs / Math.max(1, constraint.maskCalls()), constraint.cacheHits(),
                        decodeMs / steps, steps, decodeMaskMs / steps, decodeMasks, decodeMasks == 1 ? "" : "s",
                        decodeMs > 0 ? 100 * decodeMaskMs / decodeMs : Double.NaN);
            }
        }
        return 0;
    }

    /**
     * The grammar of --json-schema / --json-object / --grammar, or null; reads and compiles the file, so that a missing
     * file, an unsupported keyword or a grammar the engine cannot enforce is refused before any model work.
     * @throws IllegalArgumentException naming the flag and what is wrong
     */
    private Grammar grammar() {
        if (jsonSchema == null && !jsonObject && grammarFile == null) return null;
        if ((jsonSchema != null ? 1 : 0) + (jsonObject ? 1 : 0) + (grammarFile != null ? 1 : 0) > 1)
            throw new IllegalArgumentException(grammarFile == null ? "--json-schema and --json-object exclude each other"
                    : "--grammar excludes --json-schema and --json-object (each holds the whole output)");
        Grammar gr;
        if (jsonObject) gr = Grammar.jsonObject();
        else if (grammarFile != null) gr = SchemaFiles.grammar(grammarFile).grammar();
        else gr = SchemaFiles.jsonSchema(jsonSchema).grammar();
        return thinking ? gr.afterThinking() : gr;
    }

    /** The output constraint of a {@link #grammar()} (null for none); builds the token trie up front (timed). */
    /**
     * Whether standard error is a terminal: on Linux where /proc/self/fd/2 leads to a terminal device; elsewhere, where a
     * console is attached (Java has no test for standard error alone).
     */
    static boolean stderrIsTerminal() {
        Path fd = Path.of("/proc/self/fd/2");
        if (Files.exists(fd, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
            try {
                String target = Files.readSymbolicLink(fd).toString();
                return target.startsWith("/dev/pts/") || target.startsWith("/dev/tty");
            } catch (java.io.IOException | UnsupportedOperationException e) {
                return false;
            }
        }
        return System.console() != null;
    }

    private static TokenConstraint constraint(Grammar gr, Tokenizer tok, PrintStream err) {
        if (gr == null) return null;
        long t0 = System.nanoTime();
        TokenTrie trie = TokenTrie.of(tok);
        err.printf("constraint: %s; token trie of %d ids, %d nodes built in %.0f ms (once per tokenizer)%n", gr, trie.vocab(), trie.nodes(),
                (System.nanoTime() - t0) / 1e6);
        return gr.constraint(tok);
    }

    /** A figure, or "n/a" when it is undefined (NaN: nothing offered, fewer than two tokens). */
    static String fmt(double v, String format) {
        return Double.isFinite(v) ? String.format(format, v) : "n/a";
    }

    /**
     * The backend options from the flags, checked by the feature gate before anything is loaded.
     * @throws IllegalArgumentException naming the flag and the problem
     */
    BackendOptions backendOptions() {
        if (gpuDevices < 1) throw new IllegalArgumentException("--gpu-devices: must be at least 1, got " + gpuDevices);
        if (gpuMemoryBudgetMiB < 0 || gpuMemoryBudgetMiB > Integer.MAX_VALUE)
            throw new IllegalArgumentException("--gpu-memory-budget-mib: must be in [0, " + Integer.MAX_VALUE + "], got " + gpuMemoryBudgetMiB);
        BackendOptions.ExpertPlacement placement;
        try {
            placement = BackendOptions.ExpertPlacement.parse(expertPlacement);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("--expert-placement: " + e.getMessage(), e);
        }
        BackendOptions o = new BackendOptions(gpuDevices, placement, BackendOptions.mib(gpuMemoryBudgetMiB), fusedVerifyF16Kv,
                BackendOptions.DEFAULT_SHORT_ROWS);
        List<String> refused = FeatureGate.BACKENDS.contains(backend) ? FeatureGate.check(backend, o) : List.of();
        if (!refused.isEmpty()) throw new IllegalArgumentException(String.join("; ", refused));
        return o;
    }

    /** Opens a model folder; a folder that is not a loadable model is blamed on the flag that named it. */
    private Backend open(String flag, Path dir, BackendOptions bo) throws Exception {
        try {
            return Backends.open(backend, dir, bo);
        } catch (io.ds4j.model.CheckpointException e) {
            throw new IllegalArgumentException(flag + ": " + e.getMessage(), e);
        }
    }

    /**
     * Checks --draft before any model work: ngram, mtp (whether the model has an MTP layer is known once it loads) or a
     * folder holding a model's config.json and weight files.
     * @throws IllegalArgumentException naming --draft and what is wrong
     */
    private void checkDraft() {
        if (draft == null || draft.equals("ngram") || draft.equals("mtp")) return;
        Path dd = Path.of(draft);
        // in serve's words for speculative.draft (DefaultModelProvider), less "none": generate without --draft has none
        if (!Files.isDirectory(dd))
            throw new IllegalArgumentException("--draft: must be \"ngram\", \"mtp\" or a model folder; "
                    + (Files.exists(dd) ? "not a folder: " : "folder not found: ") + dd.toAbsolutePath());
        try {
            io.ds4j.model.Checkpoint.inspect(dd);
        } catch (io.ds4j.model.CheckpointException e) {
            throw new IllegalArgumentException("--draft: " + e.getMessage(), e);
        }
    }

    private DraftSource openDraft(Backend target, Path targetDir, Tokenizer tok, BackendOptions bo) throws Exception {
        if (draft == null) return null;
        if (draft.equals("ngram")) return NgramDraft.source();
        if (draft.equals("mtp")) {
            try {
                return new io.ds4j.speculative.MtpDraftSource(target, io.ds4j.engine.RollbackWindow.DEFAULT);
            } catch (IllegalStateException | UnsupportedOperationException e) {
                throw new IllegalArgumentException("--draft mtp: " + e.getMessage(), e);
            }
        }
        Path dd = Path.of(draft);  // a folder checkDraft found holding a model
        Backend db = open("--draft", dd, bo.withF16KvVerify(false)); // the draft never runs verify steps
        try {
            ModelDraftSource.checkCompatible(target, db, tok.source(), Tokenizers.forModel(dd).source());
        } catch (IllegalArgumentException e) {
            db.close();
            throw e;
        }
        return new ModelDraftSource(db, "model:" + dd, 16);
    }

    /**
     * Whether a token's text is left out, as the server leaves it out of content: a control token, unless asked to
     * keep them or the chat parser reads it as markup (the reasoning's end, DSML). Ids past the tokenizer have no text.
     */
    private boolean hidden(int t, Tokenizer tok, OutputParser parser) {
        if (t < 0 || t >= tok.vocabSize()) return true;
        if (!skipSpecialTokens || !tok.isControl(t)) return false;
        return !(parser != null && parser.takesMarker(new String(tok.tokenBytes(t), StandardCharsets.UTF_8)));
    }

    private void emit(String text, OutputParser parser, PrintStream out, PrintStream err) {
        if (text.isEmpty()) return;
        if (parser == null) {
            out.print(text);
            return;
        }
        for (OutputParser.Event ev : parser.push(text)) show(ev, out, err);
    }

    /** Whether the reasoning printed on stderr so far leaves its last line unfinished. */
    private final boolean[] reasoningOpen = {false};

    private void show(OutputParser.Event ev, PrintStream out, PrintStream err) {
        switch (ev) {
            case OutputParser.ReasoningDelta r -> {
                err.print(r.text());
                if (!r.text().isEmpty()) reasoningOpen[0] = !r.text().endsWith("\n");
            }
            case OutputParser.ContentDelta c -> out.print(c.text());
            case OutputParser.ToolCallStart s -> out.print("\n[tool call " + s.name() + "] ");
            case OutputParser.ToolCallArgumentsDelta a -> out.print(a.fragment());
            default -> { }
        }
    }

    /**
     * A sampling refusal ("top_p: must be in (0, 1], got 0": every message starts with the API's name of the value) as
     * the flag that set it says it ("--top-p: ..."), since the user typed the flag.
     */
    static String asFlag(String message) {
        int c = message.indexOf(':');
        if (c <= 0) return message;
        String field = message.substring(0, c);
        String flag = field.equals("max_tokens") ? "-n / --max-tokens" : "--" + field.replace('_', '-');
        return flag + message.substring(c);
    }
}
