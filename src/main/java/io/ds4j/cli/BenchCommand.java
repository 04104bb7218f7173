package io.ds4j.cli;

import io.ds4j.bench.BenchReport;
import io.ds4j.bench.VerifyPathBench;
import io.ds4j.engine.Backend;
import io.ds4j.engine.BackendOptions;
import io.ds4j.engine.FeatureGate;
import io.ds4j.app.Backends;
import io.ds4j.app.DefaultModelProvider;
import io.ds4j.model.AttentionKind;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.synth.ModelStore;
import io.ds4j.model.synth.Presets;
import io.ds4j.model.synth.RandomCheckpoint;
import picocli.CommandLine;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;
import picocli.CommandLine.Spec;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;

/**
 * {@code ds4j bench}: the F16-KV verifier's matched benchmark — per input length, the control
 * ({@code f32-convert}) and the {@code f16} verify attention path: prefill tokens/s, speculative decode tokens/s with
 * a copy of the target as the draft, acceptance rate and verifier agreement. Writes a Markdown table, a JSON file and
 * an SVG chart ({@link BenchReport}). A benchmark: asserts nothing. On the GPU machine:
 * {@code tools/device/run.sh ds4j bench ...}.
 */
@Command(name = "bench", mixinStandardHelpOptions = true,
        description = "Matched benchmark of the verify attention paths (control f32-convert vs the F16-KV verifier): "
                + "prefill and speculative decode tokens/s, acceptance rate, verifier agreement; writes a Markdown table, JSON and an SVG chart.")
public final class BenchCommand implements Callable<Integer> {
    @Option(names = "--backend", defaultValue = "hip", description = "cpu or hip (default ${DEFAULT-VALUE}); only hip has both paths") String backend;
    @Option(names = "--model", paramLabel = "DIR", description = "model directory (default: a preset, created on first use)") Path model;
    @Option(names = "--preset", description = "preset when no --model (default: flash-shaped, a GPU benchmark's model of V4-Flash's "
            + "dimensions, about 18 GB at 43 layers; small on --backend cpu)") String preset;
    @Option(names = "--layers", description = "layers of the preset (default: the preset's, 43 for flash-shaped)") Integer layers;
    @Option(names = "--experts", description = "routed experts per layer of the preset (default: the preset's)") Integer experts;
    @Option(names = "--dtype", defaultValue = "fp8", description = "preset storage: fp8 (FP8 dense + FP4 experts, as released) or bf16 (default ${DEFAULT-VALUE})") String dtype;
    @Option(names = "--lengths", defaultValue = "4096,59933,122879", split = ",", description = "input lengths in tokens, up to the model's context (V4: 1,048,576; default ${DEFAULT-VALUE})") List<Integer> lengths;
    @Option(names = "--synthetic-above", defaultValue = "122879", description = "lengths above this get a synthetic context (random cache rows, marked in the table) instead of a prefill (default ${DEFAULT-VALUE})") int syntheticAbove;
    @Option(names = "--q", defaultValue = "4", description = "draft tokens per verify step (default ${DEFAULT-VALUE})") int q;
    @Option(names = "--decode-tokens", defaultValue = "256", description = "tokens emitted in each timed decode, at least (whole verify steps of q + 1 tokens; default ${DEFAULT-VALUE})") int decodeTokens;
    @Option(names = "--agreement-steps", defaultValue = "200", description = "verify rounds compared between the paths per length (default ${DEFAULT-VALUE})") int agreementSteps;
    @Option(names = "--drafts", defaultValue = "copy,replay", split = ",", description = "drafts per length and path: copy (a copy of the target) and replay (the target's own greedy output of the copy run replayed as a predicted output: a near-free draft; default ${DEFAULT-VALUE})") List<String> drafts;
    @Option(names = "--chunk", defaultValue = "2048", description = "prefill chunk in tokens (default ${DEFAULT-VALUE})") int chunk;
    @Option(names = "--f32-short-context-rows", defaultValue = "512", description = "attended rows up to which attention stays in plain F32 on both paths, tensor cores above (default ${DEFAULT-VALUE})") int shortRows;
    @Option(names = "--seed", defaultValue = "1", description = "model and prompt seed (default ${DEFAULT-VALUE})") long seed;
    @Option(names = "--out", defaultValue = "out/bench", description = "output folder (default ${DEFAULT-VALUE}; the committed figures are in docs/bench)") Path out;
    @Option(names = "--render", paramLabel = "FILE.json", split = ",", description = "only render earlier runs' JSON again: writes NAME.md, NAME.svg (and the JSON) into --out (default out/bench); several files (comma-separated) make one table, rows ordered by input length, the setup of the first with every run's command; no model, no GPU") List<Path> render;
    @Option(names = "--name", defaultValue = "verify-f16kv", description = "file name stem (default ${DEFAULT-VALUE})") String name;
    @Spec CommandLine.Model.CommandSpec spec;

    /** The options a render reads; every other one sets up a run, which a render does not make. */
    private static final List<String> RENDER_OPTIONS = List.of("--render", "--out", "--name");

    @Override
    public Integer call() throws Exception {
        if (render != null) {
            // an option of a run given beside --render would be silently unused: the rendered figures are the inputs'
            for (CommandLine.Model.OptionSpec o : spec.commandLine().getParseResult().matchedOptions())
                if (!RENDER_OPTIONS.contains(o.longestName()))
                    throw new IllegalArgumentException(o.longestName() + " does not apply beside --render, which only"
                            + " renders the runs in its files again (their setup is in them): leave it out, or run the"
                            + " benchmark without --render");
            // the inputs first: a refused render leaves no --out folder behind
            for (int i = 0; i < render.size(); i++) {
                Path p = render.get(i);
                if (p.toString().isBlank()) throw new IllegalArgumentException("--render: an empty file name (expected FILE.json[,FILE.json...])");
                if (!java.nio.file.Files.isRegularFile(p)) throw new IllegalArgumentException("--render: file not found: " + p);
                // a run given twice would be refused later as two runs of the same lengths, which misleads
                for (Path earlier : render.subList(0, i))
                    if (Files.isSameFile(earlier, p))
                        throw new IllegalArgumentException("--render: " + p + " is given twice" + (earlier.equals(p) ? "" : " (as " + earlier + ")"));
                // the merged result would replace an input before it is read again (a second render of the same command
                // merges the merged file): the same file by its real path, however either is written or linked
                for (Path f : BenchReport.files(out, name))
                    if (Files.exists(f) && Files.isSameFile(f, p))
                        throw new IllegalArgumentException("--render: " + p + (f.equals(p) ? "" : " is " + f + ", which")
                                + " the rendered result replaces; give another --out or --name");
            }
            checkOut(out, name);
            BenchReport rep;
            try {
                rep = BenchReport.fromJson(render.get(0));
                for (Path p : render.subList(1, render.size())) rep = rep.merge(BenchReport.fromJson(p));
            } catch (java.io.IOException | IllegalArgumentException e) {
                throw new IllegalArgumentException("--render: " + e.getMessage(), e);
            }
            System.out.print(rep.markdown());
            for (Path p : rep.write(out, name)) System.out.println("wrote " + p);
            return 0;
        }
        if (model == null && preset == null) {
            // flash-shaped is the GPU's benchmark model (18 GB at 43 layers): on the CPU it takes hours to write and run
            preset = backend.equals("cpu") ? "small" : "flash-shaped";
            if (backend.equals("cpu")) System.err.println("bench: --backend cpu without --preset: using the small preset "
                    + "(the default flash-shaped is a GPU benchmark's model; give --preset flash-shaped to run it here)");
        }
        VerifyPathBench.Options o = new VerifyPathBench.Options(lengths, q, decodeTokens, agreementSteps, chunk, seed, syntheticAbove, drafts);
        RandomCheckpoint.Storage storage = RandomCheckpoint.Storage.parse(dtype);
        Backends.checkAvailable(backend);  // before the model: a machine without the GPU is told so, not after 18 GB
        BackendOptions bo = new BackendOptions(1, BackendOptions.ExpertPlacement.MONOLITHIC, 0, false, shortRows);
        // the context is known from the preset or config.json: a length past it is refused before a model is made
        ModelConfig planned = model != null ? DefaultModelProvider.checkModelFolder("--model", model) : Presets.get(preset, layers, experts);
        VerifyPathBench.checkContext(planned.maxPositionEmbeddings, o,
                o.agreementSteps() > 0 && FeatureGate.f16KvVerifierPossible(backend, bo.devices()));
        // the results are written at the end of a run that may take hours: where they go is checked before it starts
        checkOut(out, name);
        if (model == null && backend.equals("cpu") && preset.equals("flash-shaped"))
            System.err.println(cpuWarning(planned, storage, seed));
        Path dir = model != null ? model : ModelStore.ensureVariant(preset, layers, experts, storage, seed, System.err::println);
        try (Backend be = Backends.open(backend, dir, bo)) {
            ModelConfig c = be.config();
            Map<String, String> setup = new LinkedHashMap<>();
            setup.put("title", be.verifyAttentionPaths().size() > 1 ? "ds4j verify attention: f32-convert (control) vs f16 (F16-KV verifier)"
                    : "ds4j speculative decoding on backend " + be.name() + " (one verify attention path)");
            setup.put("date", LocalDate.now().toString());
            setup.put("machine", machine(be));
            setup.put("model", describe(c, model != null ? "as stored in " + dir : storage));
            setup.put("draft", "a copy of the target (same weights, its cache forked from the prefilled target), greedy"
                    + (o.drafts().contains(VerifyPathBench.REPLAY) ? "; replay: the target's own greedy output of the copy run"
                    + " replayed as a predicted output (io.ds4j.speculative.PredictionDraft) from a fork of the prefilled target" : ""));
            setup.put("q", q + " draft tokens per verify step (" + (q + 1) + " rows verified per step)");
            // the two paths' parts of the method only where the backend has both (one path: no agreement, no conversion)
            boolean both = be.verifyAttentionPaths().size() > 1;
            setup.put("method", String.format(Locale.ROOT, "prefill of seeded random tokens in chunks of %d (timed to the last logits), lengths above %d synthetic (random cache rows, no prefill); "
                    + "decode: %d tokens after one warm-up round, draft and verify steps timed together; ", chunk, syntheticAbove, decodeTokens)
                    + (!both ? "one verify attention path (no agreement rounds, no conversion)"
                    : String.format(Locale.ROOT, "agreement: %d rounds verified by both paths on the same rows, each path's step timed, the"
                    + " paths taking turns at going first (the verify step in alternation: each path's median over them, and the"
                    + " median of the rounds' differences with a distribution-free 95 %% interval); control's"
                    + " conversion: its per-step F16 -> F32 copies timed alone, the host launching each (median of 5), and as its"
                    + " graph-replayed verify steps of q + 1 rows launch them (grouped, at the step's bounds), replayed from a captured"
                    + " graph without the host's launches (mean of 20 replays; where graphs are on); f32ShortContextRows %d", agreementSteps, shortRows)));
            if (both)
                setup.put("conversion_graph", String.format(Locale.ROOT, "the grouped copies (ds4j_f16_to_f32_seqs) a control"
                        + " verify step of %d rows launches at its bounds, as its kept graph replays them", q + 1));
            setup.put("command", "ds4j bench " + String.join(" ", commandLine()));
            System.out.println("model: " + setup.get("model"));
            System.out.println("machine: " + setup.get("machine"));
            List<VerifyPathBench.Row> rows = VerifyPathBench.run(be, o, System.out);
            BenchReport rep = new BenchReport(setup, rows);
            System.out.println();
            System.out.print(rep.markdown());
            for (Path p : rep.write(out, name)) System.out.println("wrote " + p);
        }
        return 0;
    }

    /**
     * Checks that the results can be written into {@code --out} as {@code --name}.md/.json/.svg, creating the folder
     * (as the write would) and writing a probe file into it, so that a file in the folder's place, a folder that cannot
     * be created or written (a read-only or pseudo file system, an immutable folder) or a result name taken by a folder
     * is refused before any work rather than after the whole run. Earlier results of the same name are replaced, as
     * the write replaces them.
     * @throws IllegalArgumentException naming the flag, the path and what is wrong
     */
    static void checkOut(Path out, String name) {
        if (name.isBlank() || name.contains("/") || name.equals(".") || name.equals(".."))
            throw new IllegalArgumentException("--name must be a file name without a folder (NAME.md, NAME.json and NAME.svg "
                    + "are written into --out), got '" + name + "'");
        String what = " (bench writes " + name + ".md, " + name + ".json and " + name + ".svg into the folder --out names)";
        // a link to nothing is not "already there" in any useful sense: creating the folder would fail as if it were
        if (Files.isSymbolicLink(out) && !Files.exists(out))
            throw new IllegalArgumentException("--out " + out + ": a broken link (to " + linkTarget(out) + ", which does not exist); give a folder");
        if (Files.exists(out) && !Files.isDirectory(out))
            throw new IllegalArgumentException("--out " + out + ": it exists and is not a folder" + what);
        try {
            Files.createDirectories(out);
        } catch (IOException e) {
            throw new IllegalArgumentException("--out " + out + ": cannot create the folder: " + reason(e), e);
        }
        for (Path f : BenchReport.files(out, name)) {
            if (Files.exists(f) && !Files.isRegularFile(f))
                throw new IllegalArgumentException("--out " + out + ": " + f.getFileName() + " exists and is not a file" + what);
            // the results are written through a link, so one to nothing fails only at the write, after the whole run
            if (Files.isSymbolicLink(f) && !Files.exists(f))
                throw new IllegalArgumentException("--out " + out + ": " + f.getFileName() + " is a broken link (to " + linkTarget(f)
                        + ", which does not exist); remove it, or give another --out or --name");
        }
        try {
            Files.delete(Files.createTempFile(out, "." + name + "-", ".probe"));
        } catch (IOException e) {
            throw new IllegalArgumentException("--out " + out + ": cannot write into the folder: " + reason(e), e);
        }
        for (Path f : BenchReport.files(out, name))
            if (Files.exists(f) && !Files.isWritable(f))
                throw new IllegalArgumentException("--out " + out + ": " + f.getFileName() + " exists and cannot be replaced (permission denied)");
    }

    /** Where a symbolic link leads, as it is written, or "?" where it cannot be read. */
    private static String linkTarget(Path link) {
        try {
            return Files.readSymbolicLink(link).toString();
        } catch (IOException | UnsupportedOperationException e) {
            return "?";
        }
    }

    /** Why a file-system call failed, in words (its message is often only the path). */
    private static String reason(IOException e) {
        return e instanceof java.nio.file.FileSystemException f ? Main.reason(f) : String.valueOf(e.getMessage());
    }

    /**
     * What --preset flash-shaped on the CPU is about to use, said before the model is made: its size on disk and that
     * the tiny and small presets suit the CPU.
     */
    public static String cpuWarning(ModelConfig planned, RandomCheckpoint.Storage storage, long seed) {
        var naming = storage == RandomCheckpoint.Storage.FP8 ? io.ds4j.model.TensorNames.Scheme.ORIGINAL : io.ds4j.model.TensorNames.Scheme.HF;
        long bytes = new RandomCheckpoint(planned, seed, naming, storage).totalBytes();
        return String.format(Locale.ROOT, "bench: --preset flash-shaped on --backend cpu: a GPU benchmark's model of %d layers, "
                + "%.1f GB on disk (created on first use in %s), which the CPU runs for hours; --preset tiny or --preset small "
                + "suit the CPU", planned.numLayers, bytes / 1e9, ModelStore.root());
    }

    private List<String> commandLine() {
        List<String> a = new ArrayList<>(List.of("--backend", backend));
        if (model != null) a.addAll(List.of("--model", model.toString()));
        else {
            a.addAll(List.of("--preset", preset, "--dtype", dtype));
            if (layers != null) a.addAll(List.of("--layers", layers.toString()));
            if (experts != null) a.addAll(List.of("--experts", experts.toString()));
        }
        a.addAll(List.of("--lengths", String.join(",", lengths.stream().map(String::valueOf).toList()), "--q", "" + q,
                "--decode-tokens", "" + decodeTokens, "--agreement-steps", "" + agreementSteps, "--chunk", "" + chunk,
                "--drafts", String.join(",", drafts)));
        return a;
    }

    static String machine(Backend be) {
        if (be instanceof io.ds4j.gpu.HipBackend h) return "GPU " + h.gpu();
        return String.format(Locale.ROOT, "CPU, %d cores (%s %s), Java %s", Runtime.getRuntime().availableProcessors(),
                System.getProperty("os.name"), System.getProperty("os.arch"), System.getProperty("java.version"));
    }

    static String describe(ModelConfig c, Object dtype) {
        StringBuilder kinds = new StringBuilder();
        for (AttentionKind k : c.layerTypes) kinds.append(kinds.isEmpty() ? "" : ", ").append(switch (k) {
            case SLIDING -> "S";
            case CSA -> "C";
            case HCA -> "H";
        });
        String dt = dtype == RandomCheckpoint.Storage.FP8
                ? "FP8 e4m3 dense with 128x128 E8M0 scales, FP4 e2m1 routed experts with 1x32 scales, BF16 embedding/head/compressors"
                : dtype == RandomCheckpoint.Storage.BF16 ? "BF16" : String.valueOf(dtype);
        return String.format(Locale.ROOT, "D %d, %d layers [%s], %d routed experts (%d per token), window %d, CSA/HCA ratios %d/%d, index top-k %d; %s",
                c.hidden, c.numLayers, kinds, c.numExperts, c.expertsPerToken, c.slidingWindow, c.csaRatio, c.hcaRatio,
                c.indexTopk, dt);
    }
}
