package io.ds4j.gpu;

import io.ds4j.model.ModelConfig;
import org.junit.jupiter.api.Test;

import static io.ds4j.gpu.bindings.ds4j_gpu_h.DS4J_COMPRESS_MAX_WIDTH;
import static org.junit.jupiter.api.Assertions.*;

/**
 * The GPU backend refuses, before uploading anything, a model whose compressed entries are wider than the compressor
 * pooling takes ({@link HipBackend#requireCompressorWidths}, DS4J_COMPRESS_MAX_WIDTH in ds4j_gpu.h), naming the key.
 * No GPU needed.
 */
class CompressorWidthTest {
    @Test
    void v4FlashWidthsAreTaken() {
        ModelConfig c = new ModelConfig();  // V4-Flash's defaults: head_dim 512, index_head_dim 128
        assertDoesNotThrow(() -> HipBackend.requireCompressorWidths(c));
        c.headDim = DS4J_COMPRESS_MAX_WIDTH();
        c.indexHeadDim = DS4J_COMPRESS_MAX_WIDTH();
        assertDoesNotThrow(() -> HipBackend.requireCompressorWidths(c));
    }

    @Test
    void widerEntriesAreRefusedByName() {
        ModelConfig c = new ModelConfig();
        c.headDim = DS4J_COMPRESS_MAX_WIDTH() + 1;
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> HipBackend.requireCompressorWidths(c));
        assertTrue(e.getMessage().contains("head_dim " + (DS4J_COMPRESS_MAX_WIDTH() + 1)), e.getMessage());
        ModelConfig d = new ModelConfig();
        d.indexHeadDim = 2 * DS4J_COMPRESS_MAX_WIDTH();
        e = assertThrows(IllegalArgumentException.class, () -> HipBackend.requireCompressorWidths(d));
        assertTrue(e.getMessage().contains("index_head_dim " + 2 * DS4J_COMPRESS_MAX_WIDTH()), e.getMessage());
    }
}
