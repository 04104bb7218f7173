package io.ds4j.server;

import io.ds4j.text.Tokenizer;

import java.util.function.Function;

/** Lets tests of other packages (the cluster's) serve the scripted model of {@link ScriptedBackend}. */
public final class ScriptedModelAccess {
    private ScriptedModelAccess() {}

    /**
     * A model named {@code scripted} that generates, after each prompt, the tokens {@code script} gives for it.
     * @param script the tokens to generate for a prompt (EOS follows them)
     */
    public static ModelProvider provider(Function<int[], int[]> script) {
        return TestServer.provider(new ScriptedBackend(script));
    }

    /** The scripted model's usual answers ({@link TestServer#defaultScript}). */
    public static int[] defaultScript(int[] prompt) {
        return TestServer.defaultScript(prompt);
    }

    /** The tokenizer the scripted model uses. */
    public static Tokenizer tokenizer() {
        return TestServer.tokenizer();
    }
}
