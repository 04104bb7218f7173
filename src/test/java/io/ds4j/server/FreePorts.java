package io.ds4j.server;

import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;

/**
 * Loopback ports for tests that start servers of their own.
 *
 * <p>Why not {@code new ServerSocket(0)} closed at once: two such calls may return the same port, and a port from the
 * kernel's ephemeral range (Linux: 32768–60999, {@code /proc/sys/net/ipv4/ip_local_port_range}) may be taken as the
 * source port of any outgoing connection (a cluster member dialling its peers) before the server binds it. Both
 * happened in CI: an engine process failed with "address already in use" on its gateway's port. So the ports are drawn
 * at random below the ephemeral range, each is bound to check it is free, and all are held until every one is found.
 */
public final class FreePorts {
    private static final int LOW = 20_000, HIGH = 32_000;

    private FreePorts() {
    }

    /**
     * {@code n} distinct loopback ports that were free a moment ago, below the kernel's ephemeral range.
     *
     * @throws IOException when {@code n} free ports are not found in 1,000 tries
     */
    public static int[] distinct(int n) throws IOException {
        List<ServerSocket> held = new ArrayList<>();
        try {
            for (int tries = 0; held.size() < n; tries++) {
                if (tries == 1_000) throw new IOException("no " + n + " free loopback ports in " + LOW + ".." + HIGH);
                int port = ThreadLocalRandom.current().nextInt(LOW, HIGH);
                try {
                    held.add(new ServerSocket(port, 1, InetAddress.getLoopbackAddress()));
                } catch (IOException taken) {
                    // in use (or held above): draw another
                }
            }
            int[] ports = new int[n];
            for (int i = 0; i < n; i++) ports[i] = held.get(i).getLocalPort();
            return ports;
        } finally {
            for (ServerSocket s : held) s.close();
        }
    }

    /** One loopback port that was free a moment ago, below the kernel's ephemeral range. */
    public static int one() throws IOException {
        return distinct(1)[0];
    }
}
