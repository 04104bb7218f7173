package io.ds4j.server;

import io.ds4j.server.config.ServerConfig;

import java.util.function.Consumer;

/** Loads the model the server runs (the engine verticle calls it once, on its own thread). */
@FunctionalInterface
public interface ModelProvider {
    /**
     * @param config the startup configuration (model.*, speculative.draft; the backend is opened with
     *               {@link ServerConfig#backendOptions()}, and its {@link io.ds4j.engine.Backend#status()} is what
     *               /props and /metrics report)
     * @param log    receives progress lines worth logging
     * @throws Exception with a message naming what could not be loaded
     */
    LoadedModel load(ServerConfig config, Consumer<String> log) throws Exception;

    /**
     * Checks, quickly and before the server binds its port, what would certainly make {@link #load} fail: a model or
     * draft folder that does not exist or has no readable config.json or no weight files, a backend that cannot run on this machine.
     * The default checks nothing.
     * @throws Exception with a one-line message naming the setting and the problem, or a
     *                   {@link io.ds4j.server.config.ConfigException} naming each problem found, by its key
     */
    default void check(ServerConfig config) throws Exception {}

    /**
     * {@link #check}'s checks as far as they can be made while this server runs, opening no device (the running server
     * may be on it): the folders config names, and whether the runtime sees the device its backend needs. What a reload
     * that changes those restart keys can tell now of the next start. The default checks nothing.
     * @throws Exception as {@link #check}
     */
    default void checkNextStart(ServerConfig config) throws Exception {}

    /**
     * The vocabulary (token ids) of the model a {@code model.path} names, told before the model loads, so that the
     * start checks {@code sampling.top_k} against it with the configuration's other checks
     * ({@link ServerConfig.Vocabulary}); null when it cannot be told before the load (the engine then checks it once
     * the model has loaded). The default tells nothing.
     * @param modelPath the folder, or null for the embedded default model
     */
    default Integer vocabulary(String modelPath) {
        return null;
    }

    /**
     * The id clients will name the model by ({@link LoadedModel#id()}), told before the model loads, so that the
     * metrics registered at the start can carry it (vLLM's {@code model_name} label); null when it cannot be told
     * before the load (the series then carry no such label). The default: {@code model.name}.
     */
    default String servedId(ServerConfig config) {
        return config.modelName();
    }
}
