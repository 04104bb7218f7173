package io.ds4j.cpu;

import io.ds4j.model.ModelConfig;
import io.ds4j.model.ModelWeights;

/** Public access to the in-memory test models for tests in other packages. */
public final class TestModelsAccess {
    private TestModelsAccess() {}

    public static ModelConfig microConfig() {
        return TestModels.microConfig();
    }

    public static ModelWeights random(ModelConfig c, long seed) {
        return TestModels.random(c, seed);
    }
}
