package io.ds4j.model;

import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assertions.assertEquals;

/** The RoPE tables reproduce the reference fp32 buffers bit for bit (spec 1.4, V4-Flash values). */
class RopeTest {
    static final String MAIN = "3f800000 3f3ff911 3f0ff59a 3ed7e89b 3ea1e89b 3e72d423 3e361887 3e088d77 3dcccccd 3d99940d 3d6655c2 3d2cba15 3d0186e3 3cc2434f 3c91ad39 3c5a7bf2 "
            + "3c23d70a 3bf5b9b0 3bb8449c 3b8a2e77 3b4f3e38 3b1b690d 3ae91528 3aaec98e 3a83126f 3a44948c 3a136a16 39dd1725 39a5cb60 3978a815 393a7753 390bd472";
    static final String COMPRESS = "3f800000 3f300a3a 3ef21c1f 3ea67d01 3e64f92e 3e1d7475 3dd88cb4 3d94e963 3d4ccccd 3d0cd4fb 3cc1b019 3c8530ce 3c372dbf 3bfbed88 3bad3d5e 3b6e4237 "
            + "3b147ae1 3ab714e0 3a5ebdb6 3a0530ce 399bb3af 39305978 38be904d 383e9b5f 37a3d70c 36b443d0 3677eba6 362a7be8 35ea77ff 35a13bdc 355dbf30 35187c4d";

    static ModelConfig flash() {
        ModelConfig c = ModelConfig.fromJson(new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode()
                .put("qk_rope_head_dim", 64).put("rope_theta", 10000).put("compress_rope_theta", 160000)
                .set("rope_scaling", new com.fasterxml.jackson.databind.ObjectMapper().createObjectNode()
                        .put("type", "yarn").put("factor", 16).put("original_max_position_embeddings", 65536)
                        .put("beta_fast", 32).put("beta_slow", 1)));
        return c;
    }

    @Test
    void mainTableMatchesReferenceBits() {
        check(MAIN, Rope.main(flash()));
    }

    @Test
    void compressYarnTableMatchesReferenceBits() {
        check(COMPRESS, Rope.compress(flash()));
    }

    private static void check(String hex, Rope rope) {
        String[] words = hex.trim().split("\\s+");
        assertEquals(32, rope.invFreq.length);
        for (int i = 0; i < 32; i++)
            assertEquals(words[i], String.format("%08x", Float.floatToRawIntBits(rope.invFreq[i])), "entry " + i);
    }
}
