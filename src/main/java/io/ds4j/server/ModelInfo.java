package io.ds4j.server;

import io.ds4j.engine.EngineStatus;
import io.ds4j.text.Tokenizer;

/**
 * The model facts the HTTP side uses (ids, limits, the tokenizer); never the backend or any sequence state.
 *
 * @param maxPositions the model's own context limit (max_position_embeddings)
 * @param draft        the draft source's name ("none", "ngram", "model:DIR")
 * @param engine       what the backend effectively does ({@link io.ds4j.engine.Backend#status()} after loading):
 *                     expert placement, verify attention path, diagnostics
 */
public record ModelInfo(String id, String path, boolean embedded, String backend, Tokenizer tokenizer, int vocabSize,
                        int maxPositions, int layers, int hidden, int experts, String draft, EngineStatus engine) {}
