package io.ds4j.server;

import org.junit.jupiter.api.Test;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.Arrays;

import static org.junit.jupiter.api.Assertions.*;

/** The test servers' ports: distinct, below the ephemeral range, and free to bind once returned. */
class FreePortsTest {
    @Test
    void portsAreDistinctBelowTheEphemeralRangeAndBindable() throws Exception {
        int[] ports = FreePorts.distinct(40);
        assertEquals(40, Arrays.stream(ports).distinct().count(), Arrays.toString(ports));
        for (int p : ports) {
            assertTrue(p >= 20_000 && p < 32_000, "port " + p);
            try (ServerSocket s = new ServerSocket(p, 1, InetAddress.getLoopbackAddress())) {
                assertEquals(p, s.getLocalPort());
            }
        }
    }
}
