package io.ds4j.server;

import io.ds4j.server.config.ServerConfig;

import java.util.function.Consumer;

/** Loads the model the server runs (the engine verticle calls it once, on its own thread). */
@FunctionalInterface
public interface ModelProvider {
    /**
     * @param config the startup configuration (model.*, speculative.draft)
     * @param log    receives progress lines worth logging
     * @throws Exception with a message naming what could not be loaded
     */
    LoadedModel load(ServerConfig config, Consumer<String> log) throws Exception;
}
