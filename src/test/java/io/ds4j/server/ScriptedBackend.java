package io.ds4j.server;

import io.ds4j.engine.Backend;
import io.ds4j.engine.EngineStatus;
import io.ds4j.engine.Sequence;
import io.ds4j.model.ModelConfig;
import io.ds4j.model.synth.Presets;

import java.util.Arrays;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * A fake backend for server tests: after the prompt it makes exactly the tokens of a script the most likely ones
 * (then EOS), so greedy decoding — plain or speculative — reproduces the script. The script is chosen per sequence
 * from its prompt. It can sleep in every forward (to make requests slow) and fail on prompts containing a marker
 * (to test that one failing request does not affect others). Counts forwards and tokens so tests can tell whether
 * the engine kept working on a request.
 */
final class ScriptedBackend implements Backend {
    private final ModelConfig cfg = Presets.get("tiny");
    private final Function<int[], int[]> scriptFor;
    volatile long delayMs;
    /** While set, every forward waits for it to open (a test holds the engine thread inside a step); null = never. */
    volatile java.util.concurrent.CountDownLatch gate;
    /** Forwards that waited at the gate. */
    final java.util.concurrent.atomic.AtomicInteger gated = new java.util.concurrent.atomic.AtomicInteger();
    /** A prompt containing this token sequence makes forward throw (null = never). */
    volatile int[] failOn;
    /**
     * With {@link #failOn}: only the first sequence whose prompt holds the marker fails, later ones run as scripted (the
     * choices of one request share their prompt, and a test fails one of them).
     */
    volatile boolean failOnce;
    private final java.util.concurrent.atomic.AtomicBoolean failedOnce = new java.util.concurrent.atomic.AtomicBoolean();

    /** Fails the next sequence whose prompt holds the marker, and only that one ({@link #failOnce}). */
    void failOnceOn(int[] marker) {
        failedOnce.set(false);
        failOnce = true;
        failOn = marker;
    }
    final AtomicLong forwards = new AtomicLong(), tokens = new AtomicLong();
    /** Every sequence handed out, to tell which are still open. */
    private final java.util.List<Seq> sequences = java.util.Collections.synchronizedList(new java.util.ArrayList<>());
    /** What {@link #status()} reports (a test can make it a GPU backend's state, e.g. hybrid with a diagnostic). */
    volatile EngineStatus status = EngineStatus.cpu();

    /** @param scriptFor the tokens to generate for a given prompt (EOS follows them) */
    ScriptedBackend(Function<int[], int[]> scriptFor) {
        this.scriptFor = scriptFor;
    }

    @Override
    public String name() {
        return "scripted";
    }

    @Override
    public EngineStatus status() {
        return status;
    }

    @Override
    public ModelConfig config() {
        return cfg;
    }

    @Override
    public Sequence newSequence(int maxRollback) {
        Seq s = new Seq(maxRollback);
        sequences.add(s);
        return s;
    }

    /** Sequences not closed yet. */
    int openSequences() {
        synchronized (sequences) {
            return (int) sequences.stream().filter(s -> !s.closed).count();
        }
    }

    @Override
    public float[] forward(Sequence sequence, int[] toks, int off, int count, int[] logitRows) {
        Seq s = (Seq) sequence;
        if (s.closed) throw new IllegalStateException("sequence is closed");
        forwards.incrementAndGet();
        tokens.addAndGet(count);
        java.util.concurrent.CountDownLatch g = gate;
        if (g != null) {
            gated.incrementAndGet();
            try {
                if (!g.await(60, java.util.concurrent.TimeUnit.SECONDS)) throw new IllegalStateException("the test's gate stayed shut");
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (delayMs > 0) {
            try {
                Thread.sleep(delayMs);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        int n0 = s.len;
        s.append(toks, off, count);
        if (s.promptLen < 0 && logitRows.length > 0) {
            s.promptLen = s.len;
            int[] prompt = Arrays.copyOf(s.hist, s.len);
            int[] f = failOn;
            if (f != null && contains(prompt, f) && (!failOnce || failedOnce.compareAndSet(false, true))) {
                s.failing = true;
            }
            s.script = scriptFor.apply(prompt);
        }
        if (s.failing) throw new IllegalStateException("injected backend fault");
        int V = cfg.vocabSize;
        float[] lg = new float[logitRows.length * V];
        for (int r = 0; r < logitRows.length; r++) {
            int idx = n0 + logitRows[r] + 1 - s.promptLen;
            int next = idx >= 0 && idx < s.script.length ? s.script[idx] : cfg.eosTokenId;
            lg[r * V + next] = 50f; // so large that sampling at any temperature picks it
        }
        return lg;
    }

    private static boolean contains(int[] a, int[] pat) {
        outer:
        for (int i = 0; i + pat.length <= a.length; i++) {
            for (int j = 0; j < pat.length; j++) if (a[i + j] != pat[j]) continue outer;
            return true;
        }
        return false;
    }

    @Override
    public long stateBytes(int contextTokens, int maxRollback) {
        return 4L * contextTokens;
    }

    @Override
    public void close() {}

    private static final class Seq implements Sequence {
        final int maxRollback;
        int[] hist = new int[256];
        int len, promptLen = -1;
        int[] script = new int[0];
        volatile boolean closed;
        boolean failing;

        Seq(int maxRollback) {
            this.maxRollback = maxRollback;
        }

        void append(int[] t, int off, int n) {
            if (len + n > hist.length) hist = Arrays.copyOf(hist, Math.max(hist.length * 2, len + n));
            System.arraycopy(t, off, hist, len, n);
            len += n;
        }

        @Override
        public int length() {
            return len;
        }

        @Override
        public void rollback(int k) {
            if (k < 0 || k > rollbackable()) throw new IllegalArgumentException("cannot roll back " + k);
            len -= k;
        }

        @Override
        public int rollbackable() {
            return Math.min(maxRollback, len);
        }

        @Override
        public long stateBytes() {
            return 4L * len;
        }

        @Override
        public void close() {
            closed = true;
        }
    }
}
