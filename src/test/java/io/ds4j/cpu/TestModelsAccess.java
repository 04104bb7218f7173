package io.ds4j.cpu;

import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

/** Public access to the in-memory test models for tests in other packages. */
public final class TestModelsAccess {
    private TestModelsAccess() {}

    public static ModelConfig microConfig() {
        return TestModels.microConfig();
    }

    /** The micro config's dimensions with these layers, the first hashLayers of them hash-routed. */
    public static ModelConfig microConfig(int hashLayers, String... layerTypes) {
        return TestModels.microConfig(hashLayers, layerTypes);
    }

    public static ModelWeights random(ModelConfig c, long seed) {
        return TestModels.random(c, seed);
    }

    /** n token ids drawn uniformly from the vocabulary with the given seed (a prompt for tests). */
    public static int[] randomTokens(ModelConfig c, int n, long seed) {
        java.util.SplittableRandom r = new java.util.SplittableRandom(seed);
        int[] p = new int[n];
        for (int i = 0; i < n; i++) p[i] = r.nextInt(c.vocabSize);
        return p;
    }
}
